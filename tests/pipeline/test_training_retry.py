"""A training check whose training ran beside other work trains again once the machine is quiet
(nix/stages/training-check.nix, `pgo-engine check` exit status 3, `pgo-engine wait-quiet`), and
a stale verdict of the quiet training still fails closed, naming the stage and the cause.

The other work is real: CPU burners beside the build, stopped as soon as the first training's
verdict says it ran beside them. The pinned profile is the stale one of `stale-llvm-profile`
(nix/tests/fail-closed.nix), so every training's verdict is stale whatever the load."""

import subprocess
import sys

from nixchain import BUILD, ROOT

BUSY = "ran while other work used"


def test_a_busy_stale_training_trains_again_once_quiet_then_fails_closed():
    burners = [
        subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])
        for _ in range(2)
    ]
    lines = []
    try:
        build = subprocess.Popen(
            [str(BUILD), "-f", "nix/tests/fail-closed.nix", "stale-llvm-profile", "--no-out-link"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for line in build.stdout:
            lines.append(line)
            if BUSY in line:
                for b in burners:
                    b.kill()
        rc = build.wait(timeout=3600)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    log = "".join(lines)
    tail = log[-4000:]
    assert rc != 0, f"a stale pinned profile built:\n{tail}"
    # The first training ran beside the burners: its stale verdict is not final.
    assert BUSY in log, f"the first training did not see the burners:\n{tail}"
    assert "stage gateway-training: training again, attempt 2 of 3" in log, tail
    # It waited for a quiet machine (`pgo-engine wait-quiet`), which says what it found.
    assert "machine quiet:" in log or "machine still" in log, tail
    # The retrained verdict is as stale, now from a quiet machine: the stage fails closed.
    last = log[log.rindex("attempt 2 of 3"):]
    assert "stage gateway-training" in last and "is stale" in last, tail
    assert "overlaps the pinned profile by" in last and "nix/offline/refresh-profiles" in last, tail
