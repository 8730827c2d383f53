"""Fixtures of the release-channel tests (docs/release.md): the release directory built by the
offline chain (nix/release/), a throwaway signing key, the release signed with it, and helpers."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import types

import pytest

from nixchain import ROOT, offline_build

SIGN = ROOT / "nix" / "release" / "sign"
VERIFY = ROOT / "nix" / "release" / "verify"


# What the tests read of the x86_64 chain, built (or found) by one nix/offline/build: each call
# evaluates the chain again, which is most of a cached call's time.
COMMON = ["release", "release-target.manifest", "release-target.image", "gateway-pgo-bolt",
          "gateway-pgo", "trainer"]
_outs = {}


def built(*args):
    """Store path of an output of nix/offline/build ARGS (a no-op when cached)."""
    if len(args) == 1 and args[0] in COMMON:
        if not _outs:
            extra = [a for attr in COMMON[1:] for a in ("-A", attr)]
            lines = offline_build(COMMON[0], *extra, "--no-out-link").stdout.strip().splitlines()
            assert len(lines) >= len(COMMON) and all(l.startswith("/nix/store/") for l in lines[-len(COMMON):]), lines[-10:]
            _outs.update(zip(COMMON, map(pathlib.Path, lines[-len(COMMON):])))
        return _outs[args[0]]
    out = offline_build(*args, "--no-out-link").stdout.strip().splitlines()[-1]
    assert out.startswith("/nix/store/"), out
    return pathlib.Path(out)


@pytest.fixture(scope="session")
def release():
    """The `release` directory (tarballs, image archive, verify, SHA256SUMS) of gateway-pgo-bolt."""
    return built("release")


@pytest.fixture(scope="session")
def pgo_bolt_artifact():
    """The chain's artifact the release is made of."""
    return built("gateway-pgo-bolt")


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory):
    """An ed25519 key made for this run, and the allowed_signers file naming its public half."""
    d = tmp_path_factory.mktemp("release-key")
    key = d / "release-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "release", "-f", str(key)],
                   check=True)
    allowed = d / "allowed_signers"
    allowed.write_text(f'release@llm-gateway namespaces="llm-gateway-release" '
                       f'{(d / "release-key.pub").read_text()}')
    return key, allowed


def sign(key, src, out):
    """nix/release/sign KEY SRC OUT; returns OUT."""
    subprocess.run([str(SIGN), str(key), str(src), str(out)], check=True, capture_output=True)
    return pathlib.Path(out)


def verify(directory, allowed, *extra):
    """nix/release/verify as a user runs it; returns the completed process (text)."""
    return subprocess.run([str(VERIFY), "--allowed-signers", str(allowed), *extra, str(directory)],
                          capture_output=True, text=True)


def resum(directory):
    """Rewrite DIR/SHA256SUMS over what it lists (what a forger holding the key would do)."""
    names = [line.split()[1] for line in (directory / "SHA256SUMS").read_text().splitlines()]
    sums = subprocess.run(["sha256sum", "--", *names], cwd=directory, check=True,
                          capture_output=True, text=True).stdout
    (directory / "SHA256SUMS").write_text(sums)


def check_rebuilds(attrs):
    """Every derivation ATTRS names rebuilt with --check in one evaluation (their inputs as they
    are, so built first): each must give the same bytes."""
    args = [attrs[0]] + [a for attr in attrs[1:] for a in ("-A", attr)]
    check = offline_build(*args, "--no-out-link", "--check", check=False)
    assert check.returncode == 0, f"not reproducible:\n{check.stdout[-3000:]}"
    assert check.stdout.count("checking outputs of") == len(attrs), check.stdout[-3000:]


def sdk_suite(gateway, **env):
    """tests/gateway/test_sdk_conformance.py as it is, with GATEWAY (a command taking `--config
    PATH`) as its gateway and the chain's trainer as the mock; returns pytest's summary line."""
    env = dict(os.environ, GATEWAY_BIN=str(gateway),
               TRAINER_BIN=str(built("trainer") / "bin" / "trainer"), **env)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         str(ROOT / "tests" / "gateway" / "test_sdk_conformance.py")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    summary = proc.stdout.strip().splitlines()[-1]
    assert " passed" in summary and "failed" not in summary and "skipped" not in summary, summary
    return summary


@pytest.fixture(scope="session")
def kit():
    """The helpers above, for the test modules (pytest's importlib mode imports no conftest)."""
    return types.SimpleNamespace(built=built, sign=sign, verify=verify, resum=resum,
                                 check_rebuilds=check_rebuilds, sdk_suite=sdk_suite)


@pytest.fixture(scope="session")
def signed(release, signing_key, tmp_path_factory):
    """The release signed with the throwaway key (the signature made outside the store)."""
    key, _ = signing_key
    return sign(key, release, tmp_path_factory.mktemp("signed") / "release")


@pytest.fixture
def copy_of(signed, tmp_path):
    """A writable copy of the signed release, to tamper with."""
    def make():
        d = tmp_path / "copy"
        shutil.copytree(signed, d)
        for p in d.iterdir():
            p.chmod(0o755 if p.name == "verify" else 0o644)
        return d
    return make


@pytest.fixture(scope="session")
def release_json(release):
    """RELEASE.json as the x86_64 tarball carries it."""
    return json.loads((built("release-target.manifest") / "RELEASE.json").read_text())
