#!/usr/bin/env bash
# rg's holdout (examples/ripgrep/default.nix, `holdoutCommand`): searches that training never ran,
# with other patterns, on the other half of the corpus (the crates whose names start with r to
# z). It prints what rg printed (counts and file lists, sorted by path: the same bytes for the
# plain and the optimized binaries), so the holdout stage also checks that they answer alike.
#
#   holdout.sh CORPUS
set -euo pipefail
corpus=$1
[ -n "${PGO_BINARY:-}" ] || { echo "holdout.sh: no \$PGO_BINARY" >&2; exit 2; }
mapfile -t half < <(find "$corpus" -mindepth 1 -maxdepth 1 -type d -name '[r-z]*' | LC_ALL=C sort)
[ ${#half[@]} -gt 5 ] || { echo "holdout.sh: only ${#half[@]} crates in $corpus" >&2; exit 2; }

rg() {
  local status=0
  echo "== rg $*" | sed "s|$corpus/||g"
  "$PGO_BINARY" --no-config -j1 --sort path "$@" "${half[@]}" | sed "s|$corpus/||g" || status=${PIPESTATUS[0]}
  [ "$status" -le 1 ] || { echo "holdout.sh: rg $* exited with status $status" >&2; exit 1; }
}

rg -c 'struct'
rg -c -i 'invalid'
rg -c -w 'match'
rg -c '[a-z]+_[a-z]+\('
rg -c 'Some\(|None|Ok\('
rg -c -o '0x[0-9a-fA-F]+'
rg -l 'deprecated'
rg -c '^\s*#\[(derive|cfg)'
