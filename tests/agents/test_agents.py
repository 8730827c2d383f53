"""Real coding agents as clients of the gateway: Claude Code (`claude -p`, Anthropic Messages on
/v1/messages) and Codex CLI (`codex exec`, OpenAI Responses on /v1/responses), each through its
native route (an upstream of its own dialect) and bridged (an upstream of the other one), with a
tool-call turn: the trainer's mock answers the agent's first request with a call of the agent's
shell tool (`[[mock:call:NAME:ARGS]]` in the prompt), the agent runs it in a scratch directory,
and the mock's final answer quotes the tool result it got back, which the agent prints.

The agents are the npm packages pinned by tests/agents/package-lock.json, installed by
tests/setup. They run with HOME and their config in a temporary directory, telemetry and updates
off, and a proxy on a closed loopback port for any host but 127.0.0.1, so nothing leaves the
machine. Without the packages the tests skip, saying how to install them.
"""

import importlib.util
import json
import os
import pathlib
import secrets
import subprocess
import tempfile
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BIN = HERE / "node_modules" / ".bin"

# The SDK suite's helpers: start a process and wait for its address, stop it with SIGTERM.
_spec = importlib.util.spec_from_file_location("gateway_conftest",
                                               ROOT / "tests" / "gateway" / "conftest.py")
_gw = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_gw)

# What each bridged alias lets translation drop (docs/translation-policy.md): the parts each
# agent sends that have no counterpart in the other dialect.
CLAUDE_DROPS = ["cache_control", "context_management"]
CODEX_DROPS = ["reasoning.summary", "include", "prompt_cache_key", "client_metadata"]


def _installed():
    return (BIN / "claude").exists() and (BIN / "codex").exists()


pytestmark = pytest.mark.skipif(
    not _installed(),
    reason="the agents are not installed: run tests/setup (npm ci in tests/agents)")


@pytest.fixture(scope="module")
def stack():
    """The gateway (cargo debug build unless GATEWAY_BIN/TRAINER_BIN) in front of one mock, with
    an alias per (agent, route) and an access log to read back."""
    gateway = os.environ.get("GATEWAY_BIN")
    trainer = os.environ.get("TRAINER_BIN")
    if not (gateway and trainer):
        subprocess.run(["cargo", "build", "-q", "-p", "gateway", "-p", "trainer"], cwd=ROOT,
                       check=True)
        gateway = gateway or str(ROOT / "target" / "debug" / "gateway")
        trainer = trainer or str(ROOT / "target" / "debug" / "trainer")
    mock, mock_addr, _ = _gw._start([trainer, "mock", "--listen", "127.0.0.1:0"],
                                    "mock listening on ")
    d = tempfile.TemporaryDirectory()
    log = pathlib.Path(d.name) / "access.log"
    cfg = {
        "listen": "127.0.0.1:0",
        "workers": 2,
        "timeouts": {"upstream_ms": 20000},
        "access_log": {"path": str(log)},
        "providers": {
            "up-openai": {"kind": "openai", "base_url": f"http://{mock_addr}",
                          "api_key_env": "AGENTS_OPENAI_KEY"},
            "up-anthropic": {"kind": "anthropic", "base_url": f"http://{mock_addr}",
                             "api_key_env": "AGENTS_ANTHROPIC_KEY"},
        },
        "models": {
            "claude-native": {"provider": "up-anthropic", "model": "mock-claude"},
            "claude-bridged": {"provider": "up-openai", "model": "mock-gpt",
                               "drop": CLAUDE_DROPS},
            "claude-strict": {"provider": "up-openai", "model": "mock-gpt"},
            "codex-native": {"provider": "up-openai", "model": "mock-gpt"},
            "codex-bridged": {"provider": "up-anthropic", "model": "mock-claude",
                              "drop": CODEX_DROPS},
            "codex-strict": {"provider": "up-anthropic", "model": "mock-claude"},
        },
    }
    path = pathlib.Path(d.name) / "config.json"
    path.write_text(json.dumps(cfg))
    env = dict(os.environ, AGENTS_OPENAI_KEY="sk-up-openai", AGENTS_ANTHROPIC_KEY="sk-up-anthropic")
    gw, addr, lines = _gw._start([gateway, "--config", str(path)], "listening on ", env=env)
    try:
        yield {"addr": addr, "log": log}
    finally:
        code = _gw._stop(gw)
        _gw._stop(mock)
        d.cleanup()
        assert code == 0, f"gateway exited {code} after SIGTERM; stderr: {lines[-20:]}"


