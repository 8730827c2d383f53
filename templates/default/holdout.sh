#!/usr/bin/env bash
# wordfreq's holdout command: a workload training never ran (another corpus, another N), counted
# under cachegrind for the plain, PGO and PGO+BOLT binaries; what it prints must be the same for
# the three. Same environment as train.sh.
set -euo pipefail
corpus="$PGO_SCRATCH/holdout.txt"
awk 'BEGIN { x = 777; for (i = 0; i < 40000; i++) { x = (x * 69069 + 1) % 4294967296; printf "w%d%s", x % 997, (i % 9 == 8 ? "\n" : " ") } }' > "$corpus"
"$PGO_BINARY" 25 "$corpus"
