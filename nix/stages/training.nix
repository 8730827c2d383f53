# Stages 2 and 6: the trainer drives the instrumented gateway (LLVM or BOLT instrumentation)
# through every non-holdout shape against its mock upstream on 127.0.0.1, inside the sandbox.
# The trainer fails, naming the shape, on a wrong response, a non-zero gateway exit or a shape that
# left no profile; this stage adds only the sandbox plumbing.
{
  toolchain,
  # Stage name: gateway-training or gateway-bolt-training.
  name,
  # "llvm" (profraw via LLVM_PROFILE_FILE) or "bolt" (fdata at the path baked in by llvm-bolt).
  kind,
  # Derivation with bin/gateway, instrumented for `kind`.
  gateway,
  # Derivation with bin/trainer.
  trainer,
  shapes,
}:
toolchain.runStage {
  inherit name;
  script = ''
    # A BOLT-instrumented gateway writes where llvm-bolt was told (share/gateway/profile-dir);
    # an LLVM-instrumented one wherever LLVM_PROFILE_FILE, set by the trainer, points.
    profile_dir="$TMPDIR/profiles"
    if [ -f ${gateway}/share/gateway/profile-dir ]; then
      profile_dir=$(cat ${gateway}/share/gateway/profile-dir)
    fi
    mkdir -p "$profile_dir" || fail "cannot create the profile directory $profile_dir"
    mkdir -p "$out"
    ${trainer}/bin/trainer train \
      --gateway ${gateway}/bin/gateway \
      --shapes ${shapes} \
      --out "$out" \
      --profile-kind ${kind} \
      --profile-dir "$profile_dir" \
      --redis-server ${toolchain.tools.redisServer} \
      || fail "trainer train failed (its message above names the shape and the cause)"
    [ -s "$out/manifest.json" ] || fail "the trainer wrote no manifest"
  '';
}