def _offline_env(home):
    """The environment of an agent run: only loopback reachable, nothing written outside HOME."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC_", "OPENAI_", "CLAUDE_", "CODEX_"))}
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        # Any host but loopback goes to a closed port.
        HTTPS_PROXY="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9",
        https_proxy="http://127.0.0.1:9", http_proxy="http://127.0.0.1:9",
        NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_AUTOUPDATER="1",
        DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1", DISABLE_BUG_COMMAND="1",
    )
    return env


def run_claude(stack, alias, prompt, workdir):
    home = workdir.parent / "home"
    home.mkdir(exist_ok=True)
    env = _offline_env(home)
    env.update(ANTHROPIC_BASE_URL=f"http://{stack['addr']}", ANTHROPIC_API_KEY="sk-client",
               CLAUDE_CONFIG_DIR=str(home / ".claude"))
    return subprocess.run(
        [str(BIN / "claude"), "-p", prompt, "--model", alias, "--allowedTools", "Bash",
         "--max-turns", "4"],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=120)


def run_codex(stack, alias, prompt, workdir):
    home = workdir.parent / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(f"""
model = "{alias}"
model_provider = "gateway"
check_for_update_on_startup = false
[model_providers.gateway]
name = "gateway"
base_url = "http://{stack['addr']}/v1"
wire_api = "responses"
env_key = "GATEWAY_KEY"
request_max_retries = 0
stream_max_retries = 0
[analytics]
enabled = false
""")
    env = _offline_env(home)
    env.update(CODEX_HOME=str(codex_home), GATEWAY_KEY="sk-client")
    return subprocess.run(
        [str(BIN / "codex"), "exec", "--skip-git-repo-check",
         "--dangerously-bypass-approvals-and-sandbox", prompt],
        cwd=workdir, env=env, capture_output=True, text=True, timeout=120)


# agent -> (runner, the shell tool's name, its arguments for a command)
AGENTS = {
    "claude": (run_claude, "Bash", lambda cmd: {"command": cmd, "description": "read the note"}),
    "codex": (run_codex, "exec_command", lambda cmd: {"cmd": cmd}),
}


def log_lines(stack, alias, at_least):
    """The access-log lines of ALIAS once there are AT_LEAST of them (the log is flushed by its
    writer thread, so lines can arrive a moment after the answers), or what there is after 5 s."""
    deadline = time.time() + 5
    while True:
        lines = [json.loads(l) for l in stack["log"].read_text().splitlines() if l.strip()] \
            if stack["log"].exists() else []
        mine = [l for l in lines if l["model"] == alias]
        if len(mine) >= at_least or time.time() > deadline:
            return mine
        time.sleep(0.2)


@pytest.mark.parametrize("route", ["native", "bridged"])
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_agent_runs_a_tool_and_gets_the_answer(stack, agent, route, tmp_path):
    runner, tool, args = AGENTS[agent]
    work = tmp_path / "work"
    work.mkdir()
    token = f"note-{secrets.token_hex(6)}"
    (work / "note.txt").write_text(token + "\n")
    call = json.dumps(args("cat note.txt"), separators=(",", ":"))
    alias = f"{agent}-{route}"
    p = runner(stack, alias, f"Read the note. [[mock:call:{tool}:{call}]]", work)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{agent} exited {p.returncode}: {out[-3000:]}"
    # The mock quotes the tool result it received (Codex wraps the command's output in a report
    # of its own): the command ran and its output crossed back.
    said = p.stdout.find("The tool said: ")
    assert said >= 0 and token in p.stdout[said:], out[-3000:]
    # The call and the answer after it: two requests at least.
    lines = log_lines(stack, alias, 2)
    assert len(lines) >= 2 and all(l["status"] == 200 for l in lines), lines
    if route == "bridged":
        want = CLAUDE_DROPS if agent == "claude" else CODEX_DROPS
        assert all(set(l["dropped"].split(",")) <= set(want) for l in lines), lines
        assert any(l.get("dropped") for l in lines), lines
    else:
        assert not any("dropped" in l for l in lines), lines


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_bridged_alias_without_drop_refuses_naming_the_parts(stack, agent, tmp_path):
    """By default a part with no counterpart is a 400 naming it, in the agent's own dialect."""
    runner, _, _ = AGENTS[agent]
    work = tmp_path / "work"
    work.mkdir()
    p = runner(stack, f"{agent}-strict", "hello", work)
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-3000:]
    first = (CLAUDE_DROPS if agent == "claude" else CODEX_DROPS)[0]
    assert first in out, out[-3000:]
    assert "drop" in out, out[-3000:]
