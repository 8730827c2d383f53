# The gateway's chain: the library's builder (nix/lib/build-chain.nix) applied to the gateway, with
# the gateway's own stages beside it (nix/gateway/): its training driver (`trainer train` on the
# shapes against its mock upstream), the coverage gate every profile and the artifact wait for,
# the holdout gates on its shapes, the measurement variants and the bench's control build. The
# stages keep their gateway-* names:
#
#   gateway-instrumented -> gateway-training (check) ------------------------------.
#   profiles/<target>/rust-<release>/llvm -> gateway-profile -> gateway-pgo         |
#     -> gateway-bolt-instrumented -> gateway-bolt-training (check) ---------------+
#   profiles/<target>/rust-<release>/bolt + gateway-pgo -> gateway-bolt-profile     |
#     -> gateway-pgo-bolt (bin/gateway + share/gateway/proof.json) <-----------------'
#
# The optimized stages consume the pinned profiles committed under profiles/, keyed by what
# determines them (Rust release, target, codegen settings; not the provider); the training checks
# train afresh and fail when the pinned profiles are stale. Where no profile is pinned for the
# build's key (another Rust release, a target without profiles yet), the chain trains in the
# sandbox instead (gateway-profile-fresh, gateway-bolt-profile-fresh, which the refresh command
# also uses) and builds from that: the proof marker says "trained in build" with the reason, and
# the release check refuses it.
{
  toolchain,
  # The shapes directory (shape files and payloads); the holdout shape is never trained.
  shapes,
  # The pinned profiles { llvm, bolt, where }: store paths of their directories, or null where
  # there is none (then that profile is trained in the build), and where they would be under
  # profiles/ (nix/lib/pinned-profiles.nix finds them in the repository's profiles/). `why`, if
  # set, replaces "no pinned profile at <where>" as the reason a profile was trained in the build.
  pinned,
  # The command that rewrites profiles/ from fresh training runs; every stale-profile failure
  # names it.
  refreshCommand,
  # Cargo features of every gateway build (an allocator variant, see `variants`); none for the
  # release.
  features ? [ ],
  # The coverage gate's output to depend on instead of this chain's own `gateway-coverage`: only
  # for a measurement variant trained on a subset of a covered shapes directory (`variants`).
  coverage ? null,
  # Link the instrumented build with fat LTO (nix/stages/instrumented.nix): only for measuring
  # what linking it without saves (bench/chain-cost).
  instrumentedFatLto ? false,
}:
let
  gatewayStages = import ./gateway { inherit toolchain; };

  # A cross chain: the target's binaries run on this builder only through the toolchain's
  # emulator (nix/stages/emulated.nix), the trainer is built for the builder, and the gates that
  # time or count the binaries natively (holdout, instructions) are not defined.
  cross = (toolchain.emulator or null) != null;
  notOnTheBuilder =
    attr:
    throw "${attr} measures the ${toolchain.target} binaries natively, which this builder cannot run (docs/aarch64.md: instructions under emulation)";

  # Least reduction of instructions per request, released vs plain, in percent: 3 x the sum of
  # the two binaries' largest measured run-to-run spread (0.82% each, nix/README.md).
  minInstructionReduction = 5;

  # The shape the bench and the instruction gate measure first (shapes/README.md).
  boardShape = "chat-minimal";

  # Built for the builder, which runs them: the engine every stage of the chain runs, and the
  # gateway's driver (its training command, the coverage gate, the holdout gates).
  forBuilder = if cross then { forHost = true; } else { };
  pgo-engine = toolchain.buildPackage ({ pname = "pgo-engine"; package = "pgo-engine"; rustflags = ""; } // forBuilder);
  trainer = toolchain.buildPackage ({ pname = "trainer"; package = "trainer"; rustflags = ""; } // forBuilder);

  chain = import ./lib/build-chain.nix {
    inherit toolchain pinned refreshCommand features instrumentedFatLto;
    engine = pgo-engine;
    package = "gateway";
    # The workspace's manifest: its [profile.release] is the gateway's.
    cargoToml = ../Cargo.toml;
    # What of the workspace the gateway is built from: the source digests of the manifests and
    # the marker cover these (comparable with the pinned manifests').
    sourceInclude = [
      "Cargo.toml"
      "Cargo.lock"
      "gateway/Cargo.toml"
      "gateway/src"
      "third_party/hyper/Cargo.toml"
      "third_party/hyper/src"
    ];
    trainingCommand = gatewayStages.training { inherit trainer shapes; };
    trainingInputs = shapes;
    pinKeep = [
      "function-coverage.json"
      "function-coverage.txt"
    ];
    # Least overlap of a fresh training with the pinned profile over the counters its two contrast
    # trainings agree on, in percent (nix/README.md, "Thresholds"): profiles pinned on an AMD EPYC,
    # trained on an Intel Xeon under any perturbation of the table, overlapped by 99.1-99.6%
    # (LLVM) and 98.7-99.6% (BOLT), in the chain beside the PGO build by 98.6% (LLVM); the
    # fail-closed stale profiles by 83.7% and 65.5%, the moved hot path by 67.4% and 64.5%. Each
    # threshold allows about three times the largest shortfall between the machines (1.4 points)
    # and is 11 points or more above every stale case.
    thresholds = {
      llvmMinOverlap = 95.0;
      boltMinOverlap = 95.0;
      inherit minInstructionReduction;
    };
    # Through the emulator, the gateway lists its request paths.
    smoke = {
      args = "paths";
      check = ''
        grep -q '"combinations"' smoke.out \
          || fail "the ${toolchain.target} gateway printed no request paths through its emulator: $(head -c 300 smoke.out)"'';
    };
    # The coverage gate: every request path and posture the gateway lists has a training shape,
    # and every shape names one it serves. The artifact and the fresh profiles depend on it.
    trainingGate = self: {
      stage =
        if coverage != null then
          coverage
        else
          gatewayStages.coverage {
            gateway = self.runnable "gateway-instrumented" self.instrumented;
            inherit trainer shapes;
          };
      report = "request-paths.json";
      what = "the coverage gate";
    };
    # The LLVM profile's function coverage (the share of the gateway crate's functions reached,
    # and the request-path functions no shape reaches), pinned beside it.
    freshReports =
      kind:
      if kind == "llvm" then
        ''
          ${trainer}/bin/trainer profile-coverage \
            --proftext "$out/gateway.proftext" \
            --json "$out/function-coverage.json" \
            > "$out/function-coverage.txt" \
            || fail "trainer profile-coverage cannot read the fresh profile"
          cat "$out/function-coverage.txt"
        ''
      else
        "";
  };
in
rec {
  inherit (chain) versions codegenKey thresholds toolchain pinned refreshCommand;
  inherit pgo-engine trainer shapes chain;
  # The stage functions: the chain's and the gateway's own, for compositions such as
  # nix/tests/fail-closed.nix.
  stages = chain.stages // gatewayStages;

  # The plain fat-LTO build: the baseline every PGO/BOLT figure is measured against.
  gateway = chain.plain;

  # The in-batch control leg of the bench: plain, but linked like the optimized stages.
  gateway-emit-relocs = toolchain.buildPackage {
    pname = "gateway-emit-relocs";
    package = "gateway";
    rustflags = "-Clink-args=-Wl,--emit-relocs";
    inherit features;
  };

  gateway-coverage = chain.gate.stage;
  gateway-instrumented = chain.instrumented;
  gateway-profile = chain.profile;
  gateway-training = chain.training;
  gateway-pgo = chain.pgo;
  gateway-bolt-instrumented = chain.bolt-instrumented;
  gateway-bolt-profile = chain.bolt-profile;
  gateway-bolt-training = chain.bolt-training;
  gateway-pgo-bolt = chain.pgo-bolt;
  # The release rule (the flake's hydraJobs.release and the release workflow require it).
  release-check = chain.release-check;
  gateway-profile-fresh = chain.profile-fresh;
  gateway-bolt-profile-fresh = chain.bolt-profile-fresh;

  # Not part of the artifact: the gates that the optimized build is faster on held-out work.
  # Instructions per request under cachegrind: deterministic, for every machine.
  holdout-instructions = if cross then notOnTheBuilder "holdout-instructions" else gatewayStages.instructions-gate {
    plain = gateway;
    optimized = gateway-pgo-bolt;
    minReduction = minInstructionReduction;
    inherit trainer shapes;
  };

  # Wall-clock bench: for benchmark builders only.
  holdout = if cross then notOnTheBuilder "holdout" else gatewayStages.holdout {
    plain = gateway;
    optimized = gateway-pgo-bolt;
    inherit trainer shapes;
  };

  # Measurement variants for bench/report (docs/bench-results), never the artifact and not Hydra
  # jobs: the chain again with another allocator, or trained on the board shape alone (with the
  # holdout, which is never trained), each with its own plain build and its optimized stages built
  # from profiles trained in its build (a variant's profiles are never pinned).
  # `nix/offline/build variants.jemalloc.gateway-pgo-bolt`.
  variants =
    let
      freshlyTrained =
        args:
        import ./pipeline.nix (
          {
            inherit toolchain shapes refreshCommand features instrumentedFatLto;
          }
          // args
          // {
            pinned = {
              llvm = null;
              bolt = null;
              why = "a measurement variant is trained in its build, never pinned";
            };
          }
        );
    in
    {
      jemalloc = freshlyTrained { features = [ "tikv-jemallocator" ]; };
      mimalloc = freshlyTrained { features = [ "mimalloc" ]; };
      # The dilution check: the board shape's profile undiluted by the rest of the mix. A subset
      # cannot pass the coverage gate, so it depends on this chain's gate, whose set it is drawn from.
      board-only = freshlyTrained {
        shapes = boardOnlyShapes;
        coverage = gateway-coverage;
      };
    };

  # The board shape and the holdout, with every payload.
  boardOnlyShapes = toolchain.runStage {
    name = "shapes-board-only";
    script = ''
      mkdir -p "$out"
      cp -r ${shapes}/payloads "$out/payloads"
      cp ${shapes}/${boardShape}.json "$out/" || fail "no board shape ${boardShape}.json in ${shapes}"
      holdout=$(grep -l '"holdout": *true' ${shapes}/*.json) || fail "no holdout shape in ${shapes}"
      cp $holdout "$out/"
    '';
  };
}
