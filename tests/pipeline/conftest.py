"""Fixtures for the stage-chain tests: they run the real offline chain in a real Nix sandbox."""

import os
import pathlib
import subprocess

import pytest

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


@pytest.fixture(scope="session")
def pgo_bolt():
    """Store path of gateway-pgo-bolt, built through the whole chain (a no-op when cached)."""
    out = offline_build("gateway-pgo-bolt", "--no-out-link").stdout.strip().splitlines()[-1]
    assert out.startswith("/nix/store/"), out
    return pathlib.Path(out)


@pytest.fixture(scope="session")
def trainer_bin():
    """The trainer, built by cargo for driving the artifact from outside the sandbox."""
    subprocess.run(["cargo", "build", "-q", "-p", "trainer"], cwd=ROOT, check=True)
    return ROOT / "target" / "debug" / "trainer"


@pytest.fixture
def tmp(tmp_path):
    return tmp_path


def env_without_profile():
    env = dict(os.environ)
    env.pop("LLVM_PROFILE_FILE", None)
    return env
