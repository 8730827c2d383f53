"""The binary cache, end to end, with the Nix 2.8 this project runs (issue 16): every stage output
of gateway-pgo-bolt signed with a generated key and copied to a file:// binary cache, as CI or
Hydra would push it; a fresh store substitutes the artifact from that cache with only the public
key trusted and no local build allowed; the signatures verify; a store that trusts another key
gets nothing; and `--check` rebuilds the artifact from substituted inputs and finds the same bytes,
proving the cache serves what the source produces."""

import pathlib
import shutil
import subprocess

import pytest

from nixchain import offline_build

NIX = ["--extra-experimental-features", "nix-command"]


def run(*args, **kw):
    return subprocess.run(list(args), check=True, capture_output=True, text=True, **kw).stdout


def lines(text):
    return [line for line in text.split() if line]


@pytest.fixture
def scratch(tmp_path):
    yield tmp_path
    # Store paths in a chroot store are read-only.
    subprocess.run(["chmod", "-R", "u+w", str(tmp_path)], check=False)
    shutil.rmtree(tmp_path, ignore_errors=True)


def stage_outputs(artifact):
    """The outputs of every derivation the artifact was built by (each stage of the chain)."""
    drv = run("nix-store", "--query", "--deriver", str(artifact)).strip()
    drvs = [p for p in lines(run("nix-store", "--query", "--requisites", drv)) if p.endswith(".drv")]
    outputs = lines(run("nix-store", "--query", "--outputs", *drvs))
    valid = [p for p in outputs if subprocess.run(["nix-store", "--check-validity", p],
                                                  capture_output=True).returncode == 0]
    return drv, valid


def test_signed_cache_substitutes_verifies_and_rebuilds_identically(pgo_bolt, scratch):
    sk, pk = scratch / "cache.sk", scratch / "cache.pk"
    run("nix-store", "--generate-binary-cache-key", "gateway-test-cache-1", str(sk), str(pk))
    cache = scratch / "cache"
    drv, outputs = stage_outputs(pgo_bolt)
    names = {pathlib.Path(p).name.split("-", 1)[1] for p in outputs}
    for stage in ["gateway-pgo", "gateway-training", "gateway-bolt-training", "gateway-profile",
                  "gateway-bolt-profile", "trainer", "gateway-pgo-bolt"]:
        assert stage in names, f"{stage} not among the outputs pushed: {sorted(names)}"

    # Push, signing on the way (the cache's secret-key setting), as CI would.
    run("nix", *NIX, "copy", "--to", f"file://{cache}?compression=none&secret-key={sk}", *outputs)
    narinfo = (cache / f"{pathlib.Path(str(pgo_bolt)).name.split('-')[0]}.narinfo").read_text()
    assert "Sig: gateway-test-cache-1:" in narinfo, narinfo
    run("nix", *NIX, "store", "verify", "--store", f"file://{cache}", "--sigs-needed", "1",
        "--option", "trusted-public-keys", pk.read_text().strip(), *outputs)

    trusted = ["--option", "substituters", f"file://{cache}", "--option", "trusted-public-keys",
               pk.read_text().strip()]

    # A fresh store fetches the artifact; --max-jobs 0 makes any local build an error.
    fresh = scratch / "fresh" / "store"
    proc = offline_build("gateway-pgo-bolt", "--no-out-link", "--store", str(fresh), "--max-jobs", "0",
                         *trusted)
    assert proc.stdout.strip().splitlines()[-1] == str(pgo_bolt), proc.stdout[-3000:]
    assert "will be built" not in proc.stdout, proc.stdout[-3000:]
    assert f"copying path '{pgo_bolt}' from 'file://{cache}'" in proc.stdout, proc.stdout[-3000:]
    run("nix", *NIX, "store", "verify", "--store", str(fresh), "--sigs-needed", "1",
        "--option", "trusted-public-keys", pk.read_text().strip(), str(pgo_bolt))
    fetched = fresh / str(pgo_bolt).lstrip("/") / "bin" / "gateway"
    assert fetched.read_bytes() == (pgo_bolt / "bin" / "gateway").read_bytes()

    # A store that trusts another key substitutes nothing and, with no local builds, fails.
    other_sk, other_pk = scratch / "other.sk", scratch / "other.pk"
    run("nix-store", "--generate-binary-cache-key", "someone-else-1", str(other_sk), str(other_pk))
    refused = offline_build("gateway-pgo-bolt", "--no-out-link", "--store", str(scratch / "other" / "store"),
                            "--max-jobs", "0", "--option", "substituters", f"file://{cache}",
                            "--option", "trusted-public-keys", other_pk.read_text().strip(), check=False)
    assert refused.returncode != 0, refused.stdout[-3000:]
    assert f"'{pgo_bolt}' from 'file://{cache}' is not signed by any of the keys" in refused.stdout, \
        refused.stdout[-3000:]
    assert "unable to start any build" in refused.stdout, refused.stdout[-3000:]

    # Rebuild the artifact's derivation locally from substituted inputs and compare.
    check = offline_build("gateway-pgo-bolt", "--no-out-link", "--store", str(fresh), "--check", *trusted)
    built = [line for line in check.stdout.splitlines() if line.startswith(("building '", "checking outputs of '"))]
    assert built == [f"checking outputs of '{drv}'..."], (built, check.stdout[:3000])
    assert "may not be deterministic" not in check.stdout
