# The library (docs/library.md): the builders of a crate's PGO+BOLT chain, one per file, each
# documenting its arguments and their defaults at its top. An entry point gives the provider of a
# target and the engine built for it: nix/offline/default.nix (`lib`, Debian's LLVM and the host's
# rustup toolchain) and flake.nix (`lib.<system>`, nixpkgs, crane and fenix).
{
  # target triple -> the toolchain provider of that target (nix/toolchains/*.nix).
  toolchainFor,
  # target triple -> the engine its chain runs (a derivation with bin/pgo-engine, built for the
  # builder).
  engineFor,
  # The target of a chain that names none.
  defaultTarget,
  # nixpkgs' writeShellScript, for `refreshApp` (a flake's); null: none (the offline entry point
  # has nix/offline/refresh-profiles).
  writeShellScript ? null,
}:
{
  # buildChain { target ? defaultTarget, package, trainingCommand, ... }: every stage of the chain
  # (nix/lib/build-chain.nix lists the arguments).
  buildChain =
    args@{ target ? defaultTarget, ... }:
    import ./build-chain.nix (
      {
        toolchain = toolchainFor target;
        engine = engineFor target;
      }
      // builtins.removeAttrs args [ "target" ]
    );

  # pinnedProfiles { profiles, location, binary, target, rustRelease }: the pinned profiles of one
  # key (what buildChain looks up in its `profiles`).
  pinnedProfiles = import ./pinned-profiles.nix;

  # refreshApp { chain, attr, flags ? { } }: the refresh command of a chain in a flake, a script
  # for `apps.<system>.refresh-profiles` (nix/lib/refresh-app.nix).
  refreshApp =
    args:
    if writeShellScript == null then
      throw "nix/lib: refreshApp is a flake's (the offline entry point has nix/offline/refresh-profiles)"
    else
      import ./refresh-app.nix ({ inherit writeShellScript; } // args);
}
