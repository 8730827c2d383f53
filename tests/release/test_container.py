"""The released OCI image run for real (issue 51): Debian's podman loads the release's image
archive and runs it with runc; the gateway in the container serves the trainer's mock on the
host's loopback, the official openai and anthropic SDK suite (tests/gateway) passes against it,
`podman stop` drains an in-flight stream as SIGTERM does outside a container, and the proof marker
taken out of the image verifies. Skips, saying why, where podman cannot run a container."""

import json
import os
import pathlib
import resource
import shutil
import subprocess
import tarfile
import threading
import time
import uuid

import pytest


HERE = pathlib.Path(__file__).resolve().parent
WRAPPER = HERE / "podman-gateway"
IMAGE = "localhost/llm-gateway:0.1.0"


def podman(*args, check=True, **kw):
    return subprocess.run(["podman", *args], check=check, capture_output=True, text=True, **kw)


def run_env():
    # The container's descriptor limit can be no higher than this process's hard limit (runc sets
    # it; podman's default asks for more, which this machine refuses).
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
    return dict(os.environ, RELEASE_IMAGE=IMAGE, PODMAN_NOFILE=str(nofile))


@pytest.fixture(scope="module")
def image(release):
    """The release's image archive loaded into podman (localhost/llm-gateway:0.1.0)."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install podman runc; tests/setup installs them)")
    loaded = podman("load", "-i", str(release / "llm-gateway-0.1.0-oci.tar"), check=False)
    assert loaded.returncode == 0, loaded.stderr
    assert f"Loaded image: {IMAGE}" in loaded.stdout + loaded.stderr, loaded.stdout + loaded.stderr
    env = run_env()
    probe = subprocess.run(
        ["podman", "run", "--rm", "--runtime", "runc", "--network", "host",
         "--ulimit", f"nofile={env['PODMAN_NOFILE']}:{env['PODMAN_NOFILE']}",
         "--ulimit", "nproc=4096:4096", IMAGE, "--version"],
        capture_output=True, text=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip(f"podman cannot run a container on this machine: {probe.stderr.strip()[-500:]}")
    assert probe.stdout.startswith("gateway "), probe.stdout
    yield IMAGE


@pytest.fixture(scope="module")
def trainer(kit):
    return kit.built("trainer") / "bin" / "trainer"


@pytest.fixture(scope="module")
def engine(release, tmp_path_factory):
    """pgo-engine from the release's own tarball."""
    d = tmp_path_factory.mktemp("engine")
    with tarfile.open(release / "pgo-engine-0.1.0-x86_64-linux.tar.gz") as tar:
        tar.extractall(d)
    return next(d.glob("*/bin/pgo-engine"))


def test_image_labels_as_podman_reads_them(image, release_json):
    info = json.loads(podman("image", "inspect", image).stdout)[0]
    labels = info["Labels"]
    assert labels["org.llm-gateway.binary.sha256"] == release_json["binary_sha256"]
    assert labels["org.llm-gateway.proof.sha256"] == release_json["proof_marker_sha256"]
    assert labels["org.opencontainers.image.revision"] == release_json["revision"]
    assert info["Architecture"] == "amd64" and info["Os"] == "linux"
    assert info["Config"]["User"] == "65532:65532"
    print(f"image size (podman): {info['Size']} bytes")


def test_sdk_suite_passes_against_the_gateway_in_the_container(image, kit):
    """tests/gateway/test_sdk_conformance.py as it is, its gateway started by podman."""
    started = time.monotonic()
    summary = kit.sdk_suite(WRAPPER, RELEASE_IMAGE=IMAGE, PODMAN_NOFILE=run_env()["PODMAN_NOFILE"])
    print(f"SDK suite in the container: {summary} ({time.monotonic() - started:.0f} s)")


def wait_for(stream, marker, lines, timeout=60):
    found = threading.Event()
    addr = {}

    def pump():
        for line in stream:
            lines.append(line.rstrip("\n"))
            if line.startswith(marker) and not found.is_set():
                addr["a"] = line[len(marker):].strip()
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    assert found.wait(timeout), f"never printed {marker!r}: {lines}"
    return addr["a"]


def test_podman_stop_drains_an_in_flight_stream(image, trainer, tmp_path):
    import openai

    mock = subprocess.Popen([str(trainer), "mock", "--listen", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True)
    gw = None
    name = f"release-drain-{uuid.uuid4().hex[:8]}"
    try:
        mock_addr = wait_for(mock.stderr, "mock listening on ", [])
        cfg = tmp_path / "config.json"
        cfg.write_text(json.dumps({
            "listen": "127.0.0.1:0", "workers": 1,
            "providers": {"up": {"kind": "openai", "base_url": f"http://{mock_addr}",
                                 "api_key_env": "CONFORMANCE_OPENAI_KEY"}},
            "models": {"gpt": {"provider": "up", "model": "mock-gpt"}}}))
        env = dict(run_env(), PODMAN_NAME=name, CONFORMANCE_OPENAI_KEY="sk-up")
        gw = subprocess.Popen([str(WRAPPER), "--config", str(cfg)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        lines = []
        addr = wait_for(gw.stderr, "listening on ", lines)
        # The gateway runs as the image's user, not root.
        pid = podman("inspect", "--format", "{{.State.Pid}}", name).stdout.strip()
        uids = [l for l in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines() if l.startswith("Uid:")]
        assert uids[0].split()[1:] == ["65532"] * 4, uids

        client = openai.OpenAI(base_url=f"http://{addr}/v1", api_key="sk-client", max_retries=0)
        frames = 20
        stream = client.chat.completions.create(
            model="gpt", stream=True,
            messages=[{"role": "user", "content": f"Hi [[mock:frames:{frames}]][[mock:frame_interval_ms:200]]"}])
        chunks = iter(stream)
        text = [next(chunks).choices[0].delta.content or ""]
        stopped = {}
        stopper = threading.Thread(target=lambda: stopped.update(
            proc=podman("stop", "-t", "60", name, check=False)))
        stopper.start()
        finish = None
        after_drain = 0
        for chunk in chunks:
            if chunk.choices:
                text.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            after_drain += any("draining" in l for l in lines)
        stopper.join(90)
        # The stop reached the gateway while the stream was in flight, and the stream went on.
        assert after_drain >= 3, (after_drain, lines)
        assert "".join(text) == "Hello from the mock upstream." + "".join(f" word{k}" for k in range(2, frames + 1))
        assert finish == "stop"
        assert stopped["proc"].returncode == 0, stopped["proc"].stderr
        assert gw.wait(60) == 0, lines
        assert any("draining" in l for l in lines), lines
    finally:
        if gw is not None and gw.poll() is None:
            podman("rm", "-f", name, check=False)
            gw.kill()
        mock.terminate()
        mock.wait(10)


def test_marker_taken_out_of_the_image_verifies(image, engine, release_json, tmp_path):
    name = f"release-marker-{uuid.uuid4().hex[:8]}"
    podman("create", "--name", name, image)
    try:
        podman("cp", f"{name}:/usr/share/gateway/proof.json", str(tmp_path / "proof.json"))
        podman("cp", f"{name}:/usr/bin/gateway", str(tmp_path / "gateway"))
    finally:
        podman("rm", name, check=False)
    import hashlib
    assert hashlib.sha256((tmp_path / "proof.json").read_bytes()).hexdigest() == release_json["proof_marker_sha256"]
    assert hashlib.sha256((tmp_path / "gateway").read_bytes()).hexdigest() == release_json["binary_sha256"]
    subprocess.run([str(engine), "verify-proof", "--require-pinned", str(tmp_path / "proof.json")], check=True)
