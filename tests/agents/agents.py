"""How the agent tests and the capture run the coding agents (the npm packages pinned by
tests/agents/package-lock.json): each in a scratch HOME with its own config, offline but for
loopback, in one of its permission modes, against a base URL.

Modes, each agent's own default first:
- Claude Code (`claude -p`): `default` (its default permissions: read-only tools such as Read run,
  Bash is refused for want of a permission prompt) and `allow-bash` (`--allowedTools Bash`; it
  refuses `--dangerously-skip-permissions` as root).
- Codex CLI (`codex exec`): `read-only` (its default sandbox), `workspace-write` (`-s
  workspace-write`) and `bypass` (`--dangerously-bypass-approvals-and-sandbox`).
"""

import json
import os
import pathlib
import subprocess

HERE = pathlib.Path(__file__).resolve().parent
BIN = HERE / "node_modules" / ".bin"

CLAUDE_MODES = ["default", "allow-bash"]
CODEX_MODES = ["read-only", "workspace-write", "bypass"]
MODES = {"claude": CLAUDE_MODES, "codex": CODEX_MODES}


def installed():
    return (BIN / "claude").exists() and (BIN / "codex").exists()


def version(agent):
    """The installed version of AGENT's npm package."""
    pkg = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex"}[agent]
    return json.loads((HERE / "node_modules" / pkg / "package.json").read_text())["version"]


def locked_version(agent):
    """The version package-lock.json pins for AGENT."""
    pkg = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex"}[agent]
    lock = json.loads((HERE / "package-lock.json").read_text())
    return lock["packages"][f"node_modules/{pkg}"]["version"]


def offline_env(home):
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


def claude_argv(model, prompt, mode):
    argv = [str(BIN / "claude"), "-p", prompt, "--model", model, "--max-turns", "4"]
    if mode == "allow-bash":
        argv += ["--allowedTools", "Bash"]
    elif mode != "default":
        raise ValueError(f"no Claude Code mode {mode!r}")
    return argv


def run_claude(base_url, model, prompt, workdir, mode, timeout=120, extra_env=None):
    home = workdir.parent / "home"
    home.mkdir(exist_ok=True)
    env = offline_env(home)
    env.update(ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY="sk-client",
               CLAUDE_CONFIG_DIR=str(home / ".claude"), **(extra_env or {}))
    return subprocess.run(claude_argv(model, prompt, mode), cwd=workdir, env=env,
                          capture_output=True, text=True, timeout=timeout)


def codex_argv(prompt, mode):
    flags = {"read-only": [], "workspace-write": ["-s", "workspace-write"],
             "bypass": ["--dangerously-bypass-approvals-and-sandbox"]}
    if mode not in flags:
        raise ValueError(f"no Codex mode {mode!r}")
    return [str(BIN / "codex"), "exec", "--skip-git-repo-check", *flags[mode], prompt]


def run_codex(base_url, model, prompt, workdir, mode, timeout=120, extra_env=None):
    """BASE_URL is the server's root; Codex is given BASE_URL/v1 and speaks Responses to it."""
    home = workdir.parent / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(f"""
model = "{model}"
model_provider = "gateway"
check_for_update_on_startup = false
[model_providers.gateway]
name = "gateway"
base_url = "{base_url}/v1"
wire_api = "responses"
env_key = "GATEWAY_KEY"
request_max_retries = 0
stream_max_retries = 0
[analytics]
enabled = false
""")
    env = offline_env(home)
    env.update(CODEX_HOME=str(codex_home), GATEWAY_KEY="sk-client", **(extra_env or {}))
    return subprocess.run(codex_argv(prompt, mode), cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=timeout)


def run(agent, base_url, model, prompt, workdir, mode, timeout=120, extra_env=None):
    runner = {"claude": run_claude, "codex": run_codex}[agent]
    return runner(base_url, model, prompt, workdir, mode, timeout, extra_env)


def tool_call(agent, mode, workdir):
    """The scripted tool call that reads WORKDIR/note.txt in MODE: (tool name, its arguments).
    Claude Code's default permissions refuse Bash in `-p` (no one to ask), so there it is Read."""
    if agent == "claude":
        if mode == "default":
            return "Read", {"file_path": str(workdir / "note.txt")}
        return "Bash", {"command": "cat note.txt", "description": "read the note"}
    return "exec_command", {"cmd": "cat note.txt"}


def prompt_calling(tool, args):
    """A prompt that has the trainer's mock answer with a call of TOOL (then quote its result)."""
    call = json.dumps(args, separators=(",", ":"))
    return f"Read the note. [[mock:call:{tool}:{call}]]"
