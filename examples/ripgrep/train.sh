#!/usr/bin/env bash
# rg's training command (the training contract, docs/library.md): searches the training half of
# the corpus with a mix of what people ask rg for (literals, case-insensitive and whole-word
# search, regexes with classes, Unicode classes, alternations, several fixed strings, inverted and
# counted matches, file lists, only-matching, context, JSON output, replacement, type and glob
# filters, multiline), one thread (-j1) so that every training counts the same. The binary is
# $PGO_BINARY; its output goes to $PGO_SCRATCH.
#
#   train.sh CORPUS
#
# CORPUS is a directory of crate sources (examples/ripgrep/default.nix: the crates ripgrep's
# Cargo.lock vendors); the training half is every crate but the holdout's (holdout.sh).
set -euo pipefail
corpus=$1
[ -n "${PGO_BINARY:-}" ] && [ -d "${PGO_SCRATCH:-}" ] || { echo "train.sh: run me under pgo-engine train" >&2; exit 2; }
[ -d "$corpus" ] || { echo "train.sh: no corpus at $corpus" >&2; exit 2; }

# The holdout's crates (names starting with r to z) are left out.
mapfile -t half < <(find "$corpus" -mindepth 1 -maxdepth 1 -type d -name '[a-q]*' | LC_ALL=C sort)
[ ${#half[@]} -gt 10 ] || { echo "train.sh: only ${#half[@]} crates in $corpus" >&2; exit 2; }

# rg exits 0 with a match, 1 without, 2 on an error; `must` requires a match.
runs=0
rg() {
  local status=0
  "$PGO_BINARY" --no-config -j1 "$@" > "$PGO_SCRATCH/out" 2> "$PGO_SCRATCH/err" || status=$?
  runs=$((runs + 1))
  if [ "$status" -gt 1 ]; then
    echo "train.sh: rg $* exited with status $status: $(head -c 500 "$PGO_SCRATCH/err")" >&2
    exit 1
  fi
  return "$status"
}
must() { rg "$@" || { echo "train.sh: rg $* found nothing" >&2; exit 1; }; }

must -c 'fn' "${half[@]}"
must -n 'Error' "${half[@]}"
must -i 'overflow' "${half[@]}"
must -w 'self' -c "${half[@]}"
must '[A-Z][a-z]+Error\b' "${half[@]}"
must 'unsafe|unwrap\(\)|expect\(' "${half[@]}"
must '\p{Lu}\w+::new\(' "${half[@]}"
must '^\s*pub(\(crate\))? fn \w+' "${half[@]}"
must -F -e 'impl' -e 'trait' -e 'where' -c "${half[@]}"
must -v -c 'the' "${half[@]}"
must -l 'TODO|FIXME|XXX' "${half[@]}"
must -o '[0-9]+\.[0-9]+(\.[0-9]+)?' "${half[@]}"
must -C2 'panic!' "${half[@]}"
must --json 'Result<' "${half[@]}"
must -r '$1' '(\w+)_mut\b' "${half[@]}"
must -t rust 'macro_rules!' "${half[@]}"
must -g '*.toml' '^version' "${half[@]}"
must -U 'fn\s+\w+\s*\(\s*\)' "${half[@]}"
must -S 'Cargo' --column --heading "${half[@]}"
must --stats -c 'const' "${half[@]}"
rg -c 'zzqx_never_in_any_crate' "${half[@]}" && { echo "train.sh: a pattern that cannot match matched" >&2; exit 1; }
echo "train.sh: $runs runs of rg over ${#half[@]} crates"
# What was trained, for the manifests and the proof marker: the searches, each checked.
printf '{"workloads": ["%s searches of the crates a-q"], "holdout": "holdout.sh: 8 searches of the crates r-z", "checked": %s}\n' \
  "$runs" "$runs" > "$PGO_REPORT"
