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


@pytest.fixture(scope="session")
def engine_bin():
    """The engine (pgo-engine: verify-proof and the other checks any crate's chain runs), built by
    cargo for checking the chain's outputs from outside the sandbox."""
    subprocess.run(["cargo", "build", "-q", "-p", "pgo-engine"], cwd=ROOT, check=True)
    return ROOT / "target" / "debug" / "pgo-engine"
