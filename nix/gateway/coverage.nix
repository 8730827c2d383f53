# The coverage gate (`gateway-coverage`): the training set against the gateway's own list of its
# request paths. `trainer coverage` asks the instrumented build (`gateway paths`: the binary the
# training checks run anyway, so the gate adds no build; the profile each call writes at exit goes
# to scratch) for every client route x stream flag x provider kind and every
# posture that changes the request path, asks it which postures each shape's training config turns
# on, and fails naming every combination no shape trains and every shape that names a combination
# the gateway does not serve. The report depends only on the binary and the shapes, so the output
# rebuilds bit-identically. The artifact and the fresh profiles depend on it: no profile is trained,
# and nothing ships, from a training set that leaves a request path cold.
{
  toolchain,
  # The instrumented build of the gateway (bin/gateway); every build of one source lists the
  # same paths.
  gateway,
  trainer,
  shapes,
}:
toolchain.runStage {
  name = "gateway-coverage";
  script = ''
    mkdir -p "$out"
    export LLVM_PROFILE_FILE="$TMPDIR/coverage-%p.profraw"
    ${trainer}/bin/trainer coverage \
      --gateway ${gateway}/bin/gateway \
      --shapes ${shapes} \
      --json "$out/request-paths.json" \
      > "$out/request-paths.txt" \
      || { cat "$out/request-paths.txt"; fail "the training set does not cover the gateway's request paths (the trainer's message above names each combination); add a shape for it under shapes/"; }
    cat "$out/request-paths.txt"
  '';
}
