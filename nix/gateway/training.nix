# The gateway's training (nix/lib/build-chain.nix, `trainingRun`): `trainer train` drives the
# instrumented gateway through every non-holdout shape of the shapes directory against its mock
# upstream on 127.0.0.1, a fresh gateway per shape, and checks every response; it fails, naming
# the shape, on a wrong response, a non-zero gateway exit or a shape that left no profile. It
# leaves SHAPE.profraw / SHAPE.fdata and the training record (manifest.json: the shapes, the
# holdout, the machine's load) in "$training", where nix/stages/training-run.nix merges them.
{
  toolchain,
  # The gateway's driver (bin/trainer).
  trainer,
  # The shapes directory (shape files and payloads); the holdout shape is never trained.
  shapes,
}:
{ kind, binary }:
''
  echo "stage $stage: training in $TMPDIR (profiles written to $TMPDIR/profiles)"
  ${trainer}/bin/trainer train \
    --gateway ${binary} \
    --shapes ${shapes} \
    --out "$training" \
    --profile-kind ${kind} \
    --profile-dir "$TMPDIR/profiles" \
    --redis-server ${toolchain.tools.redisServer} \
    || fail "trainer train failed (its message above names the shape and the cause)"''
