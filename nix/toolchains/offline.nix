# The offline toolchain provider: Debian's llvm-22 and bolt-22 plus the host's rustup toolchain,
# evaluated by Debian's Nix 2.8 with no nixpkgs at all. Stages are raw `derivation`s whose builder
# is the host's /bin/bash; the sandbox sees the host tools only through explicit `sandbox-paths`
# (see nix/offline/build), so the build stays offline and every tool is named by absolute path.
{
  # Absolute path of the rustup toolchain directory (holds bin/rustc and bin/cargo, the real
  # binaries, not rustup's proxies).
  rustToolchain,
  # The Rust release of that toolchain ("1.95.0"): the pinned profiles are looked up by it, and
  # the `versions` stage fails when rustc reports another.
  rustRelease,
  # `cargo vendor` output for Cargo.lock; the only crate source the sandbox gets.
  vendor,
  # The cargo workspace source (Cargo.toml, Cargo.lock and the member crates).
  src,
  # The source a build of one package compiles: `src`, or less of it (nix/offline/default.nix
  # leaves the trainer's code out of the gateway's builds).
  packageSrc ? (package: src),
  # Directory of Debian's LLVM tools.
  llvmBin ? "/usr/lib/llvm-22/bin",
  llvmProfdata ? "${llvmBin}/llvm-profdata",
  llvmBolt ? "${llvmBin}/llvm-bolt",
  mergeFdata ? "${llvmBin}/merge-fdata",
  readelf ? "${llvmBin}/llvm-readelf",
  # Symbol table listing and rewriting (the PGO stage shortens names BOLT's runtime cannot write).
  llvmNm ? "${llvmBin}/llvm-nm",
  llvmObjcopy ? "${llvmBin}/llvm-objcopy",
  # BOLT's instrumentation runtime, passed explicitly so that BOLT never finds one by PATH.
  boltRuntimeLib ? "/usr/lib/llvm-22/lib/libbolt_rt_instr.a",
  # Debian's Redis: the shared quota store of the `shared-limits` training shapes.
  redisServer ? "/usr/bin/redis-server",
  # Debian's valgrind, for the instruction-count gate.
  valgrind ? "/usr/bin/valgrind",
  # util-linux's taskset: the training checks' contrast training runs on one CPU
  # (nix/stages/contrast.nix).
  taskset ? "/usr/bin/taskset",
  system ? "x86_64-linux",
  # The target the gateway is built for, and the builder's own (the trainer's, which runs here).
  target ? "x86_64-unknown-linux-gnu",
  hostTarget ? "x86_64-unknown-linux-gnu",
  # For a target the builder cannot run (cross): the C compiler driver that links it (absolute
  # path), and the command prefix that runs its binaries here (an absolute path to the emulator
  # and its arguments: nix/stages/emulated.nix wraps every gateway the trainer starts in it).
  # Both null for the builder's own target.
  crossLinker ? null,
  emulator ? null,
}:
let
  # Coreutils, grep, sed and findutils from the host, plus gcc as the linker driver rustc invokes.
  # rustc 1.95 links x86_64-unknown-linux-gnu with its bundled rust-lld (through gcc), the same in
  # every stage; lld honours `--emit-relocs`, which the PGO stage checks.
  hostPath = "/usr/bin:/bin";

  prologue = import ./stage-prologue.nix;
  versionChecks = import ./version-checks.nix;

  # A cross chain's stages are named after their target's architecture (gateway-pgo-aarch64), so
  # that a log, a store path and a failure say which chain they belong to; a build for the builder
  # (`forTarget = false`: the trainer) keeps its name and is the native chain's derivation.
  arch = builtins.head (builtins.split "-" target);
  runStage =
    { name, script, env ? { }, forTarget ? true }:
    let
      stageName = if crossLinker != null && forTarget then "${name}-${arch}" else name;
    in
    derivation (env // {
      name = stageName;
      inherit system;
      builder = "/bin/bash";
      # The script travels as a file, not as argv: the builder's command line stays short and
      # carries no binary names a process search on the host could match.
      stageScript = prologue stageName + script;
      passAsFile = [ "stageScript" ];
      args = [ "-c" ''source "$stageScriptPath"'' ];
      PATH = hostPath;
    });

  pgoDiagnosticsOf = import ./pgo-diagnostics.nix;

  lower = [ "a" "b" "c" "d" "e" "f" "g" "h" "i" "j" "k" "l" "m" "n" "o" "p" "q" "r" "s" "t" "u" "v" "w" "x" "y" "z" "-" ];
  upper = builtins.replaceStrings lower [ "A" "B" "C" "D" "E" "F" "G" "H" "I" "J" "K" "L" "M" "N" "O" "P" "Q" "R" "S" "T" "U" "V" "W" "X" "Y" "Z" "_" ];

  packageArgs = import ./package-args.nix { inherit target hostTarget; };

  buildPackage =
    stageArgs:
    let
      inherit (packageArgs stageArgs) pname package binary rustflags pgoDiagnostics forHost featureArgs buildTarget cargoArgs;
      # Another crate's source and vendor directory (nix/lib), or the repository's workspace.
      own = stageArgs.src or null == null;
      source = if own then packageSrc package else stageArgs.src;
      crates = if stageArgs.vendor or null == null then vendor else stageArgs.vendor;
      cargoBuild = "cargo build --release --offline ${cargoArgs}";
      # cargo's per-target linker variable (CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER); only a
      # cross build has one, so the builder's own builds are the derivations they always were.
      linkerVar = "CARGO_TARGET_${builtins.replaceStrings [ "-" ] [ "_" ] (upper buildTarget)}_LINKER";
      linkerEnv = if crossLinker != null && buildTarget != hostTarget then { ${linkerVar} = crossLinker; } else { };
    in
    runStage {
      name = pname;
      forTarget = !forHost;
      env = { RUSTFLAGS_STAGE = rustflags; } // linkerEnv;
      script = ''
        export HOME="$TMPDIR/home" CARGO_HOME="$TMPDIR/cargo-home"
        mkdir -p "$HOME" "$CARGO_HOME"
        cat > "$CARGO_HOME/config.toml" <<CONFIG
        [source.crates-io]
        replace-with = "vendored"
        [source.vendored]
        directory = "${crates}"
        CONFIG
        cp -r ${source} "$TMPDIR/src"
        chmod -R u+w "$TMPDIR/src"
        cd "$TMPDIR/src"
      '' + (if own then ''
        # A member whose code the source leaves out gets a stub target, so that cargo loads the
        # workspace; `-p ${package}` never builds it.
        for manifest in */Cargo.toml; do
          member=''${manifest%/Cargo.toml}
          if [ "$member" != ${package} ] && [ ! -e "$member/src" ]; then
            mkdir -p "$member/src"
            echo 'fn main() {}' > "$member/src/main.rs"
          fi
        done
      '' else "") + ''
        export PATH="${rustToolchain}/bin:${hostPath}"
        # Panic locations name source files; remapped, the binary references no build input.
        export RUSTFLAGS="$RUSTFLAGS_STAGE --remap-path-prefix=${crates}=/cargo-vendor --remap-path-prefix=$TMPDIR/src=/src"
        echo "stage $stage: cargo build -p ${package}${featureArgs} --target ${buildTarget} RUSTFLAGS='$RUSTFLAGS'"
      '' + (if pgoDiagnostics then ''
        ${cargoBuild} 2>&1 \
          | tee "$TMPDIR/cargo-build.log" \
          || fail "cargo build of ${package} failed"
        mkdir -p "$out/bin" "$out/share/${package}"
        ${pgoDiagnosticsOf "$TMPDIR/cargo-build.log" "$out/share/${package}/pgo-diagnostics.txt"}
      '' else ''
        ${cargoBuild} \
          || fail "cargo build of ${package} failed"
        mkdir -p "$out/bin"
      '') + ''
        cp "target/${buildTarget}/release/${binary}" "$out/bin/${binary}"
      '';
    };

  tools = { inherit llvmProfdata llvmBolt mergeFdata readelf llvmNm llvmObjcopy boltRuntimeLib redisServer valgrind taskset; };

  # Read each tool's own version and refuse a mismatch before any stage uses it.
  versions = runStage {
    name = "toolchain-versions";
    script = ''
      ${versionChecks {
        rustc = "${rustToolchain}/bin/rustc";
        cargo = "${rustToolchain}/bin/cargo";
        release = rustRelease;
        inherit tools target;
      }}
    '' + (if crossLinker == null then "" else ''
      # A cross target: its standard library in the toolchain, its linker and the emulator the
      # training runs through, each checked before any stage uses it.
      [ -d "${rustToolchain}/lib/rustlib/${target}/lib" ] \
        || fail "the Rust toolchain ${rustToolchain} has no standard library for ${target} (rustup target add ${target} --toolchain ${rustRelease}; nix/offline/aarch64-setup)"
      [ -x "${crossLinker}" ] || fail "no linker for ${target} at ${crossLinker}"
      emulator_bin=${builtins.head (builtins.split " " (if emulator == null then "" else emulator))}
      [ -x "$emulator_bin" ] || fail "no emulator for ${target} at '$emulator_bin': training runs the ${target} gateway through it"
      echo "stage $stage: ${target} linked by ${crossLinker}, run by $("$emulator_bin" --version | head -n1)"
    '') + ''
      mkdir -p "$out"
      write_versions offline-debian "$out/versions.json"
      cat "$out/versions.json"
    '';
  };
in
{
  name = "offline-debian";
  inherit system target hostTarget emulator rustRelease src runStage buildPackage tools versions;
}
