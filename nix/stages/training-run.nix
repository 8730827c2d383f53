# The training run the freshness checks and the fresh-profile stages share, as a script snippet:
# the engine's `pgo-engine train` runs the chain's training command on the instrumented binary
# inside the sandbox (loopback only) and holds it to the training contract (docs/contracts.md,
# docs/library.md): the command gets the binary as $PGO_BINARY, the profile directory as its
# working directory, a scratch directory, and must exit 0 once every run of the binary exited
# cleanly; the engine fails the stage, naming the cause, when it does not or leaves no profile,
# and writes the training record (the machine's load while it ran, the host, the command's
# workload report). The profiles are then merged into one profile in the pinned form: LLVM's text
# profile (`llvm-profdata merge --text`, sorted by function), or BOLT's fdata sorted (merge-fdata
# prints its map in hash order, so the same profiles in another order would give other bytes).
# Leaves the merged profile at "$fresh/$fresh_file" and the record at "$training/record.json".
# Needs the stage prologue's `fail`. A further run in one stage (the training check's contrast
# trainings, contrast.nix) passes `label` for directories of its own, `prefix` to run the whole
# training under a perturbation and `program` to give the command a wrapper of the binary.
{
  toolchain,
  # "llvm" (profraw via LLVM_PROFILE_FILE) or "bolt" (fdata at the relative path baked in by
  # llvm-bolt, written in the binary's working directory, the profile directory).
  kind,
  # The binary's name: the merged profile is BINARY.proftext or BINARY.fdata.
  binary,
  # Derivation with bin/BINARY, instrumented for `kind` (runnable here: nix/stages/emulated.nix).
  instrumented,
  # The training command: a bash command line (nix/lib/build-chain.nix, `trainingCommand`).
  command,
  # The engine (bin/pgo-engine).
  engine,
  # Prefix of the run's directories under $TMPDIR, a command prefix (shell words) of the engine's
  # `train`, which runs the whole training under it, and the binary the command is given
  # (default: the instrumented one; a contrast training may give a wrapper of it).
  label ? "",
  prefix ? "",
  program ? "${instrumented}/bin/${binary}",
}:
let
  inherit (toolchain) tools;
  merge =
    if kind == "llvm" then
      ''
        fresh_file=${binary}.proftext
        profraws=("$profiles"/*.profraw)
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
        fdata=("$profiles"/*.fdata)
        [ ''${#fdata[@]} -gt 0 ] || fail "no .fdata after training: the BOLT training run produced no profile"
        ${tools.mergeFdata} "''${fdata[@]}" -o "$fresh/merged.fdata" || fail "merge-fdata failed"
        LC_ALL=C sort -o "$fresh/${binary}.fdata" "$fresh/merged.fdata"
      '';
in
''
  training="$TMPDIR/${label}training"
  profiles="$TMPDIR/${label}profiles"
  fresh="$TMPDIR/${label}fresh"
  mkdir -p "$training" "$fresh" "$profiles"
  echo "stage $stage: training in $TMPDIR (profiles written to $profiles)"
  ${prefix}${if prefix == "" then "" else " "}${engine}/bin/pgo-engine train \
    --kind ${kind} \
    --binary ${program} \
    --profile-dir "$profiles" \
    --record "$training/record.json" \
    -- "$BASH" -c ${import ../lib/shell-quote.nix command} \
    || fail "the training failed (the engine's message above names the cause)"
  [ -s "$training/record.json" ] || fail "the engine wrote no training record"
  shopt -s nullglob
  ${merge}
  [ -s "$fresh/$fresh_file" ] || fail "the merged profile is empty"
''
