"""Fixtures for the stage-chain tests: they run the real offline chain in a real Nix sandbox."""

import pathlib
import subprocess

import pytest

from nixchain import ROOT, offline_build


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
