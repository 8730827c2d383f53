# Compositions of the real chain that must BUILD, showing which profile a build uses
# (tests/pipeline/test_profile_fit.py builds them and reads their proof markers). Arguments are
# those of nix/offline/default.nix.
#
# - trained-in-build: no profile pinned for the build's key (as for another Rust release, or a
#   target without profiles yet): the chain trains both profiles in the sandbox and builds from
#   them, never a plain build; the proof marker says "trained in build" with the reason, and the
#   release check refuses it (nix/tests/fail-closed.nix, `release-check-trained-in-build`).
# - comment-at-top-of-main: the sources with a comment added at the top of gateway/src/main.rs
#   (every line below it moves): no function's control flow changes, so the pinned LLVM profile
#   still fits, and the BOLT profile fits the new PGO binary by content: the artifact builds with
#   the pinned profiles, and the release check accepts it.
args@{ rustToolchain, vendorDir, ... }:
let
  chain = import ../offline/default.nix args;
  inherit (chain) toolchain;

  trainedInBuild = import ../offline/default.nix (args // {
    pinned = {
      llvm = null;
      bolt = null;
      inherit (chain.pinned) where;
    };
  });

  commentAtTopOfMain = toolchain.runStage {
    name = "gateway-workspace-source-comment";
    script = ''
      cp -r ${toolchain.src} "$out"
      chmod -R u+w "$out"
      main="$out/gateway/src/main.rs"
      [ -f "$main" ] || fail "no gateway/src/main.rs in the workspace source"
      { echo "// A comment above everything: every line below moves, no function changes."; cat "$main"; } > main.rs
      cp main.rs "$main"
    '';
  };
  commentEdited = import ../offline/default.nix (args // { src = commentAtTopOfMain; });
in
{
  trained-in-build = trainedInBuild.gateway-pgo-bolt;
  comment-at-top-of-main = commentEdited.gateway-pgo-bolt;
  comment-at-top-of-main-release = commentEdited.release-check;

  # For nix/tests/fail-closed.nix.
  chains = { inherit trainedInBuild commentEdited; };
}
