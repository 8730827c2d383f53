"""The library's second user: ripgrep 15.2.0 from crates.io through the whole chain
(examples/ripgrep, docs/library.md), built by `nix/offline/build examples.ripgrep.*`: the crate
fetched as its Cargo.lock pins it, trained and held out on a corpus in the sandbox, optimized with
PGO and BOLT. Run by tests/run-examples (its own CI job: three builds of ripgrep and a holdout
under cachegrind), which sets EXAMPLES_CHAIN=1."""

import json
import os
import pathlib
import subprocess

import pytest

from nixchain import ROOT, RUST_RELEASE, offline_build

pytestmark = pytest.mark.skipif(
    os.environ.get("EXAMPLES_CHAIN") != "1",
    reason="builds ripgrep's chain: tests/run-examples runs it",
)

PINNED = ROOT / "examples" / "ripgrep" / "profiles" / "x86_64-unknown-linux-gnu" / f"rust-{RUST_RELEASE}"
READELF = "/usr/lib/llvm-22/bin/llvm-readelf"


def built(attr, *args):
    out = offline_build(attr, "--no-out-link", *args).stdout.strip().splitlines()[-1]
    assert out.startswith("/nix/store/"), out
    return pathlib.Path(out)


@pytest.fixture(scope="module")
def rg():
    return built("examples.ripgrep.pgo-bolt")


def test_rg_is_optimized_and_proven(rg, engine_bin):
    binary = rg / "bin" / "rg"
    assert ".note.bolt_info" in subprocess.run([READELF, "-S", "-W", str(binary)], check=True,
                                               capture_output=True, text=True).stdout
    proof = json.loads((rg / "share" / "rg" / "proof.json").read_text())
    assert proof["package"] == "ripgrep" and proof["binary"] == "rg", proof
    assert proof["pgo"]["profraw_files"] > 0 and proof["bolt"]["functions_with_profile"] > 0, proof
    subprocess.run([str(engine_bin), "verify-proof", str(rg)], check=True)
    if (PINNED / "llvm").is_dir() and (PINNED / "bolt").is_dir():
        assert proof["profiles"]["provenance"] == "pinned", proof["profiles"]
        subprocess.run([str(engine_bin), "verify-proof", "--require-pinned", str(rg)], check=True)
    else:
        assert proof["profiles"]["provenance"] == "trained in build", proof["profiles"]


def test_rg_answers_as_the_published_crate_builds_it(rg, tmp_path):
    plain = built("examples.ripgrep.plain") / "bin" / "rg"
    (tmp_path / "a.txt").write_text("alpha beta\ngamma alpha\n")
    (tmp_path / "b.rs").write_text("fn alpha() {}\n")
    for args in (["-c", "alpha"], ["-o", "-w", "[a-z]+a"], ["--json", "gamma"], ["-l", "fn"]):
        answers = [subprocess.run([str(b), "--no-config", "--sort", "path", *args, str(tmp_path)],
                                  capture_output=True, text=True) for b in (plain, rg / "bin" / "rg")]
        assert answers[0].returncode == answers[1].returncode == 0, answers
        strip = lambda out: "\n".join(l for l in out.splitlines() if '"elapsed"' not in l)
        assert strip(answers[0].stdout) == strip(answers[1].stdout), (args, answers)


def test_the_holdout_runs_fewer_instructions():
    out = built("examples.ripgrep.holdout-instructions")
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] == "passed" and verdict["binary"] == "rg", verdict
    drv = subprocess.run(["nix-store", "--query", "--deriver", str(out)],
                         check=True, capture_output=True, text=True).stdout.strip()
    log = subprocess.run(["nix-store", "--read-log", drv], check=True, capture_output=True, text=True).stdout
    figures = [line for line in log.splitlines() if "holdout instructions of rg" in line]
    assert figures, log[-3000:]
    print(figures[0])


@pytest.mark.skipif(not (PINNED / "bolt").is_dir(), reason="no pinned profiles for ripgrep yet")
def test_rg_rebuilds_bit_identically(rg):
    """With pinned profiles every stage of the artifact is a function of committed inputs."""
    for attr in ["examples.ripgrep.pgo", "examples.ripgrep.pgo-bolt"]:
        proc = offline_build(attr, "--no-out-link", "--check", check=False)
        assert proc.returncode == 0, proc.stdout[-3000:]
    offline_build("examples.ripgrep.release-check", "--no-out-link")
