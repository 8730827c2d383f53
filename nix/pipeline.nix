# The stage chain, written once as a function of a toolchain provider (nix/README.md):
#
#   gateway-instrumented -> gateway-training (check) ------------------------------.
#   profiles/<target>/rust-<release>/llvm -> gateway-profile -> gateway-pgo         |
#     -> gateway-bolt-instrumented -> gateway-bolt-training (check) ---------------+
#   profiles/<target>/rust-<release>/bolt + gateway-pgo -> gateway-bolt-profile     |
#     -> gateway-pgo-bolt (bin/gateway + share/gateway/proof.json) <-----------------'
#
# The optimized stages consume the pinned profiles committed under profiles/, keyed by what
# determines them (Rust release, target, codegen settings; not the provider); the training checks
# train afresh and fail when the pinned profiles are stale. Every stage is its own derivation and
# rebuilds bit-identically; a failing stage fails everything after it, and nothing falls back to a
# plain build. Where no profile is pinned for the build's key (another Rust release, a target
# without profiles yet), the chain trains in the sandbox instead (gateway-profile-fresh,
# gateway-bolt-profile-fresh, which the refresh command also uses) and builds from that: the proof
# marker says "trained in build" with the reason, and the release check refuses it.
{
  toolchain,
  # The shapes directory (shape files and payloads); the holdout shape is never trained.
  shapes,
  # The pinned profiles { llvm, bolt, where }: store paths of their directories, or null where
  # there is none (then that profile is trained in the build), and where they would be under
  # profiles/ (nix/pinned-profiles.nix finds them in the repository's profiles/). `why`, if set,
  # replaces "no pinned profile at <where>" as the reason a profile was trained in the build.
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
  stages = import ./stages { inherit toolchain; };

  # A cross chain: the target's binaries run on this builder only through the toolchain's
  # emulator (nix/stages/emulated.nix), the trainer is built for the builder, and the gates that
  # time or count the binaries natively (holdout, instructions) are not defined.
  cross = (toolchain.emulator or null) != null;
  notOnTheBuilder =
    attr:
    throw "${attr} measures the ${toolchain.target} binaries natively, which this builder cannot run (docs/aarch64.md: instructions under emulation)";
  runnable =
    name: gateway:
    if cross then stages.emulated { name = "${name}-emulated"; inherit gateway; } else gateway;

  # Linker flag of the stages BOLT rewrites: `--emit-relocs` keeps the relocations it needs.
  emitRelocs = "-Clink-args=-Wl,--emit-relocs";

  # Least overlap of a fresh training with the pinned profile over the functions that count the
  # requests' work (the runtime's polls, parks and wakes left out: `trainer profile compare`), in
  # percent (nix/README.md, "Thresholds"): quiet trainings of one binary on two machines (AMD EPYC,
  # Intel Xeon) overlapped by 99.36% (LLVM) and 99.85% (BOLT), on one machine by 99.95% and
  # 99.93%; the fail-closed stale profiles by 76.2% and 52.8%. Each threshold allows about four
  # times the larger (LLVM) shortfall between machines.
  llvmMinOverlap = 97.0;
  boltMinOverlap = 97.0;

  # Least reduction of instructions per request, released vs plain, in percent: 3 x the sum of
  # the two binaries' largest measured run-to-run spread (0.82% each, nix/README.md).
  minInstructionReduction = 5;

  # The shape the bench and the instruction gate measure first (shapes/README.md).
  boardShape = "chat-minimal";

  # The codegen part of the profile key (trainer/src/pinned.rs, `build_key`): the settings that change
  # the code a profile describes. The cargo profile's settings (fat LTO, one codegen unit) are read
  # from the workspace manifest; the features; the instrumented build's LTO (its flags are the
  # chain's own); and code-changing RUSTFLAGS beyond the chain's -Cprofile-* flags (none). Link-only
  # flags (--emit-relocs, the linker) and path remapping are left out: they do not change the
  # functions' names or control flow.
  codegenKey = builtins.toFile "codegen-key.json" (builtins.toJSON {
    cargo_profile = "release";
    profile_settings = (builtins.fromTOML (builtins.readFile ../Cargo.toml)).profile.release;
    inherit features;
    instrumented_lto = if instrumentedFatLto then "fat" else "off";
    rustflags = "";
  });

  # Where each profile comes from: pinned where the repository has one for this key, trained in
  # this build otherwise (with the reason the proof marker records).
  trainedInBuild =
    kind:
    if pinned.${kind} != null then
      null
    else
      pinned.why or "no pinned ${kind} profile at ${pinned.where or "profiles/"}/${kind}";

in
rec {
  inherit (toolchain) versions;

  # The plain fat-LTO build: the baseline every PGO/BOLT figure is measured against.
  gateway = toolchain.buildPackage {
    pname = "gateway";
    package = "gateway";
    rustflags = "";
    inherit features;
  };

  # The in-batch control leg of the bench: plain, but linked like the optimized stages.
  gateway-emit-relocs = toolchain.buildPackage {
    pname = "gateway-emit-relocs";
    package = "gateway";
    rustflags = emitRelocs;
    inherit features;
  };

  trainer = toolchain.buildPackage ({ pname = "trainer"; package = "trainer"; rustflags = ""; }
    // (if cross then { forHost = true; } else { }));

  # The coverage gate: every request path and posture the gateway lists has a training
  # shape, and every shape names one it serves. The artifact and the fresh profiles depend on it.
  gateway-coverage =
    if coverage != null then
      coverage
    else
      stages.coverage {
        gateway = runnable "gateway-instrumented" gateway-instrumented;
        inherit trainer shapes;
      };

  # The freshness check of a pinned profile of `kind` (`profile`: the stage that verified it);
  # none for a profile trained in this build, which is fresh by construction.
  trainingCheck =
    { name, kind, gateway, profile, minOverlap, after ? [ ] }:
    if pinned.${kind} == null then
      null
    else
      stages.training-check {
        inherit name kind gateway minOverlap trainer shapes refreshCommand after;
        pinned = profile;
      };

  gateway-instrumented = stages.instrumented {
    inherit features;
    fatLto = instrumentedFatLto;
  };

  gateway-profile = stages.llvm-profile {
    profile = if pinned.llvm != null then pinned.llvm else gateway-profile-fresh;
    inherit versions codegenKey trainer refreshCommand;
  };

  gateway-training = trainingCheck {
    name = "gateway-training";
    kind = "llvm";
    gateway = runnable "gateway-instrumented" gateway-instrumented;
    profile = gateway-profile;
    minOverlap = llvmMinOverlap;
  };

  gateway-pgo = stages.pgo {
    profile = gateway-profile;
    inherit emitRelocs refreshCommand features trainer;
  };

  gateway-bolt-instrumented = stages.bolt-instrument {
    pgo = gateway-pgo;
    inherit versions;
  };

  gateway-bolt-profile = stages.bolt-profile {
    profile = if pinned.bolt != null then pinned.bolt else gateway-bolt-profile-fresh;
    pgo = gateway-pgo;
    inherit versions codegenKey trainer refreshCommand;
  };

  gateway-bolt-training = trainingCheck {
    name = "gateway-bolt-training";
    kind = "bolt";
    gateway = runnable "gateway-bolt-instrumented" gateway-bolt-instrumented;
    profile = gateway-bolt-profile;
    minOverlap = boltMinOverlap;
    # Not beside the LLVM training: a training's counts move with the load beside it.
    after = builtins.filter (c: c != null) [ gateway-training ];
  };

  gateway-pgo-bolt = stages.bolt-optimize {
    pgo = gateway-pgo;
    profile = gateway-profile;
    boltProfile = gateway-bolt-profile;
    llvmCheck = gateway-training;
    boltCheck = gateway-bolt-training;
    llvmTrainedInBuild = trainedInBuild "llvm";
    boltTrainedInBuild = trainedInBuild "bolt";
    coverage = gateway-coverage;
    inherit trainer versions refreshCommand;
  };

  # The release rule: the artifact's profiles are pinned (a function of committed inputs,
  # bit-identical on rebuild), not trained in the build. Fails naming the refresh command
  # otherwise; the flake's hydraJobs.release and the release workflow require it.
  release-check = toolchain.runStage {
    name = "gateway-release-check";
    script = ''
      ${trainer}/bin/trainer verify-proof --require-pinned ${gateway-pgo-bolt} \
        || fail "the artifact is not releasable (see above)"
      mkdir -p "$out"
      ln -s ${gateway-pgo-bolt} "$out/gateway-pgo-bolt"
    '';
  };

  # Fresh training runs for the refresh command; not part of the artifact.
  gateway-profile-fresh = stages.fresh-profile {
    name = "gateway-profile-fresh";
    kind = "llvm";
    gateway = runnable "gateway-instrumented" gateway-instrumented;
    coverage = gateway-coverage;
    inherit trainer shapes versions codegenKey;
  };

  gateway-bolt-profile-fresh = stages.fresh-profile {
    name = "gateway-bolt-profile-fresh";
    kind = "bolt";
    gateway = runnable "gateway-bolt-instrumented" gateway-bolt-instrumented;
    pgo = gateway-pgo;
    coverage = gateway-coverage;
    inherit trainer shapes versions codegenKey;
  };

  # Not part of the artifact: the gates that the optimized build is faster on held-out work.
  # Instructions per request under cachegrind: deterministic, for every machine.
  holdout-instructions = if cross then notOnTheBuilder "holdout-instructions" else stages.instructions-gate {
    plain = gateway;
    optimized = gateway-pgo-bolt;
    minReduction = minInstructionReduction;
    inherit trainer shapes;
  };

  # Wall-clock bench: for benchmark builders only.
  holdout = if cross then notOnTheBuilder "holdout" else stages.holdout {
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

  # The stage functions and their inputs, for compositions such as nix/tests/fail-closed.nix.
  inherit stages toolchain shapes pinned refreshCommand codegenKey;
  thresholds = { inherit llvmMinOverlap boltMinOverlap minInstructionReduction; };
}
