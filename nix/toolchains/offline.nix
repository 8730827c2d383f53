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
  # BOLT's instrumentation runtime, passed explicitly so that BOLT never finds one by PATH.
  boltRuntimeLib ? "/usr/lib/llvm-22/lib/libbolt_rt_instr.a",
  # Debian's Redis: the shared quota store of the `shared-limits` training shapes.
  redisServer ? "/usr/bin/redis-server",
  # Debian's valgrind, for the instruction-count gate.
  valgrind ? "/usr/bin/valgrind",
  system ? "x86_64-linux",
  target ? "x86_64-unknown-linux-gnu",
}:
let
  # Coreutils, grep, sed and findutils from the host, plus gcc as the linker driver rustc invokes.
  # rustc 1.95 links x86_64-unknown-linux-gnu with its bundled rust-lld (through gcc), the same in
  # every stage; lld honours `--emit-relocs`, which the PGO stage checks.
  hostPath = "/usr/bin:/bin";

  prologue = import ./stage-prologue.nix;
  versionChecks = import ./version-checks.nix;

  runStage =
    { name, script, env ? { } }:
    derivation (env // {
      inherit name system;
      builder = "/bin/bash";
      # The script travels as a file, not as argv: the builder's command line stays short and
      # carries no binary names a process search on the host could match.
      stageScript = prologue name + script;
      passAsFile = [ "stageScript" ];
      args = [ "-c" ''source "$stageScriptPath"'' ];
      PATH = hostPath;
    });

  pgoDiagnosticsOf = import ./pgo-diagnostics.nix;

  buildPackage =
    {
      pname,
      package,
      rustflags,
      pgoDiagnostics ? false,
      # Cargo features of `package` (measurement variants such as [ "mimalloc" ]); none: the
      # script is the one the chain has always built.
      features ? [ ],
    }:
    let
      featureArgs = if features == [ ] then "" else " --features ${builtins.concatStringsSep "," features}";
      cargoBuild = "cargo build --release --offline --locked --target ${target} -p ${package}${featureArgs}";
    in
    runStage {
      name = pname;
      env = { RUSTFLAGS_STAGE = rustflags; };
      script = ''
        export HOME="$TMPDIR/home" CARGO_HOME="$TMPDIR/cargo-home"
        mkdir -p "$HOME" "$CARGO_HOME"
        cat > "$CARGO_HOME/config.toml" <<CONFIG
        [source.crates-io]
        replace-with = "vendored"
        [source.vendored]
        directory = "${vendor}"
        CONFIG
        cp -r ${packageSrc package} "$TMPDIR/src"
        chmod -R u+w "$TMPDIR/src"
        cd "$TMPDIR/src"
        # A member whose code the source leaves out gets a stub target, so that cargo loads the
        # workspace; `-p ${package}` never builds it.
        for manifest in */Cargo.toml; do
          member=''${manifest%/Cargo.toml}
          if [ "$member" != ${package} ] && [ ! -e "$member/src" ]; then
            mkdir -p "$member/src"
            echo 'fn main() {}' > "$member/src/main.rs"
          fi
        done
        export PATH="${rustToolchain}/bin:${hostPath}"
        # Panic locations name source files; remapped, the binary references no build input.
        export RUSTFLAGS="$RUSTFLAGS_STAGE --remap-path-prefix=${vendor}=/cargo-vendor --remap-path-prefix=$TMPDIR/src=/src"
        echo "stage $stage: cargo build -p ${package}${featureArgs} --target ${target} RUSTFLAGS='$RUSTFLAGS'"
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
        cp "target/${target}/release/${package}" "$out/bin/${package}"
      '';
    };

  tools = { inherit llvmProfdata llvmBolt mergeFdata readelf boltRuntimeLib redisServer valgrind; };

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
      mkdir -p "$out"
      write_versions offline-debian "$out/versions.json"
      cat "$out/versions.json"
    '';
  };
in
{
  name = "offline-debian";
  inherit system target rustRelease src runStage buildPackage tools versions;
}
