# A crate's holdout (nix/lib/build-chain.nix, `holdoutCommand`): the holdout command, a workload
# training never ran, run once per binary (plain, PGO, PGO+BOLT) with $PGO_BINARY a wrapper that
# runs the binary under valgrind's cachegrind; the stage sums the instructions of every run.
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
    # count LEG BINARY: runs the holdout command with BINARY under cachegrind; leaves the sum of
    # instructions in $TMPDIR/LEG/instructions and the command's output in $TMPDIR/LEG/stdout.
    count() {
      local leg=$1 real=$2 dir="$TMPDIR/$1"
      [ -x "$real" ] || fail "no $leg binary at $real"
      mkdir -p "$dir/counts" "$dir/scratch" "$dir/profiles"
      printf '#!/bin/sh\nexec %s --tool=cachegrind --cache-sim=no --cachegrind-out-file=%s/cg.%%p --log-file=%s/vg.%%p.log %s "$@"\n' \
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
      awk '/^summary:/ { s += $2 } END { printf "%d\n", s }' "''${counts[@]}" > "$dir/instructions"
      echo "''${#logs[@]}" > "$dir/runs"
      echo "stage $stage: $leg: $(cat "$dir/instructions") instructions in $(cat "$dir/runs") runs"
    }
    ${builtins.concatStringsSep "\n" (map count order)}
    for leg in pgo pgo-bolt; do
      cmp -s "$TMPDIR/plain/stdout" "$TMPDIR/$leg/stdout" \
        || fail "the $leg binary's output on the holdout differs from the plain binary's: $(diff "$TMPDIR/plain/stdout" "$TMPDIR/$leg/stdout" | head -n 5)"
    done
    plain=$(cat "$TMPDIR/plain/instructions")
    [ "$plain" -gt 0 ] || fail "the plain binary executed no instructions on the holdout"
    reduction() { awk -v p="$plain" -v o="$(cat "$TMPDIR/$1/instructions")" 'BEGIN { printf "%.2f", (p - o) * 100 / p }'; }
    echo "stage $stage: holdout instructions of ${binary}: plain $plain, PGO $(cat "$TMPDIR/pgo/instructions") (-$(reduction pgo)%), PGO+BOLT $(cat "$TMPDIR/pgo-bolt/instructions") (-$(reduction pgo-bolt)%)"
    awk -v r="$(reduction pgo-bolt)" -v m=${toString minReduction} 'BEGIN { exit !(r >= m) }' \
      || fail "PGO+BOLT executes $(reduction pgo-bolt)% fewer instructions than plain on the holdout, less than the required ${toString minReduction}%"
    mkdir -p "$out"
    printf '{"binary":"%s","runs":%s,"min_reduction_pct":%s,"verdict":"passed"}\n' \
      ${binary} "$(cat "$TMPDIR/plain/runs")" ${toString minReduction} > "$out/verdict.json"
  '';
}
