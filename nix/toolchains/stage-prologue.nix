# The prologue every provider's `runStage` puts before a stage script: strict bash, and a `fail`
# that names the stage, so every failure message says which stage failed and why.
name: ''
  set -euo pipefail
  stage=${name}
  fail() { echo "error: stage $stage: $*" >&2; exit 1; }
''
