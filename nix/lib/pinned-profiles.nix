# The pinned profiles of one key in a crate's pinned-profiles directory,
# <profiles>/<target>/rust-<release>/{llvm,bolt}, each a store path of its own (null where there is
# none). A profile is keyed by what determines it: the Rust release (the directory) and, in its
# manifest, `rustc -vV`, `cargo -V`, the target and the codegen settings, which the engine's
# `profile verify` compares with the build's. The provider is not part of the key: the same
# release gives the same function names and control-flow hashes whoever invokes cargo, so both
# providers of a target read the same directory (docs/flake.md). As separate store paths,
# refreshing the BOLT profile does not rebuild the PGO stage. Only the profile and its manifest
# enter the store: the reports beside them (the gateway's function-coverage.*) are for people, and
# rewriting one rebuilds nothing.
{
  # The pinned-profiles directory (a path: the repository's profiles/, examples/rg/profiles), or
  # null.
  profiles,
  # That directory relative to the repository's root, for messages and the proof marker.
  location ? "profiles",
  # The binary's name: the profile files are BINARY.proftext and BINARY.fdata.
  binary,
  # Target triple (x86_64-unknown-linux-gnu).
  target,
  # Rust release of the build (nix/rust-release.nix: "1.95.0").
  rustRelease,
}:
let
  where = "${location}/${target}/rust-${rustRelease}";
  pinned =
    kind:
    if profiles != null && builtins.pathExists (profiles + "/${target}/rust-${rustRelease}/${kind}") then
      builtins.path {
        name = "pinned-profile";
        path = profiles + "/${target}/rust-${rustRelease}/${kind}";
        filter =
          path: type:
          builtins.elem (baseNameOf path) [
            "manifest.json"
            "${binary}.proftext"
            "${binary}.fdata"
          ];
      }
    else
      null;
in
{
  llvm = pinned "llvm";
  bolt = pinned "bolt";
  # Where they are (or would be), for messages and the proof marker.
  inherit where;
}
