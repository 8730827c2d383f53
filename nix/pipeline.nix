# The stage chain, written once as a function of a toolchain provider (nix/README.md):
#
#   gateway-instrumented -> gateway-training -> gateway-profile -> gateway-pgo
#     -> gateway-bolt-instrumented -> gateway-bolt-training -> gateway-bolt-profile
#     -> gateway-pgo-bolt (bin/gateway + share/gateway/proof.json)
#
# Each stage is its own derivation, so each is cached, inspectable and rebuilt only when its
# inputs change; a failing stage fails everything after it, and nothing falls back to a plain build.
{
  toolchain,
  # The shapes directory (shape files and payloads); the holdout shape is never trained.
  shapes,
}:
let
  stages = import ./stages { inherit toolchain; };

  # Linker flag of the stages BOLT rewrites: `--emit-relocs` keeps the relocations it needs.
  emitRelocs = "-Clink-args=-Wl,--emit-relocs";
in
rec {
  inherit (toolchain) versions;

  # The plain fat-LTO build: the baseline every PGO/BOLT figure is measured against.
  gateway = toolchain.buildPackage { pname = "gateway"; package = "gateway"; rustflags = ""; };

  # The in-batch control leg of the bench: plain, but linked like the optimized stages.
  gateway-emit-relocs = toolchain.buildPackage {
    pname = "gateway-emit-relocs";
    package = "gateway";
    rustflags = emitRelocs;
  };

  trainer = toolchain.buildPackage { pname = "trainer"; package = "trainer"; rustflags = ""; };

  gateway-instrumented = stages.instrumented { };

  gateway-training = stages.training {
    name = "gateway-training";
    kind = "llvm";
    gateway = gateway-instrumented;
    inherit trainer shapes;
  };

  gateway-profile = stages.profile { training = gateway-training; inherit versions; };

  gateway-pgo = stages.pgo { profile = gateway-profile; inherit emitRelocs; };

  gateway-bolt-instrumented = stages.bolt-instrument {
    pgo = gateway-pgo;
    inherit versions;
  };

  gateway-bolt-training = stages.training {
    name = "gateway-bolt-training";
    kind = "bolt";
    gateway = gateway-bolt-instrumented;
    inherit trainer shapes;
  };

  gateway-bolt-profile = stages.bolt-profile { training = gateway-bolt-training; inherit versions; };

  gateway-pgo-bolt = stages.bolt-optimize {
    pgo = gateway-pgo;
    profile = gateway-profile;
    boltProfile = gateway-bolt-profile;
    inherit trainer versions;
  };

  # Not part of the artifact: the gate that the optimized build is no slower on held-out work.
  holdout = stages.holdout {
    plain = gateway;
    optimized = gateway-pgo-bolt;
    inherit trainer shapes;
  };

  # The stage functions and their inputs, for compositions such as nix/tests/fail-closed.nix.
  inherit stages toolchain shapes;
}
