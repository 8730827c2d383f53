"""Real coding agents as clients of the gateway: Claude Code (`claude -p`, Anthropic Messages on
/v1/messages) and Codex CLI (`codex exec`, OpenAI Responses on /v1/responses), each through its
native route (an upstream of its own dialect) and bridged (an upstream of the other one), each
in its own default permission mode and in the mode that lets its shell tool run unasked, with a
tool-call turn: the trainer's mock answers the agent's first request with a call of one of the
agent's tools (`[[mock:call:NAME:ARGS]]` in the prompt), the agent runs it in a scratch
directory, and the mock's final answer quotes the tool result it got back, which the agent
prints.

The upstream is the trainer's mock, as strict as the real APIs (trainer/src/mock/strict.rs), under
realistic upstream model names, so that what a real API refuses (a beta-gated field without its
beta, `max_tokens` to a reasoning model, ...) fails here too. The bridged aliases and their
`drop` lists are docs/translation-policy.md's own example (its first json block), so the lists
tested are the documented ones. Claude Code is configured as docs/operations.md says (a
`modelPicker` row with `behavesAs` for the alias in front of a Claude model,
`CLAUDE_CODE_MAX_CONTEXT_TOKENS` for the one in front of a GPT model) and must not warn that it
guesses an alias's context window.

The agents are the npm packages pinned by tests/agents/package-lock.json, installed by
tests/setup (tests/agents/agents.py runs them offline but for loopback). Without the packages the
tests skip, saying how to install them.
"""

import importlib.util
import json
import os
import pathlib
import re
import secrets
import subprocess
import tempfile
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


agents = _load("agents_runner", HERE / "agents.py")
# The SDK suite's helpers: start a process and wait for its address, stop it with SIGTERM.
_gw = _load("gateway_conftest", ROOT / "tests" / "gateway" / "conftest.py")

# Upstream model names a real upstream has; the strict mock's model rules key on them.
CLAUDE_UPSTREAM = "claude-sonnet-4-6"
GPT_UPSTREAM = "gpt-5.5"


def documented_aliases():
    """The bridged aliases of docs/translation-policy.md's example: {name: alias config}."""
    text = (ROOT / "docs" / "translation-policy.md").read_text()
    block = re.search(r"```json\n(.*?)```", text, re.S).group(1)
    return json.loads("{" + block + "}")["models"]


DOCUMENTED = documented_aliases()
# What each bridged alias lets translation drop: the parts each agent sends in its default mode
# that have no counterpart in the other dialect.
CLAUDE_DROPS = DOCUMENTED["claude-on-gpt"]["drop"]
CODEX_DROPS = DOCUMENTED["codex-on-claude"]["drop"]

# (agent, route) -> alias
ALIAS = {("claude", "native"): "claude-native", ("claude", "bridged"): "claude-on-gpt",
         ("codex", "native"): "codex-native", ("codex", "bridged"): "codex-on-claude"}
# Each agent's default mode and the one that runs its shell tool unasked.
MODES = {"claude": ["default", "allow-bash"], "codex": ["read-only", "bypass"]}

pytestmark = pytest.mark.skipif(
    not agents.installed(),
    reason="the agents are not installed: run tests/setup (npm ci in tests/agents)")


@pytest.fixture(scope="module")
def stack():
    """The gateway (cargo debug build unless GATEWAY_BIN/TRAINER_BIN) in front of one mock, with
    an alias per (agent, route), the documented ones, and an access log to read back."""
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
    strict = {f"{agent}-strict": {k: v for k, v in DOCUMENTED[ALIAS[agent, "bridged"]].items()
                                  if k != "drop"} for agent in ("claude", "codex")}
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
            "claude-native": {"provider": "up-anthropic", "model": CLAUDE_UPSTREAM},
            "codex-native": {"provider": "up-openai", "model": GPT_UPSTREAM},
            **DOCUMENTED,
            **strict,
        },
    }
    path = pathlib.Path(d.name) / "config.json"
    path.write_text(json.dumps(cfg))
    env = dict(os.environ, AGENTS_OPENAI_KEY="sk-up-openai", AGENTS_ANTHROPIC_KEY="sk-up-anthropic")
    gw, addr, lines = _gw._start([gateway, "--config", str(path)], "listening on ", env=env)
    try:
        yield {"base": f"http://{addr}", "log": log}
    finally:
        code = _gw._stop(gw)
        _gw._stop(mock)
        d.cleanup()
        assert code == 0, f"gateway exited {code} after SIGTERM; stderr: {lines[-20:]}"


