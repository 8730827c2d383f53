# Compositions of the real stages with one input broken each. Every attribute here must FAIL to
# build, with a message naming the stage and the cause; tests/pipeline/test_fail_closed.py builds
# each one and checks the message. Arguments are those of nix/offline/default.nix.
args@{ rustToolchain, vendorDir, ... }:
let
  chain = import ../offline/default.nix args;
  inherit (chain) stages toolchain trainer shapes versions;

  withTools = toolOverrides: import ../offline/default.nix (args // { inherit toolOverrides; });

  # A gateway that serves normally but exits 3 when told to stop, as a failed shutdown would.
  gatewayExitingNonZero = toolchain.runStage {
    name = "gateway-exits-nonzero";
    script = ''
      mkdir -p "$out/bin"
      cat > "$out/bin/gateway" <<'WRAPPER'
      #!/bin/bash
      "$(dirname "$0")/real-gateway" "$@" &
      child=$!
      trap 'kill -TERM $child; wait $child; exit 3' TERM INT
      wait $child
      WRAPPER
      cp ${chain.gateway-instrumented}/bin/gateway "$out/bin/real-gateway"
      chmod +x "$out/bin/gateway"
    '';
  };

  # "Gateways" that answer by themselves (the trainer's fake gateway), one of them with a 500 to
  # every request: a holdout batch with failed requests is invalid whatever the machine's load,
  # so the gate must fail it.
  selfAnswering = name: env: toolchain.runStage {
    inherit name;
    script = ''
      mkdir -p "$out/bin"
      printf '#!/bin/sh\n%s exec %s fake-gateway "$@"\n' '${env}' ${trainer}/bin/trainer > "$out/bin/gateway"
      chmod +x "$out/bin/gateway"
    '';
  };
  selfAnsweringGateway = selfAnswering "gateway-self-answering" "";
  failingGateway = selfAnswering "gateway-answering-500" "FAKE_GATEWAY_STATUS=500";

  # A training directory with a profraw that is not a profile.
  corruptTraining = toolchain.runStage {
    name = "gateway-training-corrupt";
    script = ''
      mkdir -p "$out"
      head -c 4096 /dev/urandom > "$out/chat-minimal.corrupt.profraw"
      echo '{}' > "$out/manifest.json"
    '';
  };
in
{
  # Training a binary without instrumentation leaves no profraw: the training stage fails.
  training-without-instrumentation = stages.training {
    name = "gateway-training";
    kind = "llvm";
    gateway = chain.gateway;
    inherit trainer shapes;
  };

  # The gateway exits 3 instead of 0 on SIGTERM: the training stage fails.
  training-gateway-exits-nonzero = stages.training {
    name = "gateway-training";
    kind = "llvm";
    gateway = gatewayExitingNonZero;
    inherit trainer shapes;
  };

  # No redis-server for the shared-limits shape's store: the training stage fails at that shape.
  training-without-redis-server =
    (withTools { redisServer = "/nonexistent/redis-server"; }).gateway-training;

  # Corrupt profraw: the profile stage's merge fails.
  profile-from-corrupt-profraw = stages.profile { training = corruptTraining; inherit versions; };

  # A batch the wall-clock holdout gate cannot believe (here: the optimized legs' requests fail):
  # the gate fails it instead of passing it, naming why. Needs `--option extra-system-features
  # gateway-benchmark`.
  holdout-invalid-batch = stages.holdout {
    plain = selfAnsweringGateway;
    optimized = failingGateway;
    inherit trainer shapes;
  };

  # llvm-profdata of LLVM 14 while rustc is LLVM 22: the toolchain check refuses it, and the
  # profile stage, which depends on it, never runs.
  profile-with-wrong-llvm-profdata =
    (withTools { llvmProfdata = "/usr/lib/llvm-14/bin/llvm-profdata"; }).gateway-profile;

  # No BOLT runtime library: the BOLT instrumentation stage fails.
  bolt-without-runtime-library =
    (withTools { boltRuntimeLib = "/nonexistent/libbolt_rt_instr.a"; }).gateway-bolt-instrumented;

  # An llvm-bolt older than 19 is refused by the toolchain check (LLVM 14's llc stands in for a
  # BOLT 14: the check reads only the version line every LLVM tool prints).
  bolt-too-old = (withTools { llvmBolt = "/usr/lib/llvm-14/bin/llc"; }).versions;
}
