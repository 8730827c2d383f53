# The gateway's training command (nix/lib/build-chain.nix, `trainingCommand`), one training command
# among others under the engine's training contract: `trainer train` drives the instrumented
# gateway ($PGO_BINARY) through every non-holdout shape of the shapes directory against its mock
# upstream on 127.0.0.1, a fresh gateway per shape started in a scratch directory of its own, and
# checks every response; it fails, naming the shape, on a wrong response, a non-zero gateway exit
# or a shape that left no profile. It moves each shape's profile into $PGO_PROFILE_DIR as
# SHAPE.profraw or SHAPE.fdata and writes its workload report (the shapes trained, the holdout,
# the responses checked) to $PGO_REPORT, which the training record carries into the manifests and
# the proof marker (docs/contracts.md, "Training the gateway").
{
  toolchain,
  # The gateway's driver (bin/trainer).
  trainer,
  # The shapes directory (shape files and payloads); the holdout shape is never trained.
  shapes,
}:
builtins.concatStringsSep " " [
  "${trainer}/bin/trainer train"
  "--gateway \"$PGO_BINARY\""
  "--shapes ${shapes}"
  "--out \"$PGO_PROFILE_DIR\""
  "--profile-kind \"$PGO_PROFILE_KIND\""
  "--profile-dir \"$PGO_SCRATCH/raw\""
  "--report \"$PGO_REPORT\""
  "--redis-server ${toolchain.tools.redisServer}"
]
