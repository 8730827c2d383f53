# The contrast training of a training check (training-check.nix): the same training command on the
# same instrumented binary, run a second time under a perturbation of the builder, so that the
# freshness check can measure which counters follow the machine rather than the code
# (`pgo-engine check --overlap stable --contrast`, pgo-engine/src/profile/agreement.rs) and leave
# them out of its overlap with the pinned profile.
#
# The perturbation is the whole training on one CPU, a busy loop beside it on that CPU: the
# event loop then goes round at another rate than in the first training (fewer wake-ups batch
# more, reads find other amounts), which moves the counters that another machine's speed moves.
# Measured on an Intel Xeon against profiles pinned on an AMD EPYC (nix/README.md, Thresholds;
# `bench/training-perturbations` reproduces the table): with this contrast the pinned profiles'
# overlap with the fresh training is 98.7% (BOLT) and 99.1% (LLVM), where every counter gave
# 92.0% and 97.5%. The busy loop makes it work on a one-CPU builder too, where `taskset` alone
# would change nothing. The CPU is the first of those the stage may run on.
#
# Snippets of a stage script (they need the stage prologue's `fail`):
{
  # `util-linux`'s taskset, by absolute path (the toolchain's tools.taskset).
  taskset,
}:
{
  what = "on one CPU beside a busy loop";
  # Starts the busy loop and sets $contrast_prefix, the command prefix of the training.
  start = ''
    contrast_cpu=$(${taskset} -pc $$ | sed 's/.*: *//; s/[,-].*//')
    [ -n "$contrast_cpu" ] || fail "the contrast training cannot tell which CPU it may run on"
    ${taskset} -c "$contrast_cpu" "$BASH" -c 'while :; do :; done' &
    contrast_busy=$!
    trap 'kill $contrast_busy 2>/dev/null || true' EXIT
    contrast_prefix="${taskset} -c $contrast_cpu"
    echo "stage $stage: contrast training on CPU $contrast_cpu beside a busy loop"
  '';
  stop = ''
    kill "$contrast_busy" 2>/dev/null || true
    wait "$contrast_busy" 2>/dev/null || true
    trap - EXIT
  '';
}
