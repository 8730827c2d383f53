# Stages 2 and 6, the training checks: train afresh in the sandbox (training-run.nix, failing
# closed), then compare the fresh profile with the pinned one the build consumes. With overlap
# "stable" the stage trains twice, the second time under a perturbation of the builder
# (contrast.nix), and the counters the two trainings disagree on (what this builder's timing
# moves: the event loop's turns, read batching, timers) are left out of the overlap. The pinned
# profile is stale when a fresh training overlaps it by less than training noise and the
# difference between machines explain, or (LLVM) when a function either training ran changed its
# control-flow hash, or a function the pinned profile does not know ran; the failure names the
# refresh command. The output is only the verdict and the sha256 of the pinned profile it vouches
# for, so a rebuild (`--check`) writes the same bytes even though every training run counts a
# little differently; the measured overlap is in the build log.
{
  toolchain,
  # Stage name: gateway-training or gateway-bolt-training.
  name,
  # "llvm" or "bolt".
  kind,
  # The binary's name (bin/BINARY).
  binary,
  # Derivation with bin/BINARY, instrumented for `kind` (runnable here).
  instrumented,
  # The training command (training-run.nix).
  command,
  # The engine (bin/pgo-engine).
  engine,
  # Output of the pinned-profile stage of `kind` (its profile file and manifest.json, verified).
  pinned,
  # Least overlap, in percent, of a fresh training with the pinned profile (nix/README.md says how
  # the gateway's was derived from trainings measured on two CPUs and under perturbations), over
  # `overlap`: "stable" (the counters the contrast training agrees on), "work" (the functions
  # `pgo-engine`'s names rule says count the requests' work) or "all" (every counter).
  minOverlap,
  overlap ? "stable",
  # The command that refreshes the pinned profiles, named when they are stale.
  refreshCommand,
  # Stages this one runs after, though it reads nothing of them: the LLVM check is built before
  # the BOLT one, so that the two trainings never run beside each other.
  after ? [ ],
}:
let
  run = import ./training-run.nix;
  contrast = import ./contrast.nix { inherit (toolchain.tools) taskset; };
  # Each contrast training in its own directories; the check gets every profile they leave.
  contrastRun =
    if overlap != "stable" then
      ""
    else
      ''
        main_fresh="$fresh/$fresh_file"
        main_training=$training
        main_profiles=$profiles
        contrast_args=()
        contrast_dirs=""
        ${contrast.cpus}
      '' + builtins.concatStringsSep "" (map (p: ''
        ${p.start "${instrumented}/bin/${binary}"}
        if [ -n "$contrast_skip" ]; then
          echo "stage $stage: no ${p.name} contrast training: $contrast_skip"
        else
          echo "stage $stage: ${p.name} contrast training, ${p.what} (CPUs $contrast_cpus)"
          ${run { inherit toolchain kind binary instrumented command engine; label = "${p.name}-"; prefix = "$contrast_prefix"; program = "$contrast_binary"; }}
          ${p.stop}
          contrast_args+=(--contrast "$fresh/$fresh_file")
          contrast_dirs="$contrast_dirs $training $fresh $profiles"
        fi
      '') contrast.perturbations) + ''
        fresh=''${main_fresh%/*}
        training=$main_training
        profiles=$main_profiles
      '';
in
toolchain.runStage {
  inherit name;
  script = ''
    # Runs after: ${toString after}
    mkdir -p "$out"
    attempt=1
    while :; do
      ${run { inherit toolchain kind binary instrumented command engine; }}
      ${contrastRun}
      rc=0
      ${engine}/bin/pgo-engine check \
        --kind ${kind} \
        --pinned ${pinned} \
        --fresh "$fresh/$fresh_file" \
        --min-overlap ${toString minOverlap} \
        --overlap ${overlap} \
        ${if overlap == "stable" then "\"\${contrast_args[@]}\" \\" else "\\"}
        --refresh-command ${builtins.toJSON refreshCommand} \
        --verdict "$out/verdict.json" \
        --training "$training/record.json" \
        || rc=$?
      [ "$rc" -eq 0 ] && break
      # Stale, but the training ran beside other work (exit status 3): its counts may have moved
      # with the load, so it trains again once the machine is quiet (the threshold the pin uses;
      # up to 10 minutes' wait), up to three times in all; a stale verdict of a quiet training
      # fails.
      if [ "$rc" -eq 3 ] && [ "$attempt" -lt 3 ]; then
        attempt=$((attempt + 1))
        ${engine}/bin/pgo-engine wait-quiet --timeout-s 600
        echo "stage $stage: training again, attempt $attempt of 3"
        rm -rf "$training" "$fresh" "$profiles" ''${contrast_dirs:-}
        continue
      fi
      fail "the freshness check of the pinned ${kind} profile failed (see above)"
    done
  '';
}
