# The pinned profiles of one system and provider in the repository's profiles/ directory, each a
# store path of its own (null where the repository has none): the LLVM profile is one per system
# (every provider's rustc of the same version compiles the same IR), the BOLT profile one per
# system and provider (it belongs to one PGO binary, and the providers link differently). As
# separate store paths, refreshing the BOLT profile does not rebuild the PGO stage.
{
  # The profiles/ directory (a path), or null.
  profiles,
  # Nix system (x86_64-linux).
  system,
  # Toolchain provider name (offline-debian, nixpkgs-fenix).
  provider,
}:
let
  pinned =
    sub:
    if profiles != null && builtins.pathExists (profiles + "/${sub}") then
      builtins.path {
        name = "pinned-profile";
        path = profiles + "/${sub}";
      }
    else
      null;
in
{
  llvm = pinned "${system}/llvm";
  bolt = pinned "${system}/bolt-${provider}";
}
