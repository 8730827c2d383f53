#!/usr/bin/env bash
# wordfreq's training command. The chain runs it under the training contract (docs/library.md of
# the chain's repository): the instrumented binary is $PGO_BINARY, the working directory is where
# it writes its profile ($PGO_PROFILE_DIR: leave it there), $PGO_SCRATCH is yours, there is no
# network but loopback, and the command must exit 0 once every run of the binary exited cleanly.
# Replace the workload with what your binary does in production.
set -euo pipefail
[ -n "${PGO_BINARY:-}" ] && [ -d "${PGO_SCRATCH:-}" ] || { echo "train.sh: run me under the chain's training" >&2; exit 2; }

# A deterministic corpus: sentences drawn from a small vocabulary by a fixed linear congruence.
words=(the chain builds an instrumented binary trains it in the sandbox and pins what it learned
       profile guided optimization lays out hot code together while bolt reorders the blocks)
corpus="$PGO_SCRATCH/corpus.txt"
awk -v n=${#words[@]} -v words="${words[*]}" 'BEGIN {
  split(words, w, " "); x = 12345
  for (i = 0; i < 60000; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%s", w[x % n + 1], (i % 12 == 11 ? ".\n" : " ") }
}' > "$corpus"

for n in 1 10 100; do
  "$PGO_BINARY" "$n" "$corpus" > "$PGO_SCRATCH/top-$n.txt"
done
# The most frequent word must be one of the vocabulary's.
read -r _ top < "$PGO_SCRATCH/top-1.txt"
[[ " ${words[*]} " == *" $top "* ]] || { echo "train.sh: unexpected top word '$top'" >&2; exit 1; }
# What was trained, for the manifests and the proof marker (optional).
printf '{"workloads": ["top-1", "top-10", "top-100"], "holdout": "holdout.sh", "checked": 1}\n' > "$PGO_REPORT"
