# A crate's training (nix/lib/build-chain.nix, `trainingRun`'s default): its training command
# under the engine's `train`, which holds it to the training contract (docs/library.md): the
# command runs with the instrumented binary as $PGO_BINARY, the profile directory as its working
# directory ($PGO_PROFILE_DIR), a scratch directory ($PGO_SCRATCH), loopback only (the sandbox),
# and must exit 0 once every run of the binary exited cleanly; the engine fails the stage, naming
# the cause, when it does not, or when no profile is left, and writes the training record (the
# machine's load while it ran, the host, the command's workload report).
{
  # The engine (bin/pgo-engine).
  engine,
  # The training command: a bash command line.
  command,
}:
{ kind, binary }:
''
  echo "stage $stage: training ${binary} in $training (${kind})"
  ${engine}/bin/pgo-engine train \
    --kind ${kind} \
    --binary ${binary} \
    --profile-dir "$training" \
    --record "$training/manifest.json" \
    -- "$BASH" -c ${import ./shell-quote.nix command} \
    || fail "the training command failed (the engine's message above names the cause)"''
