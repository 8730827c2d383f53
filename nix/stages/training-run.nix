# The training run the freshness checks and the fresh-profile stages share, as a script snippet:
# the chain's training (`train`: the training command under the engine's `train`, which holds it
# to the training contract, docs/library.md; or the gateway's driver, nix/gateway/training.nix)
# drives the instrumented binary inside the sandbox (loopback only), and the profiles it leaves
# are merged into one profile in the pinned form: LLVM's text profile (`llvm-profdata merge
# --text`, sorted by function), or BOLT's fdata sorted (merge-fdata prints its map in hash order,
# so the same profiles in another order would give other bytes). The training fails closed,
# naming the cause (the gateway's: the shape); so does a merge of a corrupt or missing profile.
# Leaves the merged profile at "$fresh/$fresh_file" and the training record at
# "$training/manifest.json". Needs the stage prologue's `fail`.
{
  toolchain,
  # "llvm" (profraw via LLVM_PROFILE_FILE) or "bolt" (fdata at the relative path baked in by
  # llvm-bolt, written in the binary's working directory, which the training sets).
  kind,
  # The binary's name: the merged profile is BINARY.proftext or BINARY.fdata.
  binary,
  # Derivation with bin/BINARY, instrumented for `kind` (runnable here: nix/stages/emulated.nix).
  instrumented,
  # The training: { kind, binary } -> the script lines that train `binary` (the instrumented
  # binary's path) and leave its profile files (*.profraw, *.fdata) and the training record
  # (manifest.json) in "$training" (nix/lib/build-chain.nix, `trainingRun`).
  train,
}:
let
  inherit (toolchain) tools;
  merge =
    if kind == "llvm" then
      ''
        fresh_file=${binary}.proftext
        profraws=("$training"/*.profraw)
        [ ''${#profraws[@]} -gt 0 ] || fail "no .profraw after training: the training run produced no profile"
        # An input it cannot read is only a warning to llvm-profdata (it merges the others):
        # any warning fails the stage.
        ${tools.llvmProfdata} merge --failure-mode=all -o "$fresh/${binary}.profdata" "''${profraws[@]}" \
          2> "$TMPDIR/merge.log" \
          || fail "llvm-profdata merge rejected the training profiles: $(cat "$TMPDIR/merge.log")"
        if grep -q . "$TMPDIR/merge.log"; then
          fail "llvm-profdata merge rejected the training profiles: $(cat "$TMPDIR/merge.log")"
        fi
        ${tools.llvmProfdata} merge --text -o "$fresh/${binary}.proftext" "$fresh/${binary}.profdata" \
          || fail "llvm-profdata cannot write the text form of the merged profile"
      ''
    else
      ''
        fresh_file=${binary}.fdata
        fdata=("$training"/*.fdata)
        [ ''${#fdata[@]} -gt 0 ] || fail "no .fdata after training: the BOLT training run produced no profile"
        ${tools.mergeFdata} "''${fdata[@]}" -o "$fresh/merged.fdata" || fail "merge-fdata failed"
        LC_ALL=C sort -o "$fresh/${binary}.fdata" "$fresh/merged.fdata"
      '';
in
''
  training="$TMPDIR/training"
  fresh="$TMPDIR/fresh"
  mkdir -p "$training" "$fresh" "$TMPDIR/profiles"
  ${train { inherit kind; binary = "${instrumented}/bin/${binary}"; }}
  [ -s "$training/manifest.json" ] || fail "the trainer wrote no manifest"
  shopt -s nullglob
  ${merge}
  [ -s "$fresh/$fresh_file" ] || fail "the merged profile is empty"
''
