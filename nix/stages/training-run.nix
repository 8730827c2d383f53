# The training run the freshness checks and the fresh-profile stages share, as a script snippet:
# the trainer drives the instrumented gateway (LLVM or BOLT instrumentation) through every
# non-holdout shape against its mock upstream on 127.0.0.1, inside the sandbox, and the per-shape
# profiles are merged into one profile in the pinned form: LLVM's text profile
# (`llvm-profdata merge --text`, sorted by function), or BOLT's fdata sorted (merge-fdata prints
# its map in hash order, so the same profiles in another order would give other bytes). The
# trainer fails, naming the shape, on a wrong response, a non-zero gateway exit or a shape that
# left no profile. Leaves the merged profile at "$fresh/$fresh_file" and the training manifest at
# "$training/manifest.json". Needs the stage prologue's `fail`.
{
  toolchain,
  # "llvm" (profraw via LLVM_PROFILE_FILE) or "bolt" (fdata at the relative path baked in by
  # llvm-bolt, written in the gateway's working directory, which the trainer sets).
  kind,
  # Derivation with bin/gateway, instrumented for `kind`.
  gateway,
  # Derivation with bin/trainer.
  trainer,
  shapes,
}:
let
  inherit (toolchain) tools;
  merge =
    if kind == "llvm" then
      ''
        fresh_file=gateway.proftext
        profraws=("$training"/*.profraw)
        [ ''${#profraws[@]} -gt 0 ] || fail "no .profraw after training: the training run produced no profile"
        # An input it cannot read is only a warning to llvm-profdata (it merges the others):
        # any warning fails the stage.
        ${tools.llvmProfdata} merge --failure-mode=all -o "$fresh/gateway.profdata" "''${profraws[@]}" \
          2> "$TMPDIR/merge.log" \
          || fail "llvm-profdata merge rejected the training profiles: $(cat "$TMPDIR/merge.log")"
        if grep -q . "$TMPDIR/merge.log"; then
          fail "llvm-profdata merge rejected the training profiles: $(cat "$TMPDIR/merge.log")"
        fi
        ${tools.llvmProfdata} merge --text -o "$fresh/gateway.proftext" "$fresh/gateway.profdata" \
          || fail "llvm-profdata cannot write the text form of the merged profile"
      ''
    else
      ''
        fresh_file=gateway.fdata
        fdata=("$training"/*.fdata)
        [ ''${#fdata[@]} -gt 0 ] || fail "no .fdata after training: the BOLT training run produced no profile"
        ${tools.mergeFdata} "''${fdata[@]}" -o "$fresh/merged.fdata" || fail "merge-fdata failed"
        LC_ALL=C sort -o "$fresh/gateway.fdata" "$fresh/merged.fdata"
      '';
in
''
  training="$TMPDIR/training"
  fresh="$TMPDIR/fresh"
  mkdir -p "$training" "$fresh" "$TMPDIR/profiles"
  echo "stage $stage: training in $TMPDIR (profiles written to $TMPDIR/profiles)"
  ${trainer}/bin/trainer train \
    --gateway ${gateway}/bin/gateway \
    --shapes ${shapes} \
    --out "$training" \
    --profile-kind ${kind} \
    --profile-dir "$TMPDIR/profiles" \
    --redis-server ${tools.redisServer} \
    || fail "trainer train failed (its message above names the shape and the cause)"
  [ -s "$training/manifest.json" ] || fail "the trainer wrote no manifest"
  shopt -s nullglob
  ${merge}
  [ -s "$fresh/$fresh_file" ] || fail "the merged profile is empty"
''
