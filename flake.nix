{
  description = "LLM gateway: PGO- and BOLT-optimized release builds, trained inside the Nix sandbox";

  # No binary cache is configured: the project has none yet. README.md ("Binary cache") says how
  # to add one here (`nixConfig.extra-substituters` and `extra-trusted-public-keys`) once a cache
  # and its signing key exist; every output rebuilds bit-identically, so a cache can be checked.

  inputs = {
    # Pinned in flake.lock to the revisions crane's own test/flake.lock is tested with (nixpkgs),
    # and to a fenix revision that has `fromToolchainName`. The Rust release itself is pinned by
    # nix/rust-release.nix (release and channel-manifest sha256), not by fenix's `stable`, so
    # `nix flake update` cannot move it away from the pinned profiles (docs/flake.md).
    nixpkgs.url = "github:NixOS/nixpkgs/nixpkgs-unstable";
    crane.url = "github:ipetkov/crane";
    fenix = {
      url = "github:nix-community/fenix";
      inputs.nixpkgs.follows = "nixpkgs";
    };
  };

  outputs =
    {
      self,
      nixpkgs,
      crane,
      fenix,
      ...
    }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];

      forSystems =
        f:
        builtins.listToAttrs (
          map (system: {
            name = system;
            value = f system;
          }) systems
        );

      # Everything for one system: the provider, the stage chain, and what is built from it.
      perSystem =
        system:
        let
          pkgs = nixpkgs.legacyPackages.${system};

          # The provider and the stage chain for this system's own target, or (crossSystem) for
          # another system's, built here. Both read the profiles pinned for their target and Rust
          # release under profiles/, the offline chain's too.
          providerFor =
            crossSystem:
            import ./nix/toolchains/nixpkgs.nix (
              {
                inherit
                  pkgs
                  crane
                  fenix
                  system
                  ;
                src = ./.;
              }
              // (
                if crossSystem == null then
                  { }
                else
                  {
                    inherit crossSystem;
                    targetPkgs = nixpkgs.legacyPackages.${crossSystem};
                  }
              )
            );
          chainOf =
            toolchain: refreshCommand:
            import ./nix/pipeline.nix {
              inherit toolchain shapes refreshCommand;
              pinned = import ./nix/lib/pinned-profiles.nix {
                profiles = ./profiles;
                binary = "gateway";
                inherit (toolchain) target rustRelease;
              };
            };

          toolchain = providerFor null;
          inherit (toolchain.extras) craneLib checkArgs depsArgs;

          shapes = builtins.path {
            name = "shapes";
            path = ./shapes;
          };

          pipeline = chainOf toolchain "nix run .#refresh-profiles";

          inherit (pipeline) gateway-pgo-bolt trainer;

          # The aarch64 chain from the x86_64 builder: the same stages for the aarch64 target,
          # built with fenix's aarch64 rust-std of the same release and nixpkgs' cross cc, trained
          # under nixpkgs' emulator for aarch64 (qemu-user), and reading the same pinned aarch64
          # profiles as the offline chain (profiles/aarch64-unknown-linux-gnu/rust-<release>).
          # The native aarch64-linux system builds the same target without emulation.
          crossPipeline =
            if system == "x86_64-linux" then
              chainOf (providerFor "aarch64-linux") "nix run .#refresh-profiles -- --aarch64"
            else
              null;

          # The released image on the nixpkgs path, matched to nix/release/target.nix's
          # (docs/release.md): the PGO+BOLT gateway run as `gateway` (65532) with the config
          # mounted at /etc/gateway/config.json, its proof marker inside. The digest labels of the
          # offline image would need import-from-derivation, so this one carries the marker's path.
          gateway-oci = pkgs.dockerTools.buildLayeredImage {
            name = "llm-gateway";
            tag = "pgo-bolt";
            extraCommands = ''
              mkdir -p etc/gateway tmp usr/share/gateway && chmod 1777 tmp
              printf 'root:x:0:0:root:/root:/usr/sbin/nologin\ngateway:x:65532:65532:gateway:/nonexistent:/usr/sbin/nologin\n' > etc/passwd
              printf 'root:x:0:\ngateway:x:65532:\n' > etc/group
              cp ${gateway-pgo-bolt}/share/gateway/proof.json usr/share/gateway/proof.json
            '';
            config = {
              Entrypoint = [ "${gateway-pgo-bolt}/bin/gateway" ];
              Cmd = [
                "--config"
                "/etc/gateway/config.json"
              ];
              User = "65532:65532";
              ExposedPorts = {
                "8080/tcp" = { };
              };
              Labels = {
                "org.opencontainers.image.title" = "llm-gateway";
                "org.opencontainers.image.description" = "PGO+BOLT gateway; proof marker at /usr/share/gateway/proof.json";
                "org.opencontainers.image.revision" = self.rev or "dirty";
                "org.opencontainers.image.licenses" = "Apache-2.0";
                "org.llm-gateway.proof.path" = "/usr/share/gateway/proof.json";
              };
            };
          };

          packages = {
            inherit (pipeline)
              gateway
              gateway-instrumented
              gateway-profile
              gateway-pgo
              gateway-pgo-bolt
              trainer
              pgo-engine
              ;
            inherit gateway-oci;
            default = gateway-pgo-bolt;
          }
          // (
            if crossPipeline != null then
              { gateway-pgo-bolt-aarch64 = crossPipeline.gateway-pgo-bolt; }
            else
              { }
          );

          # Dependencies of the workspace for test and clippy (host build, dev profile, dev-deps).
          checkDeps = craneLib.buildDepsOnly (checkArgs // depsArgs);

          checks = {
            tests = craneLib.cargoNextest (
              checkArgs
              // {
                cargoArtifacts = checkDeps;
                partitions = 1;
                partitionType = "count";
                cargoNextestPartitionsExtraArgs = "--no-tests=pass";
              }
            );

            clippy = craneLib.cargoClippy (
              checkArgs
              // {
                cargoArtifacts = checkDeps;
                cargoClippyExtraArgs = "--all-targets -- --deny warnings";
              }
            );

            rustfmt = craneLib.cargoFmt {
              inherit (checkArgs) pname version src;
            };

            # Fails unless the released artifact carries a marker that `pgo-engine verify-proof` accepts.
            proof = toolchain.runStage {
              name = "gateway-proof";
              script = ''
                marker=${gateway-pgo-bolt}/share/gateway/proof.json
                [ -s "$marker" ] || fail "no proof marker at $marker"
                ${pipeline.pgo-engine}/bin/pgo-engine verify-proof "$marker" || fail "pgo-engine verify-proof rejected $marker"
                mkdir -p "$out"
                cp "$marker" "$out/proof.json"
              '';
            };

            # The trainer's holdout gate (nix/gateway/holdout.nix), for builders that opt into the
            # `gateway-benchmark` system feature only.
            holdout = pipeline.holdout;

            # The NixOS module under nixpkgs' module system (nix/tests/nixos-module.nix).
            nixos-module =
              let
                failed = builtins.filter (r: !r.ok) (
                  import ./nix/tests/nixos-module.nix { inherit (pkgs) lib; inherit pkgs; }
                );
              in
              toolchain.runStage {
                name = "nixos-module-eval";
                env.failedChecks = builtins.concatStringsSep "; " (map (r: r.name) failed);
                script = ''
                  [ -z "$failedChecks" ] || fail "failed: $failedChecks"
                  touch "$out"
                '';
              };
            # The holdout gate every builder runs: instructions per request under cachegrind,
            # plain vs released, holdout and board shapes (nix/stages/instructions-gate.nix).
            holdout-instructions = pipeline.holdout-instructions;
          };

          # `nix run .#refresh-profiles` at the root of a checkout: rewrites
          # profiles/<target>/rust-<release>/ from fresh training runs (what
          # nix/offline/refresh-profiles does offline; both write the same directory), `-- --aarch64`
          # for the aarch64 chain of this builder. Runs the user's `nix` and `git`.
          refreshProfiles = lib.refreshApp {
            chain = pipeline.chain;
            attr = "legacyPackages.${system}.pipeline.chain";
            flags = if crossPipeline != null then { "--aarch64" = "legacyPackages.${system}.pipeline-aarch64.chain"; } else { };
          };

          # The library on this system's provider (docs/library.md): `lib.<system>.buildChain` builds
          # any crate's chain, for this system's target or (x86_64) aarch64's, with the engine this
          # flake builds for it.
          lib = import ./nix/lib {
            toolchainFor =
              target:
              if target == toolchain.target then
                toolchain
              else if crossPipeline != null && target == crossPipeline.toolchain.target then
                crossPipeline.toolchain
              else
                throw "lib.${system}.buildChain: no provider for ${target} on ${system}";
            engineFor = target: if target == toolchain.target then pipeline.pgo-engine else crossPipeline.pgo-engine;
            defaultTarget = toolchain.target;
            inherit (pkgs) writeShellScript;
          };

          # llvm-profdata lives in lib/rustlib/<triple>/bin of the llvm-tools component; put it on
          # PATH for the shell under its own name.
          llvmProfdataBin = pkgs.runCommand "llvm-profdata-rust" { } ''
            mkdir -p "$out/bin"
            ln -s ${toolchain.tools.llvmProfdata} "$out/bin/llvm-profdata"
          '';

          devShell = craneLib.devShell {
            packages = [
              llvmProfdataBin
              toolchain.extras.bolt
              trainer
              pipeline.pgo-engine
              pkgs.cargo-nextest
            ];
            LLVM_PROFDATA = toolchain.tools.llvmProfdata;
            LLVM_BOLT = toolchain.tools.llvmBolt;
            BOLT_RUNTIME_LIB = toolchain.tools.boltRuntimeLib;
          };

          apps = {
            gateway = {
              type = "app";
              program = "${gateway-pgo-bolt}/bin/gateway";
              meta.description = "The PGO+BOLT gateway";
            };
            trainer = {
              type = "app";
              program = "${trainer}/bin/trainer";
              meta.description = "Mock upstream, training driver, proof and holdout tools";
            };
            refresh-profiles = {
              type = "app";
              program = "${refreshProfiles}";
              meta.description = "Rewrite profiles/ from fresh training runs of this system";
            };
          };
          apps' = apps // {
            default = apps.gateway;
          };
        in
        {
          inherit
            pkgs
            toolchain
            pipeline
            crossPipeline
            packages
            checks
            devShell
            lib
            ;
          apps = apps';
        };

      all = forSystems perSystem;
      per = attr: builtins.mapAttrs (_: s: s.${attr}) all;
    in
    {
      packages = per "packages";
      checks = per "checks";
      apps = per "apps";
      devShells = builtins.mapAttrs (_: s: { default = s.devShell; }) all;

      # The library (docs/library.md), per system: `lib.x86_64-linux.buildChain { ... }`.
      lib = per "lib";

      # `nix flake init -t <this flake>`: a tiny crate with its training command and its chain.
      templates.default = {
        path = ./templates/default;
        description = "A Rust binary built by the PGO+BOLT chain: its training command, holdout and pinned profiles";
      };
      formatter = builtins.mapAttrs (_: s: s.pkgs.nixfmt-tree) all;

      # Every stage (gateway-training, gateway-bolt-training, ...) and the provider, per system:
      # `nix build .#pipeline.gateway-training`, `nix build .#pipeline.versions`.
      legacyPackages = builtins.mapAttrs (
        _: s:
        {
          inherit (s) pipeline;
          toolchain-versions = s.toolchain.versions;
        }
        // (if s.crossPipeline != null then { pipeline-aarch64 = s.crossPipeline; } else { })
      ) all;

      # Hydra: one job per package and check per system (`packages.aarch64-linux.gateway-pgo-bolt`),
      # and the release rule: `release.<system>` fails unless the artifact's profiles are pinned
      # (an artifact trained in the build still builds, but is not released).
      hydraJobs = {
        packages = per "packages";
        checks = per "checks";
        release = builtins.mapAttrs (_: s: s.pipeline.release-check) all;
        # The aarch64 artifact built on x86_64 (packages.x86_64-linux.gateway-pgo-bolt-aarch64),
        # under the same release rule.
        release-aarch64-from-x86_64 = all.x86_64-linux.crossPipeline.release-check;
      };

      nixosModules.default =
        { pkgs, lib, ... }:
        {
          imports = [ ./nix/nixos-module.nix ];
          services.llm-gateway.package =
            lib.mkDefault
              (per "packages").${pkgs.stdenv.hostPlatform.system}.gateway-pgo-bolt;
        };
    };
}
