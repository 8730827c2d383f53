{
  description = "wordfreq, a Rust binary built by the PGO+BOLT chain";

  # The chain's flake: the one you ran `nix flake init -t` with (its README says where it lives).
  inputs.pgo-bolt.url = "github:OWNER/gateway-pgo";

  outputs =
    { self, pgo-bolt, ... }:
    let
      systems = [
        "x86_64-linux"
        "aarch64-linux"
      ];
      forSystems = f: builtins.listToAttrs (map (system: { name = system; value = f system; }) systems);

      # The chain of this crate for one system (chain.nix says what it trains and where its
      # profiles are pinned).
      chainOf =
        system:
        import ./chain.nix {
          lib = pgo-bolt.lib.${system};
          src = ./.;
          refreshCommand = "nix run .#refresh-profiles";
        };
    in
    {
      packages = forSystems (system: {
        # The PGO+BOLT binary, with its proof marker in share/wordfreq/proof.json.
        default = (chainOf system).pgo-bolt;
        # The plain release build, the baseline.
        plain = (chainOf system).plain;
      });

      # Every stage of the chain: `nix build .#legacyPackages.x86_64-linux.chain.training`.
      legacyPackages = forSystems (system: { chain = chainOf system; });

      checks = forSystems (system: {
        # Refuses an artifact whose profiles were trained in the build instead of pinned.
        release = (chainOf system).release-check;
        # Instructions of holdout.sh, plain vs PGO vs PGO+BOLT, under cachegrind.
        holdout = (chainOf system).holdout-instructions;
      });

      # `nix run .#refresh-profiles` at the root of this repository: trains afresh and pins the
      # profiles under profiles/ (staged with git add); then build and commit them.
      apps = forSystems (system: {
        refresh-profiles = {
          type = "app";
          program = "${pgo-bolt.lib.${system}.refreshApp {
            chain = chainOf system;
            attr = "legacyPackages.${system}.chain";
          }}";
        };
      });
    };
}
