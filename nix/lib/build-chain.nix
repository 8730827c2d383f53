# buildChain: the whole PGO+BOLT chain of one binary of one Cargo package, one derivation per stage
# (docs/library.md, "Use the chain for your crate"; nix/README.md, "The chain"):
#
#   instrumented -> training (check) -----------------------------------------------.
#   <profiles>/<target>/rust-<release>/llvm -> profile -> pgo                          |
#     -> bolt-instrumented -> bolt-training (check) ----------------------------------+
#   <profiles>/<target>/rust-<release>/bolt + pgo -> bolt-profile                      |
#     -> pgo-bolt (bin/BINARY + share/BINARY/proof.json) <-----------------------------'
#   release-check (the proof requires pinned profiles), profile-fresh and bolt-profile-fresh (the
#   refresh command pins them), holdout-instructions (plain, PGO, PGO+BOLT under cachegrind)
#
# The optimized stages consume the pinned profiles, keyed by what determines them (Rust release,
# target, codegen settings); the training checks train afresh in the sandbox and fail when the
# pinned profiles are stale. Every stage fails closed, naming itself and the cause; nothing falls
# back to a plain build. Where no profile is pinned for the build's key, the chain trains in the
# sandbox instead and builds from that: the proof marker says "trained in build" with the reason,
# and the release check refuses it.
#
# Every argument, with its default:
{
  # The toolchain provider (nix/toolchains/offline.nix or nixpkgs.nix) of the chain's target: an
  # emulator there (a cross target: aarch64 from x86_64) runs the target's binaries in training.
  # The entry points give it (nix/offline/default.nix `lib`, the flake's `lib.<system>`).
  toolchain,
  # The engine every stage runs (a derivation with bin/pgo-engine, built for the builder from this
  # repository); the entry points give it.
  engine,

  # The crate. Its Cargo source (Cargo.toml, Cargo.lock, the package); null: the provider's own,
  # the repository's workspace (the gateway).
  src ? null,
  # The crate sources for `src`'s Cargo.lock (offline: a `cargo vendor` directory; crane: a
  # `cargoVendorDir`); null: the provider's (offline), crane's own vendoring of Cargo.lock.
  vendor ? null,
  # The Cargo package (`cargo build -p`).
  package,
  # The package's binary the chain optimizes (bin/BINARY); its profiles are BINARY.proftext and
  # BINARY.fdata, its proof marker share/BINARY/proof.json.
  binary ? package,
  # Cargo features of every build.
  features ? [ ],
  # The manifest whose [profile.release] the builds use (part of the profile key): the workspace
  # root's. Default: src's Cargo.toml (a path; a derivation would be read at evaluation).
  cargoToml ? (if src == null then toolchain.src else src) + "/Cargo.toml",
  # Prefix of every stage's name (NAME-instrumented, NAME-pgo-bolt, ...; the plain build is NAME).
  name ? package,
  # What under the source the manifests' and the marker's source digest covers (paths relative to
  # it); none: all of it.
  sourceInclude ? [ ],

  # The training command (the training contract, docs/library.md): a bash command line, run by
  # the engine's `pgo-engine train` with the instrumented binary as $PGO_BINARY, the profile
  # directory as its working directory ($PGO_PROFILE_DIR), a scratch directory ($PGO_SCRATCH), a
  # place for its workload report ($PGO_REPORT), loopback only. It must run the binary on the
  # workload and exit 0 once every run of the binary exited cleanly.
  trainingCommand,
  # The directory of the training inputs (a corpus, the gateway's shapes), digested into every
  # fresh profile's manifest; null: none recorded (the command's store paths are in the stages'
  # inputs all the same).
  trainingInputs ? null,
  # The holdout command: a workload training never ran, under the same contract, run on the
  # plain, PGO and PGO+BOLT binaries under cachegrind (`holdout-instructions`); its standard output
  # must be the same for the three. null: no holdout stage.
  holdoutCommand ? null,

  # The directory of the crate's pinned profiles (<target>/rust-<release>/{llvm,bolt}), a path;
  # null: none pinned.
  profiles ? null,
  # That directory relative to the root of the repository, as messages, the proof marker and the
  # refresh command name it.
  profilesLocation ? "profiles",
  # The pinned profiles themselves, { llvm, bolt, where, why? } (store paths or null, as
  # nix/lib/pinned-profiles.nix gives them); null: looked up in `profiles`. Compositions pass
  # broken ones (nix/tests/fail-closed.nix).
  pinned ? null,
  # The command that pins fresh profiles; every stale-profile failure names it.
  refreshCommand,
  # Files of a fresh LLVM profile stage pinned beside the profile (`pgo-engine pin --keep`: the
  # gateway's function coverage).
  pinKeep ? [ ],

  # The gates' thresholds (nix/README.md, "Thresholds", says how the defaults were measured on
  # the gateway): the least overlap, in percent, of a fresh training with the pinned profile
  # (llvmMinOverlap, boltMinOverlap: 95.0), over which counters (overlap: "stable", those two
  # contrast trainings of the same binary agree on, on one CPU beside a busy loop and with the
  # training command so and the binary alone on another CPU, so that what the builder's timing
  # moves is measured and left out, nix/stages/contrast.nix; "work", the functions the engine's
  # names rule says count work; "all"), and the least reduction of instructions on the holdout,
  # PGO+BOLT vs plain (minInstructionReduction: 5).
  thresholds ? { },

  # The cross target's smoke run through the emulator (nix/stages/emulated.nix): arguments, and
  # script lines that check its output (./smoke.out).
  smoke ? { args = "--version"; check = ""; },
  # A stage that must pass before any profile is trained or the artifact is built, whose report
  # ships beside the proof marker: chain -> { stage, report, what } (the gateway's coverage
  # gate), or null.
  trainingGate ? null,
  # Script lines each fresh profile stage runs last: kind -> lines (the gateway's function
  # coverage beside its LLVM profile).
  freshReports ? (kind: ""),
  # Link the instrumented build with fat LTO (nix/stages/instrumented.nix): only for measuring
  # what linking it without saves (bench/chain-cost).
  instrumentedFatLto ? false,
}:
let
  stages = import ../stages { inherit toolchain; };

  limits = {
    llvmMinOverlap = 95.0;
    boltMinOverlap = 95.0;
    overlap = "stable";
    minInstructionReduction = 5;
  } // thresholds;

  # What every build of the chain shares (nix/toolchains/package-args.nix).
  crate = { inherit package binary features src vendor; };
  source = if src == null then toolchain.src else src;

  # A cross chain: the target's binaries run on this builder only through the toolchain's
  # emulator, the engine is built for the builder, and the holdout, which counts the binaries'
  # instructions natively, is not defined.
  cross = (toolchain.emulator or null) != null;
  runnable =
    stage: program:
    if cross then stages.emulated { name = "${stage}-emulated"; inherit binary program smoke; } else program;

  # Linker flag of the stages BOLT rewrites: `--emit-relocs` keeps the relocations it needs.
  emitRelocs = "-Clink-args=-Wl,--emit-relocs";

  # The codegen part of the profile key (the engine's `build_key`): the settings that change the
  # code a profile describes. The cargo profile's settings (the workspace manifest's), the
  # features, the instrumented build's LTO (its flags are the chain's own), and code-changing
  # RUSTFLAGS beyond the chain's -Cprofile-* flags (none). Link-only flags (--emit-relocs, the
  # linker) and path remapping are left out: they do not change the functions' names or control
  # flow.
  codegenKey = builtins.toFile "codegen-key.json" (builtins.toJSON {
    cargo_profile = "release";
    profile_settings = (builtins.fromTOML (builtins.readFile cargoToml)).profile.release or { };
    inherit features;
    instrumented_lto = if instrumentedFatLto then "fat" else "off";
    rustflags = "";
  });

  pinnedProfiles =
    if pinned != null then
      pinned
    else
      import ./pinned-profiles.nix {
        inherit profiles binary;
        location = profilesLocation;
        inherit (toolchain) target rustRelease;
      };

  # Where each profile comes from: pinned where there is one for this key, trained in this build
  # otherwise (with the reason the proof marker records).
  trainedInBuild =
    kind:
    if pinnedProfiles.${kind} != null then
      null
    else
      pinnedProfiles.why or "no pinned ${kind} profile at ${pinnedProfiles.where or "profiles/"}/${kind}";

  # The shared arguments of the stages that train `program` (stage `label`), instrumented for
  # `kind`.
  trains = kind: label: program: {
    inherit kind binary engine;
    command = trainingCommand;
    instrumented = runnable label program;
  };

  self = rec {
    inherit (toolchain) versions;
    inherit engine;

    # The plain fat-LTO build: the baseline every PGO/BOLT figure is measured against.
    plain = toolchain.buildPackage (crate // { pname = name; rustflags = ""; });

    gate = if trainingGate == null then null else trainingGate self;

    # The freshness check of a pinned profile of `kind` (`profile`: the stage that verified it);
    # none for a profile trained in this build, which is fresh by construction.
    trainingCheck =
      { stage, kind, label, program, profile, minOverlap, after ? [ ] }:
      if pinnedProfiles.${kind} == null then
        null
      else
        stages.training-check (trains kind label program // {
          name = stage;
          inherit minOverlap refreshCommand after;
          inherit (limits) overlap;
          pinned = profile;
        });

    instrumented = stages.instrumented {
      name = "${name}-instrumented";
      inherit crate;
      fatLto = instrumentedFatLto;
    };

    profile = stages.llvm-profile {
      name = "${name}-profile";
      profile = if pinnedProfiles.llvm != null then pinnedProfiles.llvm else profile-fresh;
      inherit binary versions codegenKey engine refreshCommand;
    };

    training = trainingCheck {
      stage = "${name}-training";
      kind = "llvm";
      label = "${name}-instrumented";
      program = instrumented;
      inherit profile;
      minOverlap = limits.llvmMinOverlap;
    };

    pgo = stages.pgo {
      name = "${name}-pgo";
      inherit crate profile engine emitRelocs refreshCommand;
    };

    bolt-instrumented = stages.bolt-instrument {
      name = "${name}-bolt-instrumented";
      inherit binary pgo versions;
    };

    bolt-profile = stages.bolt-profile {
      name = "${name}-bolt-profile";
      profile = if pinnedProfiles.bolt != null then pinnedProfiles.bolt else bolt-profile-fresh;
      inherit binary pgo versions codegenKey engine refreshCommand;
    };

    bolt-training = trainingCheck {
      stage = "${name}-bolt-training";
      kind = "bolt";
      label = "${name}-bolt-instrumented";
      program = bolt-instrumented;
      profile = bolt-profile;
      minOverlap = limits.boltMinOverlap;
      # Not beside the LLVM training: a training's counts move with the load beside it.
      after = builtins.filter (c: c != null) [ training ];
    };

    pgo-bolt = stages.bolt-optimize {
      name = "${name}-pgo-bolt";
      inherit package binary pgo profile gate engine versions refreshCommand sourceInclude;
      src = source;
      boltProfile = bolt-profile;
      llvmCheck = training;
      boltCheck = bolt-training;
      llvmTrainedInBuild = trainedInBuild "llvm";
      boltTrainedInBuild = trainedInBuild "bolt";
    };

    # The release rule: the artifact's profiles are pinned (a function of committed inputs,
    # bit-identical on rebuild), not trained in the build. Fails naming the refresh command
    # otherwise.
    release-check = toolchain.runStage {
      name = "${name}-release-check";
      script = ''
        ${engine}/bin/pgo-engine verify-proof --require-pinned --binary ${binary} ${pgo-bolt} \
          || fail "the artifact is not releasable (see above)"
        mkdir -p "$out"
        ln -s ${pgo-bolt} "$out/${name}-pgo-bolt"
      '';
    };

    # Fresh training runs for the refresh command; not part of the artifact where profiles are
    # pinned.
    profile-fresh = stages.fresh-profile (trains "llvm" "${name}-instrumented" instrumented // {
      name = "${name}-profile-fresh";
      inputs = trainingInputs;
      reports = freshReports "llvm";
      src = source;
      inherit gate versions codegenKey sourceInclude;
    });

    bolt-profile-fresh = stages.fresh-profile (trains "bolt" "${name}-bolt-instrumented" bolt-instrumented // {
      name = "${name}-bolt-profile-fresh";
      inputs = trainingInputs;
      reports = freshReports "bolt";
      src = source;
      inherit gate pgo versions codegenKey sourceInclude;
    });

    # Instructions of the holdout command, plain vs PGO vs PGO+BOLT (cachegrind: deterministic).
    holdout-instructions =
      if holdoutCommand == null then
        null
      else if cross then
        throw "${name}: holdout-instructions counts the ${toolchain.target} binaries natively, which this builder cannot run"
      else
        stages.holdout-instructions {
          name = "${name}-holdout-instructions";
          inherit binary;
          command = holdoutCommand;
          legs = { inherit plain pgo pgo-bolt; };
          minReduction = limits.minInstructionReduction;
        };

    # What the refresh command needs: its name, where the profiles are pinned, and what is
    # pinned beside them.
    refresh = {
      command = refreshCommand;
      location = profilesLocation;
      keep = pinKeep;
    };

    # The stage functions and the chain's inputs, for compositions (nix/tests/fail-closed.nix).
    inherit stages toolchain crate codegenKey refreshCommand runnable;
    pinned = pinnedProfiles;
    thresholds = limits;
  };
in
self
