# Stages 2 and 6, the training checks: train afresh in the sandbox (training-run.nix, failing
# closed as training always has), then compare the fresh profile with the pinned one the build
# consumes. The pinned profile is stale when a fresh training overlaps it by less than training
# noise explains, or (LLVM) when any function's control-flow hash changed; the failure names the
# refresh command. The output is only the verdict and the sha256 of the pinned profile it vouches
# for, so a rebuild (`--check`) writes the same bytes even though every training run counts a
# little differently; the measured overlap is in the build log.
{
  toolchain,
  # Stage name: gateway-training or gateway-bolt-training.
  name,
  # "llvm" or "bolt".
  kind,
  # Derivation with bin/gateway, instrumented for `kind`.
  gateway,
  trainer,
  shapes,
  # Output of the pinned-profile stage of `kind` (its profile file and manifest.json, verified).
  pinned,
  # Least overlap, in percent, of a fresh training with the pinned profile (nix/README.md says
  # how it was derived from measured training noise).
  minOverlap,
  # The command that refreshes the pinned profiles, named when they are stale.
  refreshCommand,
}:
toolchain.runStage {
  inherit name;
  script = ''
    ${import ./training-run.nix { inherit toolchain kind gateway trainer shapes; }}
    mkdir -p "$out"
    ${trainer}/bin/trainer profile check \
      --kind ${kind} \
      --pinned ${pinned} \
      --fresh "$fresh/$fresh_file" \
      --min-overlap ${toString minOverlap} \
      --refresh-command ${builtins.toJSON refreshCommand} \
      --verdict "$out/verdict.json" \
      --training "$training/manifest.json" \
      || fail "the freshness check of the pinned ${kind} profile failed (see above)"
  '';
}
