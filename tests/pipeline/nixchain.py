"""Helpers of the stage-chain tests: drive nix/offline/build, the real offline chain."""

import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = ROOT / "nix" / "offline" / "build"

# The pinned profiles of the offline chain's key: target and Rust release (nix/rust-release.nix).
RUST_RELEASE = subprocess.run(
    ["nix-instantiate", "--eval", "--expr", "(import ./nix/rust-release.nix).release"],
    cwd=ROOT, check=True, capture_output=True, text=True,
).stdout.strip().strip('"')
PINNED = ROOT / "profiles" / "x86_64-unknown-linux-gnu" / f"rust-{RUST_RELEASE}"


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
