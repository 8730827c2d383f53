"""The release builds on any builder (issue 49): the training checks judge the pinned profiles by
the code's counts, not the machine's. Each check here trains again (`--check`: the verdict must be
the same bytes) under a perturbation of this machine that moves what another CPU moves
(nix/README.md, Thresholds: the whole training on one CPU, or busy loops beside it), against the
committed profiles, which were pinned on another machine (their manifests say which); the stale
cases (a hot function edited, the hot path moved with no code changed, another toolchain's or a
corrupt profile) are test_fail_closed.py's."""

import json
import os
import re
import subprocess

import pytest

from nixchain import BUILD, PINNED, ROOT, offline_build

CHECKS = {"llvm": "gateway-training", "bolt": "gateway-bolt-training"}


def busy_loops(cpus):
    """One busy loop pinned to each CPU of CPUS."""
    return [subprocess.Popen(["taskset", "-c", str(cpu), "sh", "-c", "while :; do :; done"]) for cpu in cpus]


def checked(proc, kind):
    """The check passed and printed its stable overlap; returns it."""
    assert proc.returncode == 0, proc.stdout[-5000:]
    assert "freshness check passed" in proc.stdout, proc.stdout[-3000:]
    found = re.findall(r"overlap of the counters the trainings agree on: ([0-9.]+)%", proc.stdout)
    assert found, proc.stdout[-3000:]
    pinned_on = json.loads((PINNED / kind / "manifest.json").read_text())["training"]["host"]["cpu_model"]
    here = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    print(f"{CHECKS[kind]}: stable overlap {found[-1]}% (pinned on {pinned_on}, checked on {here})")
    return float(found[-1])


@pytest.mark.parametrize("kind", sorted(CHECKS))
def test_check_passes_with_the_training_on_one_cpu(pgo_bolt, kind):
    """The whole build on CPU 0: every training runs there (a one-CPU builder): the slow-binary
    contrast beside its busy loop, and the slow-driver contrast with the driver stopped half the
    time, the binary not (the binary cannot run on a CPU of its own)."""
    proc = subprocess.run(
        ["taskset", "-c", "0", str(BUILD), CHECKS[kind], "--check", "--no-out-link"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=1800,
    )
    assert f"stage {CHECKS[kind]}: slow-binary contrast training" in proc.stdout, proc.stdout[-3000:]
    assert f"stage {CHECKS[kind]}: slow-driver contrast training" in proc.stdout and "(CPUs 0)" in proc.stdout, \
        proc.stdout[-3000:]
    checked(proc, kind)


@pytest.mark.parametrize("kind", sorted(CHECKS))
def test_check_passes_beside_busy_loops(pgo_bolt, kind):
    """A busy loop on every CPU while the check trains (a loaded builder): both contrasts run."""
    loops = busy_loops(range(os.cpu_count() or 1))
    try:
        proc = offline_build(CHECKS[kind], "--check", "--no-out-link", check=False, timeout=1800)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    assert f"stage {CHECKS[kind]}: slow-driver contrast training" in proc.stdout, proc.stdout[-3000:]
    checked(proc, kind)


def test_proof_marker_says_where_profiles_were_pinned_and_checked(pgo_bolt):
    """The marker records, per profile, what the check gated on, the machine that pinned it and the
    machines whose trainings were recorded as agreeing (from the committed manifests)."""
    proof = json.loads((pgo_bolt / "share" / "gateway" / "proof.json").read_text())
    for kind in CHECKS:
        p = proof["profiles"][kind]
        manifest = json.loads((PINNED / kind / "manifest.json").read_text())
        assert p["overlap_of"] == "stable", p
        assert p["machine_bound"]["measured_by"] == "contrast trainings", p
        assert p["pinned_on"]["host"] == manifest["training"]["host"], p
        assert p["vouched_on"] == manifest.get("vouched", []), p
        for v in p["vouched_on"]:
            assert v["overlap_pct"] >= v["min_overlap_pct"], v
            assert v["host"]["cpu_model"], v
