# A crate's holdout (nix/lib/build-chain.nix, `holdoutCommand`): the holdout command, a workload
# training never ran, run once per binary (plain, PGO, PGO+BOLT) with $PGO_BINARY a wrapper that
# runs the binary under valgrind's cachegrind; the stage sums the instructions and the level-1
# instruction-cache misses (cachegrind's simulated I1, what BOLT's layout is for) of every run.
# Counted instructions do not depend on the machine's load, so this runs in the ordinary sandbox.
# Fails closed, naming the cause: the command fails or never runs the binary, a run leaves no
# count (valgrind refused it), an optimized binary's output differs from the plain one's (it must
# answer the holdout as the plain binary does), or PGO+BOLT does not execute at least
# `minReduction` percent fewer instructions than plain. The figures go to the build log; the
# output is the verdict.
{
  toolchain,
  # Stage name (rg-holdout-instructions).
  name,
  # The binary's name (bin/BINARY in each leg).
  binary,
  # The binaries counted: { plain, pgo, pgo-bolt }, each a derivation with bin/BINARY.
  legs,
  # The holdout command: a bash command line, run with $PGO_BINARY, $PGO_SCRATCH and
  # $PGO_PROFILE_DIR (its working directory) as a training command is (docs/library.md).
  command,
  # Least reduction, in percent, of PGO+BOLT's instructions against plain's.
  minReduction,
}:
let
  order = [ "plain" "pgo" "pgo-bolt" ];
  count = leg: ''count ${leg} ${legs.${leg}}/bin/${binary}'';
in
toolchain.runStage {
  inherit name;
  script = ''
    valgrind=${toolchain.tools.valgrind}
    [ -x "$valgrind" ] || fail "valgrind $valgrind is not an executable"
    # count LEG BINARY: runs the holdout command with BINARY under cachegrind; leaves the sums of
    # instructions and of I1 misses in $TMPDIR/LEG/instructions and $TMPDIR/LEG/i1-misses, and
    # the command's output in $TMPDIR/LEG/stdout.
    count() {
      local leg=$1 real=$2 dir="$TMPDIR/$1"
      [ -x "$real" ] || fail "no $leg binary at $real"
      mkdir -p "$dir/counts" "$dir/scratch" "$dir/profiles"
      printf '#!/bin/sh\nexec %s --tool=cachegrind --cache-sim=yes --cachegrind-out-file=%s/cg.%%p --log-file=%s/vg.%%p.log %s "$@"\n' \
        "$valgrind" "$dir/counts" "$dir/counts" "$real" > "$dir/${binary}"
      chmod 755 "$dir/${binary}"
      status=0
      (cd "$dir/profiles" && PGO_BINARY="$dir/${binary}" PGO_SCRATCH="$dir/scratch" PGO_PROFILE_DIR="$dir/profiles" \
        "$BASH" -c ${import ../lib/shell-quote.nix command}) > "$dir/stdout" 2> "$dir/stderr" || status=$?
      [ "$status" -eq 0 ] \
        || fail "the holdout command failed on the $leg binary (exit status $status): $(tail -n 5 "$dir/stderr")"
      shopt -s nullglob
      local logs=("$dir"/counts/vg.*.log) counts=("$dir"/counts/cg.*)
      [ ''${#logs[@]} -gt 0 ] || fail "the holdout command never ran the $leg binary (\$PGO_BINARY)"
      [ ''${#counts[@]} -eq ''${#logs[@]} ] && [ "$(cat "''${counts[@]}" | grep -c '^summary:')" -eq ''${#logs[@]} ] \
        || fail "cachegrind counted $(cat "''${counts[@]}" /dev/null | grep -c '^summary:') of ''${#logs[@]} runs of the $leg binary: $(tail -n 5 "''${logs[0]}")"
      # Each file names its events (`events: Ir I1mr ...`) before the `summary:` of their counts.
      sum() {
        awk -v want="$1" '/^events:/ { for (i = 2; i <= NF; i++) if ($i == want) col = i }
                          /^summary:/ { if (!col) exit 1; s += $col }
                          END { if (!col) exit 1; printf "%d\n", s }' "''${counts[@]}"
      }
      sum Ir > "$dir/instructions" || fail "cachegrind counted no instructions (Ir) for the $leg binary"
      sum I1mr > "$dir/i1-misses" || fail "cachegrind simulated no instruction cache (I1mr) for the $leg binary"
      echo "''${#logs[@]}" > "$dir/runs"
      echo "stage $stage: $leg: $(cat "$dir/instructions") instructions, $(cat "$dir/i1-misses") I1 misses in $(cat "$dir/runs") runs"
    }
    ${builtins.concatStringsSep "\n" (map count order)}
    for leg in pgo pgo-bolt; do
      cmp -s "$TMPDIR/plain/stdout" "$TMPDIR/$leg/stdout" \
        || fail "the $leg binary's output on the holdout differs from the plain binary's: $(diff "$TMPDIR/plain/stdout" "$TMPDIR/$leg/stdout" | head -n 5)"
    done
    plain=$(cat "$TMPDIR/plain/instructions")
    [ "$plain" -gt 0 ] || fail "the plain binary executed no instructions on the holdout"
    reduction() { awk -v p="$(cat "$TMPDIR/plain/$2")" -v o="$(cat "$TMPDIR/$1/$2")" 'BEGIN { printf "%.2f", (p > 0 ? (p - o) * 100 / p : 0) }'; }
    echo "stage $stage: holdout instructions of ${binary}: plain $plain, PGO $(cat "$TMPDIR/pgo/instructions") (-$(reduction pgo instructions)%), PGO+BOLT $(cat "$TMPDIR/pgo-bolt/instructions") (-$(reduction pgo-bolt instructions)%)"
    echo "stage $stage: holdout I1 misses of ${binary}: plain $(cat "$TMPDIR/plain/i1-misses"), PGO $(cat "$TMPDIR/pgo/i1-misses") (-$(reduction pgo i1-misses)%), PGO+BOLT $(cat "$TMPDIR/pgo-bolt/i1-misses") (-$(reduction pgo-bolt i1-misses)%)"
    awk -v r="$(reduction pgo-bolt instructions)" -v m=${toString minReduction} 'BEGIN { exit !(r >= m) }' \
      || fail "PGO+BOLT executes $(reduction pgo-bolt instructions)% fewer instructions than plain on the holdout, less than the required ${toString minReduction}%"
    mkdir -p "$out"
    printf '{"binary":"%s","runs":%s,"min_reduction_pct":%s,"verdict":"passed"}\n' \
      ${binary} "$(cat "$TMPDIR/plain/runs")" ${toString minReduction} > "$out/verdict.json"
  '';
}
