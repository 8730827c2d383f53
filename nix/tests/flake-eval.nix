# Evaluation test of flake.nix, runnable with Nix 2.8 and without nixpkgs, crane or fenix:
#
#   nix-instantiate nix/tests/flake-eval.nix      # (or nix/tests/flake-check, which also parses every .nix)
#
# It imports flake.nix, calls its `outputs` with fake inputs and asserts the wiring. The fakes are
# real (never built) derivations, so a stage that consumes another has it in its string context,
# exactly as Nix records a build dependency; hidden intermediate derivations are read back from
# their .drv files (hence `nix-instantiate`, which writes them, rather than `--eval`, which does
# not). Prints the path of a trivial .drv when every assertion holds; otherwise fails with the
# list of what is miswired.
let
  inherit (builtins)
    all
    any
    attrNames
    concatStringsSep
    elem
    filter
    getContext
    hasAttr
    head
    isFunction
    isString
    length
    listToAttrs
    map
    match
    readFile
    replaceStrings
    split
    toJSON
    unsafeDiscardStringContext
    ;

  flake = import ../../flake.nix;

  systems = [
    "x86_64-linux"
    "aarch64-linux"
  ];
  triples = {
    x86_64-linux = "x86_64-unknown-linux-gnu";
    aarch64-linux = "aarch64-unknown-linux-gnu";
  };
  genAttrs = names: f: listToAttrs (map (n: {
    name = n;
    value = f n;
  }) names);

  # ---- fake derivations ---------------------------------------------------------------------

  # A real derivation that is never built. `recorded` is kept as `args` for inspection and is also
  # serialized into the derivation, so every derivation/store path it mentions becomes a dependency.
  fakeDrv =
    {
      kind,
      name,
      system,
      recorded ? { },
      extra ? { },
      # A miswiring the fake builder itself detects; forcing the output path then fails.
      error ? null,
    }:
    let
      d = derivation {
        inherit name system;
        builder = "/bin/sh";
        args = [
          "-c"
          "echo fake derivation of nix/tests/flake-eval.nix; exit 1"
        ];
        fakeKind = kind;
        recorded = toJSON recorded;
      };
    in
    extra
    // {
      type = "derivation";
      inherit name system kind;
      args = recorded;
      outPath = if error == null then d.outPath else throw "flake-eval: ${error}";
      drvPath = if error == null then d.drvPath else throw "flake-eval: ${error}";
      outputName = "out";
    };

  lowers = [ "a" "b" "c" "d" "e" "f" "g" "h" "i" "j" "k" "l" "m" "n" "o" "p" "q" "r" "s" "t" "u" "v" "w" "x" "y" "z" ];
  uppers = [ "A" "B" "C" "D" "E" "F" "G" "H" "I" "J" "K" "L" "M" "N" "O" "P" "Q" "R" "S" "T" "U" "V" "W" "X" "Y" "Z" ];

  fakeLib = import ./fake-module-lib.nix // {
    toUpper = replaceStrings lowers uppers;
    getBin = x: x;
    cleanSourceWith = { src, name ? "source", filter ? (_: _: true) }:
      "/nix/store/00000000000000000000000000000000-${name}";
  };

  fakePkgs =
    system:
    let
      pkg = name: fakeDrv {
        kind = "package";
        inherit name system;
      };
      runCommandWith =
        kind: name: env: script:
        fakeDrv {
          inherit kind name;
          # As with mkDerivation, an explicit `system` attribute wins.
          system = env.system or system;
          recorded = {
            inherit env script;
          };
          extra = env;
        };
      cc = pkg "gcc-wrapper" // {
        bintools.dynamicLinker = "${pkg "glibc"}/lib/ld-linux.so";
      };
    in
    {
      lib = fakeLib;
      stdenv = {
        hostPlatform.system = system;
        inherit system cc;
      };
      runCommand = runCommandWith "runCommand";
      runCommandCC = runCommandWith "runCommandCC";
      writeText =
        name: text:
        fakeDrv {
          kind = "writeText";
          inherit name system;
          recorded = {
            inherit text;
          };
        };
      writeShellScript =
        name: text:
        fakeDrv {
          kind = "writeShellScript";
          inherit name system;
          recorded = {
            inherit text;
          };
        };
      valgrind = pkg "valgrind";
      util-linux = pkg "util-linux";
      qemu-user = pkg "qemu-user";
      # nixpkgs' cross package set: its cc links for aarch64 (a prefixed driver), and its host
      # platform's emulator, given the build platform's packages, is a qemu-user binary.
      pkgsCross.aarch64-multiplatform.stdenv = {
        cc = pkg "aarch64-unknown-linux-gnu-gcc-wrapper" // {
          targetPrefix = "aarch64-unknown-linux-gnu-";
          bintools.dynamicLinker = "${pkg "glibc-aarch64"}/lib/ld-linux-aarch64.so.1";
        };
        hostPlatform.emulator = buildPackages: "${buildPackages.qemu-user}/bin/qemu-aarch64";
      };
      llvmPackages_22 = {
        bolt = pkg "bolt-22";
        llvm = pkg "llvm-22";
      };
      dockerTools.buildLayeredImage =
        args:
        fakeDrv {
          kind = "oci";
          name = "${args.name}.tar.gz";
          inherit system;
          recorded = args;
        };
      cargo-nextest = pkg "cargo-nextest";
      redis = pkg "redis";
      nixfmt-tree = pkg "nixfmt-tree";
      formats.json = _: {
        type = fakeLib.types.anything;
        generate =
          name: value:
          fakeDrv {
            kind = "json";
            inherit name system;
            recorded = value;
          };
      };
    };

  fakeNixpkgs = {
    lib = fakeLib;
    legacyPackages = genAttrs systems fakePkgs;
  };

  # crane: builders record their arguments; buildPackage refuses dependency artifacts built with
  # other RUSTFLAGS, cargo arguments or linker than its own.
  mkCraneLib =
    pkgs: toolchain:
    let
      system = pkgs.stdenv.system;
      builder =
        kind: suffix: args:
        fakeDrv {
          inherit kind system;
          name = "${args.pname}${suffix}";
          recorded = args // {
            toolchain = if toolchain == null then "default" else toolchain;
          };
          extra = args.passthru or { };
        };
      sameAsDeps =
        args:
        let
          deps = args.cargoArtifacts;
          mismatch =
            filter (k: (deps.args.${k} or null) != (args.${k} or null)) [
              "cargoExtraArgs"
              "src"
              "doCheck"
            ]
            ++ map (k: "env.${k}") (
              filter (k: (deps.args.env.${k} or null) != (args.env.${k} or null)) (
                attrNames ((args.env or { }) // (deps.args.env or { }))
              )
            );
        in
        if !(args ? cargoArtifacts) || deps == null then
          "buildPackage ${args.pname}: no cargoArtifacts from a buildDepsOnly"
        else if deps.kind != "crane-deps" then
          "buildPackage ${args.pname}: cargoArtifacts is not a buildDepsOnly"
        else if mismatch != [ ] then
          "buildPackage ${args.pname}: its buildDepsOnly differs in ${concatStringsSep ", " mismatch} (deps RUSTFLAGS '${deps.args.env.RUSTFLAGS or "<unset>"}', package RUSTFLAGS '${args.env.RUSTFLAGS or "<unset>"}')"
        else
          null;
    in
    {
      overrideToolchain = mkCraneLib pkgs;
      cleanCargoSource = src: "/nix/store/00000000000000000000000000000000-cleaned-${baseNameOf (toString src)}";
      crateNameFromCargoToml =
        { src, ... }:
        let
          manifest = builtins.fromTOML (readFile (src + "/Cargo.toml"));
        in
        {
          pname = manifest.package.name;
          inherit (manifest.package) version;
        };
      filterCargoSources = path: type: true;
      buildDepsOnly = builder "crane-deps" "-deps";
      buildPackage =
        args:
        let
          base = builder "crane-package" "" args;
          err = sameAsDeps args;
        in
        if err == null then base else fakeDrv {
          kind = "crane-package";
          inherit system;
          name = args.pname;
          error = err;
        };
      cargoClippy = builder "crane-clippy" "-clippy";
      cargoFmt = builder "crane-fmt" "-fmt";
      cargoNextest = builder "crane-nextest" "-nextest";
      devShell =
        args:
        fakeDrv {
          kind = "crane-devshell";
          name = "devshell";
          inherit system;
          recorded = args // {
            inherit toolchain;
          };
        };
    };

  fakeCrane = {
    mkLib = pkgs: mkCraneLib pkgs null;
  };

  # fenix by release only: a toolchain from `fromToolchainName` records the release and the
  # manifest's sha256 it was asked for. There is no `stable` here, so a provider that took the
  # toolchain of the fenix revision instead fails to evaluate.
  fakeFenix = {
    packages = genAttrs systems (system: {
      # `combine` joins components into one toolchain; `targets.<triple>.fromToolchainName` gives
      # that target's components of a release (only rust-std is used).
      combine =
        parts:
        fakeDrv {
          kind = "fenix-combined";
          name = "rust-mixed";
          inherit system;
          recorded = {
            inherit parts;
          };
        };
      targets = genAttrs (builtins.attrValues triples) (triple: {
        fromToolchainName =
          { name, sha256 }:
          {
            rust-std = fakeDrv {
              kind = "fenix-component";
              name = "rust-std-${triple}-${name}";
              inherit system;
              recorded = {
                inherit name sha256 triple;
              };
            };
          };
      });
      fromToolchainName =
        { name, sha256 }:
        {
          requested = { inherit name sha256; };
          withComponents =
            components:
            fakeDrv {
              kind = "fenix-toolchain";
              name = "rust-${name}-with-components";
              inherit system;
              recorded = {
                inherit components name sha256;
              };
            };
          llvm-tools = fakeDrv {
            kind = "fenix-component";
            name = "llvm-tools-${name}";
            inherit system;
          };
        };
    });
  };

  rustRelease = import ../rust-release.nix;

  outputs = flake.outputs {
    self = {
      outPath = toString ../..;
    };
    nixpkgs = fakeNixpkgs;
    crane = fakeCrane;
    fenix = fakeFenix;
  };

  # ---- helpers ------------------------------------------------------------------------------

  # Direct dependencies (drv paths) of a fake derivation.
  depsOf = drv: attrNames (getContext (toJSON drv.args));
  consumes = a: b: elem b.drvPath (depsOf a);

  escapeRegex = replaceStrings
    [ "\\" "." "[" "]" "{" "}" "(" ")" "*" "+" "?" "^" "$" "|" ]
    [ "\\\\" "\\." "\\[" "\\]" "\\{" "\\}" "\\(" "\\)" "\\*" "\\+" "\\?" "\\^" "\\$" "\\|" ];
  hasInfix =
    needle: hay:
    length (split (escapeRegex (unsafeDiscardStringContext needle)) (unsafeDiscardStringContext hay)) > 1;

  isStorePath = p: isString p && match "/nix/store/[0-9a-z]{32}-[^/]+(/.*)?" (unsafeDiscardStringContext p) != null;

  check = name: ok: { inherit name ok; };

  # ---- assertions per system ----------------------------------------------------------------

  perSystem =
    system:
    let
      P = outputs.legacyPackages.${system}.pipeline;
      pkgs = outputs.packages.${system};
      checks = outputs.checks.${system};
      tc = P.toolchain;
      tools = tc.tools;
      triple = triples.${system};
      cc = fakeNixpkgs.legacyPackages.${system}.stdenv.cc;
      linkerVar = "CARGO_TARGET_${replaceStrings [ "-" ] [ "_" ] (fakeLib.toUpper triple)}_LINKER";
      s = m: "[${system}] ${m}";

      # The pinned profiles of this target and Rust release in the repository: the directory the
      # offline chain reads too (absent: that profile is trained in the build).
      where = "profiles/${triple}/rust-${rustRelease.release}";
      pinnedLlvm = ../../. + "/${where}/llvm";
      pinnedBolt = ../../. + "/${where}/bolt";
      pinned = builtins.pathExists pinnedLlvm && builtins.pathExists pinnedBolt;
      offlinePinned = (import ../offline/default.nix {
        rustToolchain = "/unused";
        vendorDir = "/unused";
        rustRelease = rustRelease.release;
      }).pinned;

      stageNames = [
        "gateway"
        "trainer"
        "gateway-instrumented"
        "gateway-profile"
        "gateway-pgo"
        "gateway-bolt-instrumented"
        "gateway-bolt-profile"
        "gateway-pgo-bolt"
        "gateway-profile-fresh"
        "gateway-bolt-profile-fresh"
        "gateway-coverage"
        "holdout-instructions"
        "release-check"
        "versions"
      ] ++ (if pinned then [ "gateway-training" "gateway-bolt-training" ] else [ ]);

      builds = [
        P.gateway
        P.trainer
        P.gateway-instrumented
      ];

      # The hidden build inside the PGO stage: a dependency whose .drv carries -Cprofile-use of the
      # pinned profile, and that keeps LLVM's profile-use diagnostics.
      profileUse = "-Cprofile-use=${P.gateway-profile}/gateway.profdata";
      pgoBuilds = filter (p: hasInfix profileUse (readFile p)) (depsOf P.gateway-pgo);
      pgoBuild = head pgoBuilds;

      # Every stage script that runs a tool must name it by the provider's store path.
      scriptOf = d: d.args.script or "";
    in
    [
      (check (s "provider is nixpkgs-fenix for ${system}, target ${triple}") (
        tc.name == "nixpkgs-fenix" && tc.system == system && tc.target == triple
      ))
      (check (s "packages: gateway gateway-instrumented gateway-profile gateway-pgo gateway-pgo-bolt trainer gateway-oci default") (
        all (n: hasAttr n pkgs) [
          "gateway"
          "gateway-instrumented"
          "gateway-profile"
          "gateway-pgo"
          "gateway-pgo-bolt"
          "trainer"
          "gateway-oci"
          "default"
        ]
      ))
      (check (s "crane builds carry the workspace version from Cargo.toml") (
        all (b: b.args.version == (builtins.fromTOML (readFile ../../Cargo.toml)).workspace.package.version) builds
      ))
      (check (s "packages.default is gateway-pgo-bolt") (pkgs.default.drvPath == P.gateway-pgo-bolt.drvPath))
      (check (s "every stage derivation names system ${system}") (
        all (n: P.${n}.system == system) stageNames
      ))
      (check (s "the dependency builds of the cargo stages name system ${system}") (
        all (b: b.args.cargoArtifacts.system == system) builds
      ))

      # buildDepsOnly once per RUSTFLAGS, the same flags/target/linker in the package build.
      (check (s "each buildPackage reuses a buildDepsOnly with identical RUSTFLAGS, --target, linker") (
        all (
          b:
          b.kind == "crane-package"
          && b.args.cargoArtifacts.kind == "crane-deps"
          && b.args.env.RUSTFLAGS == b.args.cargoArtifacts.args.env.RUSTFLAGS
          && b.args.cargoExtraArgs == b.args.cargoArtifacts.args.cargoExtraArgs
          && b.args.env.${linkerVar} == b.args.cargoArtifacts.args.env.${linkerVar}
        ) builds
      ))
      (check (s "cargo builds pass --target ${triple} and -p <package>, doCheck = false") (
        all (
          b:
          hasInfix "--target ${triple}" b.args.cargoExtraArgs
          && hasInfix "-p ${b.package}" b.args.cargoExtraArgs
          && b.args.doCheck == false
          && b.args.cargoArtifacts.args.doCheck == false
        ) builds
      ))
      # crane's buildDepsOnly runs cargoCheckCommand before building, doCheck or not.
      (check (s "stage dependency builds skip crane's cargo check pass; the test/clippy deps keep it") (
        all (b: b.args.cargoArtifacts.args.cargoCheckCommand or null == "true") builds
        && !(checks.tests.args.cargoArtifacts.args ? cargoCheckCommand)
      ))
      # third_party/README.md: a stubbed patched crate would break the crates.io crates on it.
      (check (s "every dependency build puts the real third_party/ crates back into crane's dummy source") (
        all (
          d: hasInfix "cp -r --no-preserve=mode,ownership" (d.args.extraDummyScript or "")
            && hasInfix "$out/third_party" (d.args.extraDummyScript or "")
        ) (map (b: b.args.cargoArtifacts) builds ++ [ checks.tests.args.cargoArtifacts ])
      ))
      (check (s "gateway-instrumented is built with -Cprofile-generate (and its deps too)") (
        hasInfix "-Cprofile-generate" P.gateway-instrumented.args.env.RUSTFLAGS
        && hasInfix "-Cprofile-generate" P.gateway-instrumented.args.cargoArtifacts.args.env.RUSTFLAGS
      ))
      (check (s "the plain gateway has no profile flags") (
        !(hasInfix "-Cprofile" P.gateway.args.env.RUSTFLAGS)
      ))
      (check (s "linker: ${linkerVar} = the nixpkgs cc wrapper in every build") (
        all (b: b.args.env.${linkerVar} == "${cc}/bin/cc") builds
      ))
      (check (s "linker: -Clinker-features=-lld on x86_64 only") (
        all (
          b: hasInfix "-Clinker-features=-lld" b.args.env.RUSTFLAGS == (system == "x86_64-linux")
        ) builds
      ))
      (check (s "fenix toolchain has cargo, rustc, rust-std, llvm-tools; crane uses it") (
        let
          t = P.gateway.args.toolchain;
        in
        t.kind == "fenix-toolchain"
        && all (c: elem c t.args.components) [
          "cargo"
          "rustc"
          "rust-std"
          "llvm-tools"
        ]
      ))
      (check (s "the flake's Rust is release ${rustRelease.release} by fromToolchainName with nix/rust-release.nix's manifest sha256, the release the pinned profiles are keyed by") (
        let
          t = P.gateway.args.toolchain;
        in
        t.args.name == rustRelease.release
        && t.args.sha256 == rustRelease.manifestSha256
        && tc.rustRelease == rustRelease.release
        && hasInfix "release = rustRelease" (readFile ../toolchains/nixpkgs.nix)
        && hasInfix "declares Rust ${rustRelease.release}" (scriptOf P.versions)
      ))

      # The stage chain: the profiles shared with the offline chain, keyed by target and release.
      (check (s "the flake reads the profile directory the offline chain reads: ${where}") (
        P.pinned.where == where
        && (if system == "x86_64-linux" then
          P.pinned.where == offlinePinned.where
          && toString P.pinned.llvm == toString offlinePinned.llvm
          && toString P.pinned.bolt == toString offlinePinned.bolt
        else true)
      ))
      (check (s "gateway-profile reads ${where}/llvm by store path (or, with none pinned, gateway-profile-fresh) and runs pgo-engine verify with the codegen key") (
        hasInfix "/bin/pgo-engine verify" (scriptOf P.gateway-profile)
        && hasInfix "--kind llvm" (scriptOf P.gateway-profile)
        && hasInfix "--codegen ${P.codegenKey}" (scriptOf P.gateway-profile)
        && hasInfix tools.llvmProfdata (scriptOf P.gateway-profile)
        && (if pinned then
          P.pinned.llvm != null
          && hasInfix (toString P.pinned.llvm) (scriptOf P.gateway-profile)
          && !(consumes P.gateway-profile P.gateway-profile-fresh)
        else
          consumes P.gateway-profile P.gateway-profile-fresh)
      ))
      (check (s "gateway-bolt-profile: the BOLT profile checked by content against gateway-pgo's binary (llvm-bolt -report-stale, its symbol table)") (
        hasInfix "${tools.llvmBolt} ${P.gateway-pgo}/bin/gateway" (scriptOf P.gateway-bolt-profile)
        && hasInfix "-report-stale" (scriptOf P.gateway-bolt-profile)
        && hasInfix "${tools.readelf} -s -W ${P.gateway-pgo}/bin/gateway" (scriptOf P.gateway-bolt-profile)
        && hasInfix "--bolt-report" (scriptOf P.gateway-bolt-profile)
        && !(hasInfix "--pgo-binary" (scriptOf P.gateway-bolt-profile))
        && (if pinned then
          P.pinned.bolt != null
          && hasInfix (toString P.pinned.bolt) (scriptOf P.gateway-bolt-profile)
        else
          consumes P.gateway-bolt-profile P.gateway-bolt-profile-fresh)
      ))
      (check (s "gateway-pgo consumes a build with -Cprofile-use=<gateway-profile>/gateway.profdata that keeps its PGO diagnostics") (
        length pgoBuilds == 1
        && hasInfix "-pgo-warn-missing-function" (readFile pgoBuild)
        && hasInfix "pgo-diagnostics.txt" (readFile pgoBuild)
        && hasInfix "json-render-diagnostics" (readFile pgoBuild)
        && hasInfix "/bin/pgo-engine use-diagnostics" (scriptOf P.gateway-pgo)
        && hasInfix "nix run .#refresh-profiles" (scriptOf P.gateway-pgo)
      ))
      (check (s "the PGO stage does not wait for a training run (gateway-pgo does not consume gateway-training)") (
        (P.gateway-training == null || !(consumes P.gateway-pgo P.gateway-training))
        && !(consumes P.gateway-pgo P.gateway-instrumented)
      ))
      (check (s "gateway-training: trains gateway-instrumented, checks against gateway-profile, names the refresh app (none where the profile is trained in the build)") (
        if !pinned then P.gateway-training == null && P.gateway-bolt-training == null else
        consumes P.gateway-training P.gateway-instrumented
        && consumes P.gateway-training P.trainer
        && consumes P.gateway-training P.gateway-profile
        && hasInfix "/bin/pgo-engine train" (scriptOf P.gateway-training)
        && hasInfix "/bin/trainer train --gateway \"$PGO_BINARY\"" (scriptOf P.gateway-training)
        && hasInfix "/bin/pgo-engine check" (scriptOf P.gateway-training)
        && hasInfix "--min-overlap" (scriptOf P.gateway-training)
        && hasInfix "nix run .#refresh-profiles" (scriptOf P.gateway-training)
      ))
      (check (s "gateway-bolt-instrumented consumes gateway-pgo; its fdata path is relative (no build directory baked in)") (
        consumes P.gateway-bolt-instrumented P.gateway-pgo
        && hasInfix "-instrumentation-file=gateway.fdata" (scriptOf P.gateway-bolt-instrumented)
        && !(hasInfix "NIX_BUILD_TOP" (scriptOf P.gateway-bolt-instrumented))
      ))
      (check (s "gateway-bolt-training: trains gateway-bolt-instrumented, checks against gateway-bolt-profile") (
        !pinned ||
        consumes P.gateway-bolt-training P.gateway-bolt-instrumented
        && consumes P.gateway-bolt-training P.trainer
        && consumes P.gateway-bolt-training P.gateway-bolt-profile
        && hasInfix "/bin/pgo-engine check" (scriptOf P.gateway-bolt-training)
        && hasInfix tools.mergeFdata (scriptOf P.gateway-bolt-training)
      ))
      (check (s "gateway-pgo-bolt consumes gateway-pgo, both profiles, the training checks of pinned ones (or says trained in build), trainer, versions") (
        consumes P.gateway-pgo-bolt P.gateway-pgo
        && consumes P.gateway-pgo-bolt P.gateway-profile
        && consumes P.gateway-pgo-bolt P.gateway-bolt-profile
        && consumes P.gateway-pgo-bolt P.pgo-engine
        && consumes P.gateway-pgo-bolt P.versions
        && hasInfix "--refresh-command \"nix run .#refresh-profiles\"" (scriptOf P.gateway-pgo-bolt)
        && (if pinned then
          consumes P.gateway-pgo-bolt P.gateway-training
          && consumes P.gateway-pgo-bolt P.gateway-bolt-training
          && hasInfix "--llvm-check ${P.gateway-training}/verdict.json" (scriptOf P.gateway-pgo-bolt)
        else
          hasInfix "--llvm-trained-in-build \"no pinned llvm profile at ${where}/llvm\"" (scriptOf P.gateway-pgo-bolt)
          && hasInfix "--bolt-trained-in-build \"no pinned bolt profile at ${where}/bolt\"" (scriptOf P.gateway-pgo-bolt))
      ))
      (check (s "fresh profiles: gateway-profile-fresh trains gateway-instrumented, gateway-bolt-profile-fresh gateway-bolt-instrumented; in the artifact only where none is pinned") (
        consumes P.gateway-profile-fresh P.gateway-instrumented
        && consumes P.gateway-bolt-profile-fresh P.gateway-bolt-instrumented
        && hasInfix "/bin/pgo-engine manifest" (scriptOf P.gateway-profile-fresh)
        && hasInfix "--codegen ${P.codegenKey}" (scriptOf P.gateway-profile-fresh)
        && hasInfix "--pgo-binary ${P.gateway-pgo}/bin/gateway" (scriptOf P.gateway-bolt-profile-fresh)
        && (pinned == !(consumes P.gateway-profile P.gateway-profile-fresh))
        && (pinned == !(consumes P.gateway-bolt-profile P.gateway-bolt-profile-fresh))
        && !(elem "gateway-profile-fresh" (attrNames outputs.hydraJobs.packages.${system}))
      ))
      (check (s "hydraJobs.release: the release check, pgo-engine verify-proof --require-pinned on gateway-pgo-bolt") (
        outputs.hydraJobs.release.${system}.drvPath == P.release-check.drvPath
        && hasInfix "/bin/pgo-engine verify-proof --require-pinned --binary gateway ${P.gateway-pgo-bolt}" (scriptOf P.release-check)
      ))
      (check (s "gateway-coverage runs trainer coverage on the instrumented gateway; the artifact and both fresh profiles depend on it") (
        hasInfix "/bin/trainer coverage" (scriptOf P.gateway-coverage)
        && hasInfix "--gateway ${P.gateway-instrumented}/bin/gateway" (scriptOf P.gateway-coverage)
        && consumes P.gateway-coverage P.trainer
        && consumes P.gateway-pgo-bolt P.gateway-coverage
        && consumes P.gateway-profile-fresh P.gateway-coverage
        && consumes P.gateway-bolt-profile-fresh P.gateway-coverage
        && hasInfix "/bin/trainer profile-coverage" (scriptOf P.gateway-profile-fresh)
        && hasInfix "function-coverage.json" (scriptOf P.gateway-profile-fresh)
      ))
      (check (s "variants: allocator features reach every gateway build and its deps; the release builds none") (
        let
          V = P.variants;
        in
        all (b: hasInfix "--features mimalloc" b.args.cargoExtraArgs) [
          V.mimalloc.gateway
          V.mimalloc.gateway-instrumented
          V.mimalloc.gateway.args.cargoArtifacts
        ]
        && hasInfix "--features tikv-jemallocator" V.jemalloc.gateway-instrumented.args.cargoExtraArgs
        && all (b: !(hasInfix "--features" b.args.cargoExtraArgs)) builds
        && V.mimalloc.gateway.drvPath != P.gateway.drvPath
      ))
      (check (s "variants.board-only trains the board shape and the holdout only, against this chain's coverage gate, from its own fresh profiles") (
        let
          B = P.variants.board-only;
        in
        B.gateway-coverage.drvPath == P.gateway-coverage.drvPath
        && hasInfix "--shapes ${P.boardOnlyShapes}" (scriptOf B.gateway-profile-fresh)
        && consumes B.gateway-profile B.gateway-profile-fresh
        && B.gateway-training == null
        && !(consumes P.gateway-pgo-bolt B.gateway-profile-fresh)
      ))
      (check (s "apps.refresh-profiles builds both fresh profiles of the gateway's chain and pins them with pgo-engine pin, keeping the function coverage") (
        let
          app = outputs.apps.${system}.refresh-profiles;
          drv = readFile (head (attrNames (getContext app.program)));
        in
        app.type == "app"
        && P.chain.profile-fresh.drvPath == P.gateway-profile-fresh.drvPath
        && P.chain.bolt-profile-fresh.drvPath == P.gateway-bolt-profile-fresh.drvPath
        && all (t: hasInfix t drv) [
          "legacyPackages.${system}.pipeline.chain"
          "$chain.profile-fresh"
          "$chain.bolt-profile-fresh"
          "${P.pgo-engine}/bin/pgo-engine"
          "pin --fresh"
          "--profiles profiles --keep function-coverage.json --keep function-coverage.txt"
          "git add -- profiles"
        ]
        && hasInfix "--aarch64) chain=" drv == (system == "x86_64-linux")
      ))

      # Tools by store path.
      (check (s "tools are store paths: llvm-profdata from fenix llvm-tools, BOLT from llvmPackages_22.bolt") (
        all isStorePath [
          tools.llvmProfdata
          tools.llvmBolt
          tools.mergeFdata
          tools.readelf
          tools.boltRuntimeLib
          tools.redisServer
        ]
        && tools.llvmProfdata == "${(fakeFenix.packages.${system}.fromToolchainName { name = rustRelease.release; sha256 = rustRelease.manifestSha256; }).llvm-tools}/lib/rustlib/${triple}/bin/llvm-profdata"
        && tools.redisServer == "${fakeNixpkgs.legacyPackages.${system}.redis}/bin/redis-server"
        && tools.llvmBolt == "${fakeNixpkgs.legacyPackages.${system}.llvmPackages_22.bolt}/bin/llvm-bolt"
        && tools.mergeFdata == "${fakeNixpkgs.legacyPackages.${system}.llvmPackages_22.bolt}/bin/merge-fdata"
        && tools.boltRuntimeLib == "${fakeNixpkgs.legacyPackages.${system}.llvmPackages_22.bolt}/lib/libbolt_rt_instr.a"
      ))
      (check (s "stages run the tools by those paths (profdata in the training runs, bolt + runtime, merge-fdata, redis-server, taskset for the contrast training)") (
        hasInfix tools.llvmProfdata (scriptOf P.gateway-profile-fresh)
        && hasInfix tools.llvmBolt (scriptOf P.gateway-bolt-instrumented)
        && hasInfix tools.boltRuntimeLib (scriptOf P.gateway-bolt-instrumented)
        && hasInfix tools.mergeFdata (scriptOf P.gateway-bolt-profile-fresh)
        && hasInfix tools.llvmBolt (scriptOf P.gateway-pgo-bolt)
        && hasInfix "--redis-server ${tools.redisServer}" (scriptOf P.gateway-profile-fresh)
        && hasInfix "--redis-server ${tools.redisServer}" (scriptOf P.gateway-bolt-profile-fresh)
        && (!pinned || (
          hasInfix tools.llvmProfdata (scriptOf P.gateway-training)
          && hasInfix tools.mergeFdata (scriptOf P.gateway-bolt-training)
          && hasInfix "--redis-server ${tools.redisServer}" (scriptOf P.gateway-training)
          && hasInfix "--redis-server ${tools.redisServer}" (scriptOf P.gateway-bolt-training)
          # The contrast training: on one CPU by nixpkgs' taskset, its profile given to the check.
          && tools.taskset == "${fakeNixpkgs.legacyPackages.${system}.util-linux}/bin/taskset"
          && all (c: hasInfix "${tools.taskset} -c" (scriptOf c) && hasInfix "--overlap stable" (scriptOf c)
                     && hasInfix "contrast_args+=(--contrast" (scriptOf c)
                     && hasInfix "slow-driver contrast training" (scriptOf c))
            [ P.gateway-training P.gateway-bolt-training ]))
      ))
      (check (s "versions checks every tool, the LLVM majors and the linker") (
        all (t: hasInfix t (scriptOf P.versions)) [
          tools.llvmProfdata
          tools.llvmBolt
          tools.mergeFdata
          tools.readelf
          "Linker: LLD"
          "--emit-relocs"
          cc.bintools.dynamicLinker
        ]
        && P.versions.kind == "runCommandCC"
      ))

      # Checks.
      (check (s "checks: tests clippy rustfmt proof holdout nixos-module holdout-instructions") (
        all (n: hasAttr n checks) [
          "tests"
          "clippy"
          "rustfmt"
          "proof"
          "holdout"
          "nixos-module"
          "holdout-instructions"
        ]
      ))
      (check (s "checks.holdout-instructions: trainer instructions-gate, plain vs gateway-pgo-bolt, nixpkgs valgrind by store path, no system feature") (
        let
          h = checks.holdout-instructions;
        in
        hasInfix "/bin/trainer instructions-gate" (scriptOf h)
        && hasInfix "--plain ${P.gateway}/bin/gateway" (scriptOf h)
        && hasInfix "--optimized ${P.gateway-pgo-bolt}/bin/gateway" (scriptOf h)
        && hasInfix "${fakeNixpkgs.legacyPackages.${system}.valgrind}/bin/valgrind" (scriptOf h)
        && tools.valgrind == "${fakeNixpkgs.legacyPackages.${system}.valgrind}/bin/valgrind"
        && !(h ? requiredSystemFeatures)
      ))
      (check (s "checks.nixos-module passes (nix/tests/nixos-module.nix under the fake module lib)") (
        (checks.nixos-module.failedChecks or "not run") == ""
      ))
      (check (s "checks.proof runs pgo-engine verify-proof on gateway-pgo-bolt") (
        hasInfix "/bin/pgo-engine verify-proof" (scriptOf checks.proof)
        && consumes checks.proof P.gateway-pgo-bolt
        && consumes checks.proof P.pgo-engine
      ))
      # Nix's default system-features include `benchmark`: only a feature of our own is opt-in.
      (check (s "checks.holdout runs trainer holdout on plain and optimized, requires only the opt-in gateway-benchmark feature") (
        (checks.holdout.requiredSystemFeatures or [ ]) == [ "gateway-benchmark" ]
        && hasInfix "holdout" (scriptOf checks.holdout)
        && hasInfix "--plain ${P.gateway}/bin/gateway" (scriptOf checks.holdout)
        && hasInfix "--optimized ${P.gateway-pgo-bolt}/bin/gateway" (scriptOf checks.holdout)
        && hasInfix "--shapes" (scriptOf checks.holdout)
      ))
      (check (s "checks.tests/clippy reuse one buildDepsOnly; tests run by nextest") (
        checks.tests.kind == "crane-nextest"
        && checks.clippy.kind == "crane-clippy"
        && checks.tests.args.cargoArtifacts.drvPath == checks.clippy.args.cargoArtifacts.drvPath
      ))

      # Other outputs.
      (check (s "gateway-oci runs gateway-pgo-bolt") (
        pkgs.gateway-oci.kind == "oci"
        && pkgs.gateway-oci.args.config.Entrypoint == [ "${P.gateway-pgo-bolt}/bin/gateway" ]
      ))
      (check (s "apps gateway and trainer") (
        outputs.apps.${system}.gateway.program == "${P.gateway-pgo-bolt}/bin/gateway"
        && outputs.apps.${system}.trainer.program == "${P.trainer}/bin/trainer"
      ))
      (check (s "devShells.default carries llvm-profdata, llvm-bolt and the trainer") (
        let
          d = outputs.devShells.${system}.default;
        in
        consumes d P.trainer
        && consumes d fakeNixpkgs.legacyPackages.${system}.llvmPackages_22.bolt
        && d.args.LLVM_PROFDATA == tools.llvmProfdata
      ))
      (check (s "formatter") (outputs.formatter.${system}.kind == "package"))
      (check (s "hydraJobs: packages, checks and the release check") (
        attrNames outputs.hydraJobs.packages.${system} == attrNames pkgs
        && attrNames outputs.hydraJobs.checks.${system} == attrNames checks
        && hasAttr system outputs.hydraJobs.release
      ))
    ];

  # ---- the aarch64 chain from the x86_64 builder ---------------------------------------------

  crossChecks =
    let
      C = outputs.legacyPackages.x86_64-linux.pipeline-aarch64;
      N = outputs.legacyPackages.x86_64-linux.pipeline;
      tc = C.toolchain;
      x86 = fakeNixpkgs.legacyPackages.x86_64-linux;
      arm = fakeNixpkgs.legacyPackages.aarch64-linux;
      crossCc = x86.pkgsCross.aarch64-multiplatform.stdenv.cc;
      emulator = "${x86.qemu-user}/bin/qemu-aarch64";
      aarch64Linker = "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER";
      x86Linker = "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER";
      # The wrappers the training runs through (nix/stages/emulated.nix), as the chain makes them.
      emulatedInstrumented = C.chain.runnable "gateway-instrumented" C.gateway-instrumented;
      emulatedBolt = C.chain.runnable "gateway-bolt-instrumented" C.gateway-bolt-instrumented;
      scriptOf = d: d.args.script or "";
      s = m: "[x86_64-linux -> aarch64] ${m}";
      offlineWhere = (import ../offline/default.nix {
        rustToolchain = "/unused";
        vendorDir = "/unused";
        rustRelease = rustRelease.release;
        target = "aarch64-unknown-linux-gnu";
      }).pinned.where;
    in
    [
      (check (s "packages.x86_64-linux.gateway-pgo-bolt-aarch64 is the cross chain's artifact; aarch64-linux has none") (
        outputs.packages.x86_64-linux.gateway-pgo-bolt-aarch64.drvPath == C.gateway-pgo-bolt.drvPath
        && !(hasAttr "gateway-pgo-bolt-aarch64" outputs.packages.aarch64-linux)
        && !(hasAttr "pipeline-aarch64" outputs.legacyPackages.aarch64-linux)
      ))
      (check (s "the provider targets aarch64-unknown-linux-gnu from x86_64, with nixpkgs' emulator for aarch64") (
        tc.target == "aarch64-unknown-linux-gnu"
        && tc.hostTarget == "x86_64-unknown-linux-gnu"
        && tc.system == "x86_64-linux"
        && tc.emulator == emulator
        && N.toolchain.emulator == null
      ))
      (check (s "the gateway's builds: --target aarch64, the cross cc as linker, no -lld flag, stages named -aarch64") (
        all (
          b:
          hasInfix "--target aarch64-unknown-linux-gnu" b.args.cargoExtraArgs
          && b.args.env.${aarch64Linker} == "${crossCc}/bin/aarch64-unknown-linux-gnu-cc"
          && b.args.cargoArtifacts.args.env.${aarch64Linker} == b.args.env.${aarch64Linker}
          && !(hasInfix "-Clinker-features=-lld" b.args.env.RUSTFLAGS)
          && match ".*-aarch64" b.name != null
        ) [ C.gateway C.gateway-instrumented ]
        && C.gateway-pgo-bolt.name == "gateway-pgo-bolt-aarch64"
      ))
      (check (s "the trainer is built for the builder (x86_64, its linker and -lld flag), named as natively") (
        hasInfix "--target x86_64-unknown-linux-gnu" C.trainer.args.cargoExtraArgs
        && C.trainer.args.env.${x86Linker} == "${x86.stdenv.cc}/bin/cc"
        && hasInfix "-Clinker-features=-lld" C.trainer.args.env.RUSTFLAGS
        && C.trainer.name == "trainer"
      ))
      (check (s "the toolchain combines the host components with fenix's aarch64 rust-std of the pinned release and manifest") (
        let
          t = C.gateway.args.toolchain;
          std = builtins.elemAt t.args.parts 1;
        in
        t.kind == "fenix-combined"
        && std.args.triple == "aarch64-unknown-linux-gnu"
        && std.args.name == rustRelease.release
        && std.args.sha256 == rustRelease.manifestSha256
      ))
      (check (s "BOLT's instrumentation runtime is aarch64 nixpkgs' (not the x86_64 one), the tools are the builder's") (
        tc.tools.boltRuntimeLib == "${arm.llvmPackages_22.bolt}/lib/libbolt_rt_instr.a"
        && tc.tools.llvmBolt == "${x86.llvmPackages_22.bolt}/bin/llvm-bolt"
        && hasInfix "/lib/rustlib/x86_64-unknown-linux-gnu/bin/llvm-profdata" tc.tools.llvmProfdata
      ))
      (check (s "the coverage gate and both trainings run the gateway through the emulator wrapper") (
        hasInfix emulator (scriptOf emulatedInstrumented)
        && hasInfix "${C.gateway-instrumented}/bin/gateway" (scriptOf emulatedInstrumented)
        && consumes C.gateway-coverage emulatedInstrumented
        && consumes C.gateway-profile-fresh emulatedInstrumented
        && consumes C.gateway-bolt-profile-fresh emulatedBolt
        && !(consumes C.gateway-profile-fresh C.gateway-instrumented)
      ))
      (check (s "the linker probe runs under the emulator") (
        hasInfix "${emulator} ./probe" C.versions.args.script
      ))
      (check (s "pinned aarch64 profiles: the offline chain's directory ${offlineWhere}") (
        C.pinned.where == offlineWhere
        && C.pinned.where == "profiles/aarch64-unknown-linux-gnu/rust-${rustRelease.release}"
      ))
      (check (s "the native measurement gates are refused for the cross chain; the release rule is a Hydra job") (
        !(builtins.tryEval C.holdout-instructions).success
        && outputs.hydraJobs.release-aarch64-from-x86_64.drvPath == C.release-check.drvPath
      ))
    ];

  # ---- the NixOS module, under the fake module system (nix/tests/fake-module-lib.nix) ------

  moduleChecks =
    let
      pkgs = fakePkgs "x86_64-linux";
      moduleTest = args: import ./nixos-module.nix ({ lib = fakeLib; } // args);
    in
    # The module itself, with the stand-in JSON format whose files can be read back.
    moduleTest { }
    # Through the flake's wrapper, which imports it and defaults the package.
    ++ map (r: r // { name = "${r.name} (nixosModules.default)"; }) (moduleTest {
      inherit pkgs;
      module = outputs.nixosModules.default;
      defaultPackage = outputs.packages.x86_64-linux.gateway-pgo-bolt;
    });

  # ---- the library and the template (templates/default, `nix flake init -t`) ----------------

  # The template's flake with this flake's outputs as its `pgo-bolt` input, as a user's checkout
  # gets it.
  templateDir = ../../templates/default;
  template = (import (templateDir + "/flake.nix")).outputs {
    self = {
      outPath = toString templateDir;
    };
    pgo-bolt = outputs;
  };

  libraryChecks =
    let
      system = "x86_64-linux";
      T = template.legacyPackages.${system}.chain;
      P = outputs.legacyPackages.${system}.pipeline;
      scriptOf = d: d.args.script or "";
      s = m: "[library, template] ${m}";
      # A chain of the template's crate for aarch64, from the x86_64 builder.
      cross = outputs.lib.${system}.buildChain {
        target = "aarch64-unknown-linux-gnu";
        src = templateDir;
        cargoToml = templateDir + "/Cargo.toml";
        package = "wordfreq";
        trainingCommand = "true";
        holdoutCommand = "true";
        refreshCommand = "refresh";
      };
    in
    [
      (check (s "lib.<system>.buildChain on both systems; the template's flake uses it through chain.nix, as the offline twin does") (
        all (sys: isFunction outputs.lib.${sys}.buildChain) systems
        && hasInfix "import ./chain.nix" (readFile (templateDir + "/flake.nix"))
        && hasInfix "templates/default/chain.nix" (readFile ../offline/default.nix)
        && outputs.templates.default.path == templateDir
      ))
      (check (s "the template's builds: crane, its own source as given (no third_party/ hack), -p wordfreq, the version of its manifest, bin/wordfreq") (
        all (b:
          b.kind == "crane-package"
          && b.args.src == templateDir
          && b.args.version == "0.1.0"
          && hasInfix "-p wordfreq" b.args.cargoExtraArgs
          && hasInfix "--target x86_64-unknown-linux-gnu" b.args.cargoExtraArgs
          && !(b.args.cargoArtifacts.args ? extraDummyScript)
          && b.binary == "wordfreq"
        ) [ T.plain T.instrumented ]
        && template.packages.${system}.default.drvPath == T.pgo-bolt.drvPath
        && T.pgo-bolt.name == "wordfreq-pgo-bolt"
      ))
      (check (s "the template trains in its build (no profiles pinned yet): its training command under pgo-engine train, no training check, the release check refuses it") (
        T.training == null
        && T.bolt-training == null
        && consumes T.profile T.profile-fresh
        && consumes T.bolt-profile T.bolt-profile-fresh
        && hasInfix "/bin/pgo-engine train" (scriptOf T.profile-fresh)
        && hasInfix "train.sh" (scriptOf T.profile-fresh)
        && hasInfix "--binary ${T.instrumented}/bin/wordfreq" (scriptOf T.profile-fresh)
        && hasInfix "--llvm-trained-in-build \"no pinned llvm profile at profiles/x86_64-unknown-linux-gnu/rust-${rustRelease.release}/llvm\"" (scriptOf T.pgo-bolt)
        && template.checks.${system}.release.drvPath == T.release-check.drvPath
        && hasInfix "/bin/pgo-engine verify-proof --require-pinned --binary wordfreq ${T.pgo-bolt}" (scriptOf T.release-check)
      ))
      (check (s "the template's artifact: BOLT on the PGO build, proof marker share/wordfreq/proof.json by the flake's own pgo-engine, no coverage gate") (
        consumes T.pgo-bolt T.pgo
        && consumes T.pgo-bolt P.pgo-engine
        && hasInfix "--package wordfreq" (scriptOf T.pgo-bolt)
        && hasInfix "--binary wordfreq" (scriptOf T.pgo-bolt)
        && hasInfix "$out/share/wordfreq/proof.json" (scriptOf T.pgo-bolt)
        && !(hasInfix "request-paths.json" (scriptOf T.pgo-bolt))
        && hasInfix "-instrumentation-file=wordfreq.fdata" (scriptOf T.bolt-instrumented)
      ))
      (check (s "the template's holdout: holdout.sh on plain, PGO and PGO+BOLT under nixpkgs' valgrind") (
        let
          h = template.checks.${system}.holdout;
        in
        h.drvPath == T.holdout-instructions.drvPath
        && hasInfix "holdout.sh" (scriptOf h)
        && all (leg: consumes h leg) [ T.plain T.pgo T.pgo-bolt ]
        && hasInfix "${fakeNixpkgs.legacyPackages.${system}.valgrind}/bin/valgrind" (scriptOf h)
      ))
      (check (s "the template's refresh app pins its chain's fresh profiles into profiles/ with the flake's pgo-engine") (
        let
          drv = readFile (head (attrNames (getContext template.apps.${system}.refresh-profiles.program)));
        in
        all (t: hasInfix t drv) [
          "legacyPackages.${system}.chain"
          "$chain.profile-fresh"
          "$chain.bolt-profile-fresh"
          "${P.pgo-engine}/bin/pgo-engine"
          "--profiles profiles"
          "git add -- profiles"
        ]
      ))
      (check (s "buildChain { target = aarch64 } from x86_64: the cross provider, the builds for aarch64, the training through the emulator, the engine built for the builder") (
        hasInfix "--target aarch64-unknown-linux-gnu" cross.instrumented.args.cargoExtraArgs
        && cross.pgo-bolt.name == "wordfreq-pgo-bolt-aarch64"
        && hasInfix "qemu-aarch64" (scriptOf (cross.runnable "wordfreq-instrumented" cross.instrumented))
        && consumes cross.profile-fresh (cross.runnable "wordfreq-instrumented" cross.instrumented)
        && hasInfix "--target x86_64-unknown-linux-gnu" cross.engine.args.cargoExtraArgs
        && !(builtins.tryEval cross.holdout-instructions).success
      ))
    ];

  results = builtins.concatLists (map perSystem systems) ++ crossChecks ++ moduleChecks ++ libraryChecks;
  failed = filter (r: !r.ok) results;
in
if failed == [ ] then
  derivation {
    name = "flake-eval-ok";
    system = builtins.currentSystem;
    builder = "/bin/sh";
    args = [
      "-c"
      "echo ${toString (length results)} flake wiring assertions passed > $out"
    ];
  }
else
  throw ''
    flake-eval: ${toString (length failed)} of ${toString (length results)} assertions failed; miswired:
      - ${concatStringsSep "\n  - " (map (r: r.name) failed)}
  ''
