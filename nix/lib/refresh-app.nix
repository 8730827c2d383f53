# The refresh command of a chain in a flake (`nix run .#refresh-profiles`, at the root of the
# flake's git checkout): builds the chain's fresh LLVM profile (`profile-fresh`), pins it into the
# chain's profiles directory with the engine (`pgo-engine pin`, which prints the overlap with the
# profile it replaces and refuses a training beside too much other work), `git add`s it (a flake
# sees only what git tracks, and the next step's PGO build must read the new profile), then does
# the same for the BOLT profile (`bolt-profile-fresh`). Arguments after the flag go to `nix build`.
{
  # nixpkgs' writeShellScript.
  writeShellScript,
  # The chain (nix/lib/build-chain.nix's result): its engine, and where its profiles are pinned.
  chain,
  # The flake attribute of the chain ("legacyPackages.x86_64-linux.chain").
  attr,
  # Other chains the command refreshes instead when given a flag: { "--aarch64" = ATTR; } (the
  # same profiles directory, another target).
  flags ? { },
}:
let
  inherit (chain.refresh) location keep;
  pin = ''"$engine" pin --fresh "$fresh" --profiles ${location}${builtins.concatStringsSep "" (map (k: " --keep ${k}") keep)}'';
in
writeShellScript "refresh-profiles" ''
  set -euo pipefail
  if [ ! -f flake.nix ] || [ ! -d .git ]; then
    echo "refresh-profiles: run it at the root of the flake's git checkout" >&2
    exit 1
  fi
  chain=".#${attr}"
  case "''${1:-}" in
  ${builtins.concatStringsSep "\n" (map (f: "  ${f}) chain=\".#${flags.${f}}\"; shift ;;") (builtins.attrNames flags))}
  esac
  engine=${chain.engine}/bin/pgo-engine
  echo "refresh-profiles: training the LLVM profile ($chain.profile-fresh)" >&2
  fresh=$(nix build --no-link --print-out-paths "$chain.profile-fresh" "$@")
  ${pin}
  git add -- ${location}
  echo "refresh-profiles: training the BOLT profile ($chain.bolt-profile-fresh)" >&2
  fresh=$(nix build --no-link --print-out-paths "$chain.bolt-profile-fresh" "$@")
  ${pin}
  git add -- ${location}
  git --no-pager diff --cached --stat -- ${location}
  echo "refresh-profiles: done (staged); nix build, then commit ${location}" >&2
''