# An alias in front of a GPT model: Claude Code is told its window (docs/operations.md), the
# upstream's, and sends what it sends for a model it does not otherwise know.
GPT_WINDOW = "400000"


def claude_settings(home):
    """Claude Code's user settings as docs/operations.md tells a gateway's users: a /model picker
    row for the alias in front of a Claude model, naming the model it behaves as."""
    rows = [{"model": "claude-native", "label": "claude-native", "behavesAs": CLAUDE_UPSTREAM}]
    settings = home / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(json.dumps({"modelPicker": {"options": rows}}))


def run(stack, agent, alias, prompt, work, mode):
    env = None
    if agent == "claude":
        claude_settings(work.parent / "home")
        if alias != "claude-native":
            env = {"CLAUDE_CODE_MAX_CONTEXT_TOKENS": GPT_WINDOW}
    return agents.run(agent, stack["base"], alias, prompt, work, mode, extra_env=env)


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


def test_the_installed_agents_are_the_pinned_ones():
    for agent in ("claude", "codex"):
        assert agents.version(agent) == agents.locked_version(agent), (
            f"{agent} {agents.version(agent)} is installed but package-lock.json pins "
            f"{agents.locked_version(agent)}: run `npm ci` in tests/agents")


@pytest.mark.parametrize("route", ["native", "bridged"])
@pytest.mark.parametrize("agent,mode", [(a, m) for a in sorted(MODES) for m in MODES[a]])
def test_agent_runs_a_tool_and_gets_the_answer(stack, agent, mode, route, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    token = f"note-{secrets.token_hex(6)}"
    (work / "note.txt").write_text(token + "\n")
    tool, args = agents.tool_call(agent, mode, work)
    alias = ALIAS[agent, route]
    # The alias's lines so far (one alias serves every mode).
    before = len(log_lines(stack, alias, 0))
    p = run(stack, agent, alias, agents.prompt_calling(tool, args), work, mode)
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"{agent} exited {p.returncode}: {out[-3000:]}"
    # The mock quotes the tool result it received (Codex wraps the command's output in a report
    # of its own): the tool ran and its output crossed back.
    said = p.stdout.find("The tool said: ")
    assert said >= 0 and token in p.stdout[said:], out[-3000:]
    # Claude Code knows the alias's window (issue 43, goal 7): it does not warn that it guesses
    # one. (For the alias in front of a GPT model, which no behavesAs row describes, it still
    # prints its `[claude-code:unrecognized_model]` diagnostic line: it does not know the model.)
    assert "doesn't recognize the model" not in out, out
    if alias == "claude-native":
        assert "unrecognized_model" not in out, out
    # The call and the answer after it: two requests at least.
    lines = log_lines(stack, alias, before + 2)[before:]
    assert len(lines) >= 2 and all(l["status"] == 200 for l in lines), \
        [{k: l.get(k) for k in ("status", "error", "dropped")} for l in lines]
    if route == "bridged":
        want = CLAUDE_DROPS if agent == "claude" else CODEX_DROPS
        assert all(set(l["dropped"].split(",")) <= set(want) for l in lines), lines
        assert any(l.get("dropped") for l in lines), lines
    else:
        assert not any("dropped" in l for l in lines), lines


@pytest.mark.parametrize("agent", sorted(MODES))
def test_bridged_alias_without_drop_refuses_naming_the_parts(stack, agent, tmp_path):
    """By default a part with no counterpart is a 400 naming it, in the agent's own dialect."""
    work = tmp_path / "work"
    work.mkdir()
    p = run(stack, agent, f"{agent}-strict", "hello", work, MODES[agent][0])
    out = p.stdout + p.stderr
    assert p.returncode != 0, out[-3000:]
    first = (CLAUDE_DROPS if agent == "claude" else CODEX_DROPS)[0]
    assert first in out, out[-3000:]
    assert "drop" in out, out[-3000:]
