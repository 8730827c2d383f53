# The holdout gate that cannot be noisy, for every build machine (a flake check, and a stage CI
# builds): `trainer instructions-gate` counts instructions per request under valgrind's
# cachegrind, plain against the released artifact, on the holdout shape (never trained) and on
# the board shape, and fails unless the artifact executes at least `minReduction` percent fewer on
# both. Counted instructions do not depend on the machine's load, so this runs in the ordinary
# sandbox; the figures go to the build log, the output is only the verdict (rebuilds compare equal).
{
  toolchain,
  # The plain build (baseline) and the released artifact.
  plain,
  optimized,
  trainer,
  shapes,
  # Least reduction of instructions per request, in percent (nix/README.md says how it was
  # derived from measured repeatability).
  minReduction,
}:
toolchain.runStage {
  name = "gateway-holdout-instructions";
  script = ''
    valgrind=${toolchain.tools.valgrind}
    [ -x "$valgrind" ] || fail "valgrind $valgrind is not an executable"
    mkdir -p "$out"
    ${trainer}/bin/trainer instructions-gate \
      --plain ${plain}/bin/gateway \
      --optimized ${optimized}/bin/gateway \
      --shapes ${shapes} \
      --min-reduction ${toString minReduction} \
      --valgrind "$valgrind" \
      --verdict "$out/verdict.json" \
      || fail "the released gateway does not execute fewer instructions per request than the plain one by the required margin, or the measurement failed (see above)"
  '';
}
