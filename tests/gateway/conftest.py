"""Fixtures for the SDK conformance tests: the real gateway in front of the trainer's mock.

By default both binaries are the cargo debug build (target/debug), built first. Set GATEWAY_BIN
to test another gateway binary (for example `result/bin/gateway`) and TRAINER_BIN for another
trainer (the mock); with both set nothing is built (tests/quick passes the ones it built).
"""

import json
import os
import pathlib
import signal
import subprocess
import tempfile
import threading
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _start(cmd, marker, env=None):
    """Start CMD and wait until it prints MARKER ADDR on stderr; returns (proc, addr, lines)."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    found = threading.Event()
    addr = {}

    def pump():
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if line.startswith(marker) and not found.is_set():
                addr["a"] = line[len(marker):].strip()
                found.set()

    threading.Thread(target=pump, daemon=True).start()
    if not found.wait(20):
        proc.kill()
        raise AssertionError(f"{cmd[0]} never printed {marker!r}: {lines}")
    return proc, addr["a"], lines


def _stop(proc, timeout=10):
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError("process did not exit within 10 s of SIGTERM")


@pytest.fixture(scope="session")
def binaries():
    gateway = os.environ.get("GATEWAY_BIN")
    trainer = os.environ.get("TRAINER_BIN")
    if not (gateway and trainer):
        subprocess.run(["cargo", "build", "-q", "-p", "gateway", "-p", "trainer"], cwd=ROOT,
                       check=True)
    return (gateway or str(ROOT / "target" / "debug" / "gateway"),
            trainer or str(ROOT / "target" / "debug" / "trainer"))


@pytest.fixture(scope="session")
def gateway_addr(binaries):
    gateway, trainer = binaries
    mock, mock_addr, _ = _start([trainer, "mock", "--listen", "127.0.0.1:0"], "mock listening on ")
    cfg = {
        "listen": "127.0.0.1:0",
        "workers": 2,
        "timeouts": {"upstream_ms": 10000},
        "providers": {
            "up-openai": {"kind": "openai", "base_url": f"http://{mock_addr}",
                          "api_key_env": "CONFORMANCE_OPENAI_KEY"},
            "up-anthropic": {"kind": "anthropic", "base_url": f"http://{mock_addr}",
                             "api_key_env": "CONFORMANCE_ANTHROPIC_KEY"},
        },
        "models": {
            "gpt": {"provider": "up-openai", "model": "mock-gpt"},
            "claude": {"provider": "up-anthropic", "model": "mock-claude"},
        },
    }
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "config.json"
        path.write_text(json.dumps(cfg))
        env = dict(os.environ, CONFORMANCE_OPENAI_KEY="sk-up-openai",
                   CONFORMANCE_ANTHROPIC_KEY="sk-up-anthropic")
        gw, addr, lines = _start([gateway, "--config", str(path)], "listening on ", env=env)
        try:
            yield addr
        finally:
            code = _stop(gw)
            _stop(mock)
            time.sleep(0.05)
            assert code == 0, f"gateway exited {code} after SIGTERM; stderr: {lines[-20:]}"


@pytest.fixture(scope="session")
def openai_client(gateway_addr):
    import openai
    return openai.OpenAI(base_url=f"http://{gateway_addr}/v1", api_key="sk-client", max_retries=0)


@pytest.fixture(scope="session")
def anthropic_client(gateway_addr):
    import anthropic
    return anthropic.Anthropic(base_url=f"http://{gateway_addr}", api_key="sk-client", max_retries=0)


@pytest.fixture
def routed_stack(binaries):
    """A factory for a gateway in front of several mocks, one per deployment, each mock started
    with its own directives (`trainer mock --directives`, None for a healthy one). Every mock NAME
    is reachable as providers `NAME-openai` and `NAME-anthropic`. Returns an object with `addr`,
    `requests(NAME)` (what that mock received) and SDK clients `openai` and `anthropic`; stops
    everything afterwards and requires the gateway's clean exit."""
    import types

    import anthropic
    import httpx
    import openai

    gateway, trainer = binaries
    mocks, gateways, dirs = [], [], []

    def start(deployments_by_mock, models, routing=None, upstream_ms=10000):
        addrs = {}
        for name, directives in deployments_by_mock.items():
            cmd = [trainer, "mock", "--listen", "127.0.0.1:0"]
            if directives:
                cmd += ["--directives", directives]
            proc, addr, _ = _start(cmd, "mock listening on ")
            mocks.append(proc)
            addrs[name] = addr
        providers = {}
        for name, addr in addrs.items():
            providers[f"{name}-openai"] = {"kind": "openai", "base_url": f"http://{addr}",
                                           "api_key_env": "CONFORMANCE_OPENAI_KEY"}
            providers[f"{name}-anthropic"] = {"kind": "anthropic", "base_url": f"http://{addr}",
                                              "api_key_env": "CONFORMANCE_ANTHROPIC_KEY"}
        cfg = {"listen": "127.0.0.1:0", "workers": 1, "timeouts": {"upstream_ms": upstream_ms},
               "providers": providers, "models": models}
        if routing is not None:
            cfg["routing"] = routing
        d = tempfile.TemporaryDirectory()
        dirs.append(d)
        path = pathlib.Path(d.name) / "config.json"
        path.write_text(json.dumps(cfg))
        env = dict(os.environ, CONFORMANCE_OPENAI_KEY="sk-up-openai",
                   CONFORMANCE_ANTHROPIC_KEY="sk-up-anthropic")
        gw, addr, lines = _start([gateway, "--config", str(path)], "listening on ", env=env)
        gateways.append((gw, lines))
        return types.SimpleNamespace(
            addr=addr,
            requests=lambda name: httpx.get(f"http://{addrs[name]}/mock/requests").json()["requests"],
            openai=openai.OpenAI(base_url=f"http://{addr}/v1", api_key="sk-client", max_retries=0),
            anthropic=anthropic.Anthropic(base_url=f"http://{addr}", api_key="sk-client",
                                          max_retries=0),
        )

    yield start
    codes = [(_stop(gw), lines) for gw, lines in gateways]
    for m in mocks:
        _stop(m)
    for d in dirs:
        d.cleanup()
    for code, lines in codes:
        assert code == 0, f"gateway exited {code} after SIGTERM; stderr: {lines[-20:]}"
