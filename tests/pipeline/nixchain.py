"""Helpers of the stage-chain tests: drive nix/offline/build, the real offline chain."""

import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "nix" / "offline" / "build"


def offline_build(*args, check=True, timeout=3600):
    """Run nix/offline/build with ARGS; return the completed process (stdout+stderr merged)."""
    proc = subprocess.run(
        [str(BUILD), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"nix/offline/build {' '.join(args)} failed:\n{proc.stdout[-6000:]}")
    return proc
