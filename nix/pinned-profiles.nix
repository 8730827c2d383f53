# The pinned profiles of one system and provider in the repository's profiles/ directory,
# profiles/<system>/<provider>/{llvm,bolt}, each a store path of its own (null where the
# repository has none). A profile belongs to the binaries of one provider on one system: the BOLT
# profile to one PGO binary, and the providers link differently; the LLVM profile to one
# instrumented build, whose function names and hashes only the same cargo and rustc invocation
# are sure to reproduce. As separate store paths, refreshing the BOLT profile does not rebuild the
# PGO stage. Only the profile and its manifest enter the store: the reports beside them
# (function-coverage.*) are for people, and rewriting one rebuilds nothing.
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
        filter =
          path: type:
          builtins.elem (baseNameOf path) [
            "manifest.json"
            "gateway.proftext"
            "gateway.fdata"
          ];
      }
    else
      null;
in
{
  llvm = pinned "${system}/${provider}/llvm";
  bolt = pinned "${system}/${provider}/bolt";
}
