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
  # Where the gateway writes its profiles; null means a fresh directory under $TMPDIR.
  profileDir ? null,
}:
toolchain.runStage {
  inherit name;
  script = ''
    profile_dir=${if profileDir == null then "\"$TMPDIR/profiles\"" else profileDir}
    mkdir -p "$profile_dir" || fail "cannot create the profile directory $profile_dir"
    mkdir -p "$out"
    ${trainer}/bin/trainer train \
      --gateway ${gateway}/bin/gateway \
      --shapes ${shapes} \
      --out "$out" \
      --profile-kind ${kind} \
      --profile-dir "$profile_dir" \
      || fail "trainer train failed (its message above names the shape and the cause)"
    [ -s "$out/manifest.json" ] || fail "the trainer wrote no manifest"
  '';
}
