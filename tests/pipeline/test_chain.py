"""The whole stage chain, end to end, offline, in a real Nix sandbox (issue 2's "must show")."""

import json
import pathlib
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from nixchain import PINNED, ROOT, offline_build

STAGES = [
    "toolchain-versions",
    "gateway-instrumented",
    "gateway-training",
    "gateway-profile",
    "gateway-pgo-build",
    "gateway-pgo",
    "gateway-bolt-instrumented",
    "gateway-bolt-training",
    "gateway-bolt-profile",
    "gateway-coverage",
    "gateway-pgo-bolt",
]


def test_artifact_is_bolted(pgo_bolt):
    sections = subprocess.run(
        ["/usr/lib/llvm-22/bin/llvm-readelf", "-S", "-W", str(pgo_bolt / "bin" / "gateway")],
        check=True, capture_output=True, text=True,
    ).stdout
    assert ".note.bolt_info" in sections


def test_proof_marker_has_nonzero_counts(pgo_bolt, engine_bin):
    proof_path = pgo_bolt / "share" / "gateway" / "proof.json"
    proof = json.loads(proof_path.read_text())
    assert proof["pgo"]["profraw_files"] > 0
    assert proof["pgo"]["profraw_bytes"] > 0
    assert proof["pgo"]["profdata_bytes"] > 0
    assert len(proof["pgo"]["profdata_sha256"]) == 64
    assert proof["bolt"]["fdata_files"] > 0
    assert proof["bolt"]["functions_with_profile"] > 0
    assert proof["holdout"] not in proof["pgo"]["workloads_trained"]
    assert proof["toolchain"]["rustc_llvm"].split(".")[0] == proof["toolchain"]["llvm_profdata"].split(".")[0]
    # Provenance: the committed profiles of this key, vouched for by this build's freshness checks.
    profiles = proof["profiles"]
    assert profiles["provenance"] == "pinned"
    assert profiles["refresh_command"] == "nix/offline/refresh-profiles"
    for kind in ["llvm", "bolt"]:
        manifest = json.loads((PINNED / kind / "manifest.json").read_text())
        assert profiles[kind]["provenance"] == "pinned"
        assert profiles[kind]["sha256"] == manifest["sha256"], kind
        assert profiles[kind]["trained_on_source_sha256"] == manifest["trained_on"]["source_sha256"]
        assert profiles[kind]["freshness_check"] == "fresh"
        assert manifest["key"]["rust_release"] == proof["toolchain"]["rust_release"]
        assert manifest["key"]["target"] == "x86_64-unknown-linux-gnu"
    subprocess.run([str(engine_bin), "verify-proof", "--require-pinned", str(proof_path)], check=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def test_artifact_serves_chat_completion(pgo_bolt, trainer_bin, tmp_path):
    addr_file = tmp_path / "mock.addr"
    mock = subprocess.Popen([str(trainer_bin), "mock", "--listen", "127.0.0.1:0", "--addr-file", str(addr_file)])
    try:
        deadline = time.monotonic() + 20
        while not addr_file.exists() or not addr_file.read_text().strip():
            assert time.monotonic() < deadline, "mock did not start"
            time.sleep(0.05)
        port = free_port()
        config = {
            "listen": f"127.0.0.1:{port}",
            "workers": 1,
            "providers": {"up": {"kind": "openai", "base_url": f"http://{addr_file.read_text().strip()}",
                                 "api_key_env": "UPSTREAM_KEY"}},
            "models": {"gpt-4o-mini": {"provider": "up", "model": "mock-gpt"}},
        }
        (tmp_path / "gateway.json").write_text(json.dumps(config))
        gw = subprocess.Popen([str(pgo_bolt / "bin" / "gateway"), "--config", str(tmp_path / "gateway.json")],
                              env={"UPSTREAM_KEY": "sk-test", "PATH": "/usr/bin:/bin"})
        try:
            wait_for(f"http://127.0.0.1:{port}/livez")
            body = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"content-type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                answer = json.loads(r.read())
            assert answer["model"] == "gpt-4o-mini"
            assert "Hello from the mock upstream." in answer["choices"][0]["message"]["content"]
        finally:
            gw.send_signal(signal.SIGTERM)
            assert gw.wait(timeout=20) == 0
    finally:
        mock.send_signal(signal.SIGTERM)
        mock.wait(timeout=20)


def test_each_stage_is_its_own_derivation(pgo_bolt):
    drv = subprocess.run(["nix-store", "--query", "--deriver", str(pgo_bolt)],
                         check=True, capture_output=True, text=True).stdout.strip()
    closure = subprocess.run(["nix-store", "--query", "--requisites", drv],
                             check=True, capture_output=True, text=True).stdout.split()
    names = {pathlib.Path(p).name.split("-", 1)[1].removesuffix(".drv") for p in closure if p.endswith(".drv")}
    missing = [s for s in STAGES if s not in names]
    assert not missing, f"stages missing from the derivation graph: {missing}"


def test_artifact_ships_the_coverage_gate_report(pgo_bolt):
    """The artifact depends on the coverage gate (test_each_stage_is_its_own_derivation) and
    carries its report: every request path and posture the gateway lists, each with its shapes."""
    report = json.loads((pgo_bolt / "share" / "gateway" / "request-paths.json").read_text())
    assert len(report["paths"]) == 12, report["paths"]
    assert report["postures"], report
    cold = [p for p in report["paths"] + report["postures"] if not p["shapes"]]
    assert not cold and not report["unknown"], (cold, report["unknown"])
    assert report["training_shapes"] == len(list((ROOT / "shapes").glob("*.json"))) - 1


def test_rebuild_with_unchanged_inputs_builds_nothing(pgo_bolt):
    proc = offline_build("gateway-pgo-bolt", "--no-out-link", "--dry-run")
    assert "will be built" not in proc.stdout, proc.stdout


def test_artifact_references_no_build_input(pgo_bolt):
    """The release's runtime closure is the artifact alone: no vendored sources, no PGO binary,
    no profile and no BOLT (BOLT's note records its command line, so it runs on local copies)."""
    refs = subprocess.run(["nix-store", "--query", "--references", str(pgo_bolt)],
                          check=True, capture_output=True, text=True).stdout.split()
    assert refs in ([], [str(pgo_bolt)]), refs


@pytest.mark.parametrize("where", [
    ["--option", "sandbox-build-dir", "/gateway-build-elsewhere"],
    ["--option", "sandbox", "false"],
], ids=["other-sandbox-build-dir", "no-sandbox"])
def test_bolt_training_runs_in_any_build_directory(pgo_bolt, where):
    """Issue 15 item 4: the BOLT-instrumented binary's profile path depends on no build directory.
    `--check` trains it again in another one (and compares the verdict with the first build's)."""
    proc = offline_build("gateway-bolt-training", "--no-out-link", "--check", *where, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    trained_in = [line for line in proc.stdout.splitlines() if "stage gateway-bolt-training: training in" in line]
    assert trained_in and "/build " not in trained_in[0] + " ", proc.stdout[-4000:]
    assert "freshness check passed" in proc.stdout


def test_instruction_gate_passes_with_a_deterministic_verdict(pgo_bolt):
    """The holdout gate that cannot be noisy: instructions per request under cachegrind, plain vs
    released, on the holdout and board shapes; the figures are in the build log, the output is the
    verdict alone."""
    out = pathlib.Path(offline_build("holdout-instructions", "--no-out-link").stdout.strip().splitlines()[-1])
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["verdict"] == "passed", verdict
    assert "chat-minimal" in verdict["shapes"] and len(verdict["shapes"]) == 2, verdict
    assert verdict["min_reduction_pct"] > 0
    drv = subprocess.run(["nix-store", "--query", "--deriver", str(out)],
                         check=True, capture_output=True, text=True).stdout.strip()
    log = subprocess.run(["nix-store", "--read-log", drv], check=True, capture_output=True, text=True).stdout
    figures = [line for line in log.splitlines() if line.startswith("instructions gate, shape ")]
    assert len(figures) == 2, log[-3000:]
    print("\n".join(figures))
