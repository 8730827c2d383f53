# The nixpkgs toolchain provider (nix/README.md's interface) for the flake:
#
#   Rust      the release of nix/rust-release.nix from fenix (`fromToolchainName`, its channel
#             manifest checked by sha256: rustc 1.95.0, LLVM 22), components cargo, rustc,
#             rust-std, llvm-tools, clippy, rustfmt; pinned by release, not by the fenix revision,
#             so `nix flake update` cannot move it away from the pinned profiles
#   builds    crane: one `buildDepsOnly` per distinct (package, RUSTFLAGS), reused by a `buildPackage`
#             with the very same RUSTFLAGS, `--target`, linker and cargo arguments
#   profdata  `llvm-profdata` of fenix's llvm-tools component: the LLVM rustc itself was built with
#   BOLT      nixpkgs `llvmPackages_22.bolt` (llvm-bolt, merge-fdata, libbolt_rt_instr.a)
#   stages    `pkgs.runCommand` (stdenvNoCC: bash, coreutils, grep, sed, findutils on PATH)
#
# The linker, decided once for every stage and both systems: the nixpkgs cc wrapper driving GNU ld
# through the nixpkgs ld-wrapper (`${stdenv.cc}/bin/cc`).
#   - rustc >= 1.90 links x86_64-unknown-linux-gnu with its bundled rust-lld (`cc -fuse-ld=lld
#     -B .../gcc-ld`), which bypasses the ld-wrapper (no NIX_LDFLAGS, no RUNPATH injection; see
#     nix-community/fenix#159). aarch64-unknown-linux-gnu links with `cc` (GNU ld) by default. So on
#     x86_64 every stage adds `-Clinker-features=-lld` (stable on that target since 1.90, and only
#     there: on aarch64 the flag is an error without -Zunstable-options, and not needed).
#   - One linker for instrumented, PGO and plain builds keeps layout differences down to the profile,
#     and `--emit-relocs` (what BOLT needs) is GNU ld's own, long-standing option.
#   - The `versions` derivation links a probe with exactly these settings and fails, naming the
#     stage `toolchain`, when the result was linked by LLD (LLD stamps "Linker: LLD" into .comment),
#     lacks .rela.text under `--emit-relocs`, or has an interpreter other than nixpkgs' glibc.
# Build scripts and proc macros (host artifacts) are not affected by RUSTFLAGS when `--target` is
# given, so they keep rustc's default linker; they are never shipped or profiled.
{
  pkgs,
  # The crane flake input (provides `mkLib`).
  crane,
  # The fenix flake input (provides `packages.<system>.fromToolchainName`).
  fenix,
  # The Rust release and its channel manifest's sha256 (nix/rust-release.nix).
  rustRelease ? import ../rust-release.nix,
  # The repository root; cleaned to the Cargo sources here.
  src,
  system ? pkgs.stdenv.hostPlatform.system,
  # Build for another system from this one ("aarch64-linux" on an x86_64-linux builder): the
  # target's rust-std from fenix beside the host toolchain, nixpkgs' cross cc as its linker, and
  # every binary of the target run through nixpkgs' emulator for it (qemu-user:
  # `hostPlatform.emulator buildPackages`), so the chain trains it on this builder. null: native.
  crossSystem ? null,
  # nixpkgs of crossSystem (the flake's `legacyPackages.aarch64-linux`): BOLT's instrumentation
  # runtime must be of the target's architecture, and the native aarch64 BOLT package has it
  # (substituted from the binary cache, never built here).
  targetPkgs ? null,
  # LLVM major of the pinned rustc (1.95.0: LLVM 22.1.2); also picks `llvmPackages_<major>`.
  llvmMajor ? "22",
  # Workspace version; crane needs one for derivation names. Read from Cargo.toml's
  # [workspace.package] (the root manifest has no [package] for crane to find).
  version ? (builtins.fromTOML (builtins.readFile (src + "/Cargo.toml"))).workspace.package.version,
}:
let
  triples = {
    x86_64-linux = "x86_64-unknown-linux-gnu";
    aarch64-linux = "aarch64-unknown-linux-gnu";
  };
  tripleOf = sys: triples.${sys} or (throw "nix/toolchains/nixpkgs.nix: unsupported system ${sys}");
  # The builder's triple (the trainer and every tool run here) and the gateway's.
  hostTarget = tripleOf system;
  cross = crossSystem != null;
  target = if cross then tripleOf crossSystem else hostTarget;

  # The cross package set whose stdenv links for the target and knows its emulator.
  crossPkgs =
    {
      aarch64-linux = pkgs.pkgsCross.aarch64-multiplatform;
    }
    .${crossSystem} or (throw "nix/toolchains/nixpkgs.nix: no cross package set for ${crossSystem}");
  emulator = if cross then crossPkgs.stdenv.hostPlatform.emulator pkgs else null;

  # Shell-style name of the target for cargo's environment variables.
  envNameOf = triple: builtins.replaceStrings [ "-" ] [ "_" ] (pkgs.lib.toUpper triple);
  targetEnv = envNameOf target;

  # The channel manifest of exactly this release, fetched and checked by its sha256 (an
  # import-from-derivation: the manifest names every component's tarball and hash).
  channel = fenix.packages.${system}.fromToolchainName {
    name = rustRelease.release;
    sha256 = rustRelease.manifestSha256;
  };

  hostComponents = channel.withComponents [
    "cargo"
    "rustc"
    "rust-std"
    "llvm-tools"
    "clippy"
    "rustfmt"
  ];
  # A cross build adds the target's standard library (profiler runtime included) of the very
  # same release, from the same manifest.
  rustToolchain =
    if cross then
      fenix.packages.${system}.combine [
        hostComponents
        (fenix.packages.${system}.targets.${target}.fromToolchainName {
          name = rustRelease.release;
          sha256 = rustRelease.manifestSha256;
        }).rust-std
      ]
    else
      hostComponents;

  craneLib = (crane.mkLib pkgs).overrideToolchain rustToolchain;

  cargoSrc = craneLib.cleanCargoSource src;

  # The patched dependencies (third_party/README.md), on their own so that the dependency builds
  # depend on them and on nothing else of the workspace.
  thirdPartySrc = pkgs.lib.cleanSourceWith {
    src = src + "/third_party";
    name = "gateway-third-party-source";
    filter = craneLib.filterCargoSources;
  };

  # Arguments of every `buildDepsOnly`. crane's dummy source stubs every crate it finds, the
  # `[patch.crates-io]` copies in third_party/ too; the crates.io crates that depend on them
  # (hyper-util on hyper) would not compile against a stub, so the real sources go back in.
  depsArgs = {
    extraDummyScript = ''
      rm -rf "$out/third_party"
      cp -r --no-preserve=mode,ownership ${thirdPartySrc} "$out/third_party"
    '';
  };

  # The checks run the trainer's tests too, which read the repository's shape files.
  checkSrc = pkgs.lib.cleanSourceWith {
    inherit src;
    name = "gateway-workspace-checks-source";
    filter =
      path: type:
      craneLib.filterCargoSources path type
      || builtins.match ".*/shapes(/.*)?" (toString path) != null
      # TLS test certificates (gateway/tests/tls.rs).
      || builtins.match ".*/tests/fixtures(/.*)?" (toString path) != null;
  };

  llvmPackages = pkgs."llvmPackages_${llvmMajor}";
  bolt = llvmPackages.bolt;

  # The C compiler driver that links the target (the cross one for a cross build).
  cc = if cross then crossPkgs.stdenv.cc else pkgs.stdenv.cc;
  ccBin = "${cc}/bin/${cc.targetPrefix or ""}cc";

  # The linker settings every build carries (see the header).
  linkerRustflagsFor = triple: if triple == "x86_64-unknown-linux-gnu" then "-Clinker-features=-lld" else "";
  linkerRustflags = linkerRustflagsFor target;
  linkerEnv = {
    "CARGO_TARGET_${targetEnv}_LINKER" = ccBin;
  };
  # A build for the builder in a cross chain (the trainer): the builder's own linker settings.
  hostLinkerEnv = {
    "CARGO_TARGET_${envNameOf hostTarget}_LINKER" = "${pkgs.stdenv.cc}/bin/cc";
  };

  joinFlags = a: b: if a == "" then b else if b == "" then a else "${a} ${b}";

  tools = {
    # rustup's llvm-tools layout: lib/rustlib/<host triple>/bin.
    llvmProfdata = "${channel.llvm-tools}/lib/rustlib/${hostTarget}/bin/llvm-profdata";
    llvmBolt = "${bolt}/bin/llvm-bolt";
    mergeFdata = "${bolt}/bin/merge-fdata";
    readelf = "${pkgs.lib.getBin llvmPackages.llvm}/bin/llvm-readelf";
    boltRuntimeLib =
      if cross then
        "${
          (if targetPkgs != null then targetPkgs else throw "nix/toolchains/nixpkgs.nix: a cross build needs targetPkgs (BOLT's runtime of ${target})")."llvmPackages_${llvmMajor}".bolt
        }/lib/libbolt_rt_instr.a"
      else
        "${bolt}/lib/libbolt_rt_instr.a";
    llvmNm = "${pkgs.lib.getBin llvmPackages.llvm}/bin/llvm-nm";
    llvmObjcopy = "${pkgs.lib.getBin llvmPackages.llvm}/bin/llvm-objcopy";
    # The shared quota store of the `shared-limits` training shapes (and of the gateway's tests).
    redisServer = "${pkgs.redis}/bin/redis-server";
    valgrind = "${pkgs.valgrind}/bin/valgrind";
    # The training checks' contrast training runs on one CPU (nix/stages/contrast.nix).
    taskset = "${pkgs.util-linux}/bin/taskset";
  };

  prologue = import ./stage-prologue.nix;
  versionChecks = import ./version-checks.nix;

  # A cross chain's stages are named after the target's architecture (gateway-pgo-aarch64); a
  # build for the builder (`forTarget = false`: the trainer) keeps its name.
  arch = builtins.head (builtins.split "-" target);
  stageName = name: forTarget: if cross && forTarget then "${name}-${arch}" else name;
  runStage =
    {
      name,
      script,
      env ? { },
      forTarget ? true,
    }:
    pkgs.runCommand (stageName name forTarget) env (prologue (stageName name forTarget) + script);

  packageArgs = import ./package-args.nix { inherit target hostTarget; };

  # Arguments shared, verbatim, by a package build and its dependency build: the same RUSTFLAGS,
  # target, linker and cargo arguments, so cargo's fingerprints match and the package build reuses
  # every dependency artifact instead of rebuilding it with other flags. Another crate's source
  # (nix/lib/build-chain.nix `src`) is taken as given (a published crate may `include_str!` files
  # crane's cleanCargoSource would drop; a user cleans their own source) and vendored by crane from
  # its Cargo.lock (or `vendor`, a cargoVendorDir); its version is its manifest's.
  cargoArgs =
    a:
    let
      own = a.src == null;
    in
    {
      inherit (a) pname;
      version = if own then version else (craneLib.crateNameFromCargoToml { src = a.src; }).version;
      src = if own then cargoSrc else a.src;
      strictDeps = true;
      cargoExtraArgs = a.cargoArgs;
      # PGO stages must not run tests: the instrumented binary would profile the test run.
      doCheck = false;
      # The binaries go to the next stage exactly as the linker wrote them: no strip (keeps the
      # symbols BOLT needs), no patchelf rewrite of a binary BOLT will rewrite.
      dontStrip = true;
      dontPatchELF = true;
      env = (if a.buildTarget == target then linkerEnv else hostLinkerEnv) // {
        RUSTFLAGS = joinFlags a.rustflags (linkerRustflagsFor a.buildTarget);
      };
    }
    // (if a.vendor == null then { } else { cargoVendorDir = a.vendor; });

  pgoDiagnosticsOf = import ./pgo-diagnostics.nix;

  # crane's build command (lib/buildPackage.nix at the pinned crane) with rustc's diagnostics,
  # which `json-render-diagnostics` has cargo print to stderr, also kept in a file.
  keepPgoDiagnostics = package: args: {
    buildPhaseCargoCommand = ''
      cargoBuildLog=$(mktemp cargoBuildLogXXXX.json)
      { cargoWithProfile build --message-format json-render-diagnostics ${args.cargoExtraArgs} >"$cargoBuildLog"; } 2>&1 \
        | tee "$NIX_BUILD_TOP/cargo-build.log"
      status=''${PIPESTATUS[0]}
      [ "$status" -eq 0 ] || exit "$status"
    '';
    postInstall = ''
      mkdir -p "$out/share/${package}"
      ${pgoDiagnosticsOf ''"$NIX_BUILD_TOP/cargo-build.log"'' ''"$out/share/${package}/pgo-diagnostics.txt"''}
    '';
  };

  buildPackage =
    stageArgs:
    let
      a = packageArgs stageArgs;
      inherit (a) pname package binary rustflags pgoDiagnostics features forHost;
      args = cargoArgs a;
      # Named by package, flags and features, not by stage: stages that build the same package
      # with the same RUSTFLAGS and features share one dependency derivation.
      flavour = rustflags + (if features == [ ] then "" else " --features ${toString features}");
      depsName =
        package
        + (if flavour == "" then "" else "-" + builtins.substring 0 8 (builtins.hashString "sha256" flavour));
      deps = craneLib.buildDepsOnly (
        args
        // {
          pname = stageName depsName (!forHost);
          # crane's buildDepsOnly runs `cargo check` before `cargo build` whatever doCheck says;
          # the check pass only caches metadata for a later check or clippy, which never runs on
          # these artifacts (the package build compiles), so it is a no-op here: check + build
          # took 1.2x-1.6x the CPU time of build alone (docs/flake.md).
          cargoCheckCommand = "true";
        }
        # The workspace's patched dependencies; another crate has none of ours.
        // (if a.src == null then depsArgs else { })
      );
    in
    craneLib.buildPackage (
      args
      // (if pgoDiagnostics then keepPgoDiagnostics package args else { })
      // {
        pname = stageName pname (!forHost);
        cargoArtifacts = deps;
        passthru = {
          inherit deps rustflags package binary;
        };
      }
    );

  # A probe linked exactly like the stages (same RUSTFLAGS linker part, same linker variable, same
  # `--target`), plus `--emit-relocs` as the PGO stage links.
  probeSource = pkgs.writeText "linker-probe.rs" ''
    fn main() {
        println!("linker probe");
    }
  '';

  versions = pkgs.runCommandCC (stageName "toolchain-versions" true) linkerEnv (
    prologue (stageName "toolchain" true)
    + ''
      ${versionChecks {
        rustc = "${rustToolchain}/bin/rustc";
        cargo = "${rustToolchain}/bin/cargo";
        release = rustRelease.release;
        inherit tools target;
      }}
      [ "''${rustc_llvm%%.*}" = "${llvmMajor}" ] \
        || fail "rustc uses LLVM $rustc_llvm but this provider pins llvmPackages_${llvmMajor}"

      # The linker every stage uses (see nix/toolchains/nixpkgs.nix).
      export HOME="$TMPDIR"
      "$rustc" --edition 2021 -O --target ${target} \
        ${joinFlags "-Clink-args=-Wl,--emit-relocs" linkerRustflags} \
        -Clinker="$CARGO_TARGET_${targetEnv}_LINKER" \
        ${probeSource} -o probe || fail "cannot link the linker probe"
      ${tools.readelf} -p .comment probe > comment.txt || fail "cannot read .comment of the probe"
      if grep -q 'Linker: LLD' comment.txt; then
        fail "the probe was linked by LLD, not by GNU ld through the nixpkgs cc wrapper: $(cat comment.txt)"
      fi
      ${tools.readelf} -S -W probe | grep -q ' \.rela\.text ' \
        || fail "GNU ld did not keep .rela.text under --emit-relocs"
      interp=$(${tools.readelf} -l -W probe | sed -n 's/.*Requesting program interpreter: \(.*\)\]/\1/p')
      [ "$interp" = "${cc.bintools.dynamicLinker}" ] \
        || fail "the probe's interpreter is '$interp', not nixpkgs' ${cc.bintools.dynamicLinker}"
      ${if cross then emulator + " " else ""}./probe | grep -q 'linker probe' \
        || fail "the linker probe does not run${if cross then " under ${emulator}" else ""}"

      mkdir -p "$out"
      write_versions nixpkgs-fenix "$out/versions.json"
      printf 'GNU ld via %s (RUSTFLAGS linker part: "%s"); interpreter %s\n' \
        "$CARGO_TARGET_${targetEnv}_LINKER" "${linkerRustflags}" "$interp" > "$out/linker.txt"
      cat "$out/versions.json" "$out/linker.txt"
    ''
  );
in
{
  name = "nixpkgs-fenix";
  # The cargo workspace source every build compiles.
  src = cargoSrc;
  rustRelease = rustRelease.release;
  inherit
    system
    target
    hostTarget
    emulator
    runStage
    buildPackage
    tools
    versions
    ;

  # Not part of the provider interface: what the flake needs for checks, shells and images.
  extras = {
    inherit
      craneLib
      cargoSrc
      depsArgs
      rustToolchain
      bolt
      linkerEnv
      linkerRustflags
      ;
    # Arguments for the test, clippy and rustfmt checks: a host build with the dev profile (fat
    # LTO on every test binary would only slow the checks down), no PGO flags, the same linker.
    checkArgs = {
      pname = "gateway-workspace";
      inherit version;
      src = checkSrc;
      strictDeps = true;
      CARGO_PROFILE = "dev";
      env = linkerEnv // {
        RUSTFLAGS = linkerRustflags;
        # The shared-limits tests run a real Redis (gateway/tests/redis_support, trainer/tests).
        REDIS_SERVER = tools.redisServer;
      };
    };
  };
}
