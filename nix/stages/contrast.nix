# The contrast trainings of a training check (training-check.nix): the same training command on
# the same instrumented binary, run again under perturbations of the builder, so that the
# freshness check can measure which counters follow the machine rather than the code
# (`pgo-engine check --overlap stable --contrast ...`, pgo-engine/src/profile/agreement.rs) and
# leave them out of its overlap with the pinned profile.
#
# Two perturbations that move the machine's counters in opposite directions, so that whichever
# way this builder's first training went, one of them differs from it (nix/README.md,
# Thresholds; `bench/training-perturbations` measures them):
# - slow-binary: the whole training on one CPU beside a busy loop: the binary shares a CPU with
#   its driver, batches more, and its event loop goes round less often than on a quiet builder;
# - slow-driver: the training command (the driver, the gateway's mock) on one CPU beside a busy
#   loop, the binary alone on another: requests trickle in, and the event loop goes round more
#   often, as it did on the AMD EPYC that pinned the gateway's profiles. On a one-CPU builder the
#   binary cannot run apart, so the driver is slowed instead: its whole process group is stopped
#   one millisecond in every two (SIGSTOP/SIGCONT), while the binary, which leaves the group, runs
#   on. Without it a one-CPU builder had the first contrast alone, which runs much like its first
#   training: the stable overlap of the BOLT check fell to 91.2% there (a fresh-clone CI run).
# Measured on an Intel Xeon against those profiles: with both as contrasts the stable overlap is
# 98.7-99.6% whatever perturbation the first training ran under, where a single contrast fell to
# 95.2% when the first training had run like it (a busy builder).
#
# Snippets of a stage script (they need the stage prologue's `fail`):
{
  # util-linux's taskset, by absolute path (the toolchain's tools.taskset).
  taskset,
}:
let
  # util-linux's setsid, beside its taskset (both providers take util-linux whole).
  setsid = "${dirOf taskset}/setsid";
  # Sets $contrast_cpu (the first CPU the stage may run on) and $contrast_other (another, or
  # empty), from the stage's affinity list ("0-3", "0,2", "5").
  cpus = ''
    contrast_busy=""
    contrast_cpus=$(${taskset} -pc $$ | sed 's/.*: *//')
    contrast_cpu=''${contrast_cpus%%[,-]*}
    [ -n "$contrast_cpu" ] || fail "the contrast trainings cannot tell which CPUs they may run on ($contrast_cpus)"
    case "''${contrast_cpus#"$contrast_cpu"}" in
      -*) contrast_other=$((contrast_cpu + 1)) ;;
      ,*) contrast_other=''${contrast_cpus#*,}; contrast_other=''${contrast_other%%[,-]*} ;;
      *) contrast_other="" ;;
    esac
  '';
  # A busy loop on $contrast_cpu until `stop`.
  busy = ''
    ${taskset} -c "$contrast_cpu" "$BASH" -c 'while :; do :; done' &
    contrast_busy=$!
    trap 'kill $contrast_busy 2>/dev/null || true' EXIT
  '';
  stop = ''
    kill "$contrast_busy" 2>/dev/null || true
    wait "$contrast_busy" 2>/dev/null || true
    trap - EXIT
  '';
in
{
  inherit cpus;
  # Each: `start` sets $contrast_prefix (the training's command prefix) and $contrast_binary (the
  # binary the command is given: the instrumented one, or a wrapper of it), or sets
  # $contrast_skip with the reason it cannot run here; `stop` undoes it.
  perturbations = [
    {
      name = "slow-binary";
      what = "the whole training on one CPU beside a busy loop";
      start = binary: ''
        contrast_skip=""
        ${busy}
        contrast_prefix="${taskset} -c $contrast_cpu"
        contrast_binary=${binary}
      '';
      inherit stop;
    }
    {
      name = "slow-driver";
      what = "the training command on one CPU beside a busy loop, the binary alone on another (one CPU: the command stopped half the time, the binary not)";
      start = binary: ''
        contrast_skip=""
        mkdir -p "$TMPDIR/slow-driver-bin"
        contrast_binary="$TMPDIR/slow-driver-bin/$(basename ${binary})"
        if [ -z "$contrast_other" ]; then
          # One CPU: the training command in a process group of its own, stopped 1 ms in every 2;
          # the binary leaves that group (setsid: same pid, the driver still signals it).
          contrast_prefix="$TMPDIR/slow-driver-bin/stopped-half-the-time"
          cat > "$contrast_prefix" <<STOPPED
        #!$BASH
        set -m
        "\$@" &
        driver=\$!
        exec {tick}<> <(:)
        while kill -0 "\$driver" 2>/dev/null; do
          kill -STOP -- "-\$driver" 2>/dev/null
          read -t 0.001 -u "\$tick" || true
          kill -CONT -- "-\$driver" 2>/dev/null
          read -t 0.001 -u "\$tick" || true
        done
        wait "\$driver"
        STOPPED
          chmod +x "$contrast_prefix"
          printf '#!%s\nexec %s %s "$@"\n' "$BASH" "${setsid}" "${binary}" > "$contrast_binary"
        else
          ${busy}
          contrast_prefix="${taskset} -c $contrast_cpu"
          printf '#!%s\nexec %s -c %s %s "$@"\n' "$BASH" "${taskset}" "$contrast_other" "${binary}" > "$contrast_binary"
        fi
        chmod +x "$contrast_binary"
      '';
      inherit stop;
    }
  ];
}
