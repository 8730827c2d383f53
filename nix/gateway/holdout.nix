# The wall-clock holdout gate (`checks.<system>.holdout`): the trainer benches the plain build
# against the PGO+BOLT one on the one shape training never saw, and fails when the optimized
# binary is slower beyond the noise band its anchor legs measure. Timing needs a quiet machine, so
# only builders that opt into the `gateway-benchmark` system feature take it (Nix's own
# `benchmark` is among its default features: every builder would).
{
  toolchain,
  # The plain build (baseline) and the released artifact.
  plain,
  optimized,
  trainer,
  shapes,
}:
toolchain.runStage {
  name = "gateway-holdout";
  env.requiredSystemFeatures = [ "gateway-benchmark" ];
  script = ''
    mkdir -p "$out"
    ${trainer}/bin/trainer holdout \
      --plain ${plain}/bin/gateway \
      --optimized ${optimized}/bin/gateway \
      --shapes ${shapes} \
      --json "$out/holdout.json" \
      | tee "$out/holdout.txt" \
      || fail "the gate failed: the bench batch was invalid or inconclusive, or the optimized gateway is slower than the plain one on the holdout shape (the trainer's message above says which)"
  '';
}
