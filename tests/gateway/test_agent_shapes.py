"""Agent-shaped requests on the wire (the payloads of shapes/agent-*.json: Claude Code's and Codex
CLI's request structure) through every route, streaming and not, with the mock's scripted
tool-call turn: the call comes back in the client's dialect (a Codex namespace tool's call under
its namespace), the parts the alias drops are named in `x-gateway-dropped`, and an alias without
`drop` refuses them naming each. The agents themselves run in tests/agents."""

import json
import pathlib

import httpx
import pytest

SHAPES = pathlib.Path(__file__).resolve().parents[2] / "shapes"
# The parts of each payload with no counterpart in the other dialect, all in the drop lists that
# docs/translation-policy.md gives the agents (the payloads carry no `context_management`, which
# the mock refuses without its beta header, nor a restricted web search).
CLAUDE_DROPS = ["cache_control"]
CODEX_DROPS = ["reasoning.summary", "include", "prompt_cache_key", "client_metadata"]


def payload(name, stream, call, done):
    """The agent payload with the scripted call in its last user message; `done` keeps its tool
    results (the turn after the call), else they are cut so that the mock calls the tool."""
    body = json.loads((SHAPES / "payloads" / f"{name}.json").read_text())
    body["stream"] = stream
    marker = f" [[mock:call:{call}]]"
    if name == "agent-claude-code":
        msgs = body["messages"]
        if not done:
            del msgs[2:]
        last = msgs[-1] if msgs[-1]["role"] == "user" else msgs[0]
        last["content"].append({"type": "text", "text": "go" + marker})
    else:
        items = body["input"]
        if not done:
            items[:] = [i for i in items if i.get("type", "message") == "message"]
        items.append({"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": "go" + marker}]})
    return body


def sse_json(text):
    return [json.loads(l[6:]) for l in text.splitlines()
            if l.startswith("data: ") and l[6:].strip() not in ("", "[DONE]")]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["native", "bridged"])
def test_claude_code_shape(routed_stack, route, stream):
    up = "anthropic" if route == "native" else "openai"
    model = {"provider": f"m-{up}", "model": "mock"}
    if route == "bridged":
        model["drop"] = CLAUDE_DROPS
    s = routed_stack({"m": None}, {"claude-code-agent": model})
    url = f"http://{s.addr}/v1/messages"
    body = payload("agent-claude-code", stream, 'Bash:{"command":"ls"}', done=False)
    r = httpx.post(url, json=body, timeout=30)
    assert r.status_code == 200, r.text
    if stream:
        starts = [e for e in sse_json(r.text) if e["type"] == "content_block_start"]
        block = starts[0]["content_block"]
    else:
        block = r.json()["content"][0]
    assert (block["type"], block["name"]) == ("tool_use", "Bash")
    assert r.headers.get("x-gateway-dropped") == (
        None if route == "native" else ",".join(CLAUDE_DROPS))
    # The turn after: the tool result crosses, the mock quotes it.
    r = httpx.post(url, json=payload("agent-claude-code", False, 'Bash:{"command":"ls"}', True),
                   timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["content"][0]["text"].startswith("The tool said: ")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("route", ["native", "bridged"])
def test_codex_shape_namespace_call_comes_back_under_its_namespace(routed_stack, route, stream):
    up = "openai" if route == "native" else "anthropic"
    model = {"provider": f"m-{up}", "model": "mock"}
    if route == "bridged":
        model["drop"] = CODEX_DROPS
    s = routed_stack({"m": None}, {"codex-agent": model})
    url = f"http://{s.addr}/v1/responses"
    # Natively the namespace tool reaches the mock as Codex sent it (no flat names to call), so
    # the native turn calls a top-level function tool; bridged, the upstream is offered the
    # flattened name, and its call must come back as namespace + name.
    call = 'exec_command:{"cmd":"ls"}' if route == "native" else \
        'multi_agent_v1__spawn_agent:{"path":"a"}'
    r = httpx.post(url, json=payload("agent-codex", stream, call, done=False), timeout=30)
    assert r.status_code == 200, r.text
    if stream:
        done = [e for e in sse_json(r.text) if e["type"] == "response.output_item.done"]
        item = done[0]["item"]
    else:
        item = r.json()["output"][0]
    assert item["type"] == "function_call"
    if route == "native":
        assert item["name"] == "exec_command" and "namespace" not in item
        assert r.headers.get("x-gateway-dropped") is None
    else:
        assert (item.get("namespace"), item["name"]) == ("multi_agent_v1", "spawn_agent")
        assert r.headers.get("x-gateway-dropped") == ",".join(CODEX_DROPS)
    r = httpx.post(url, json=payload("agent-codex", False, call, True), timeout=30)
    assert r.status_code == 200, r.text
    text = r.json()["output"][0]["content"][0]["text"]
    assert text.startswith("The tool said: ")


@pytest.mark.parametrize("name,endpoint,up,parts", [
    ("agent-claude-code", "/v1/messages", "openai", CLAUDE_DROPS),
    ("agent-codex", "/v1/responses", "anthropic", CODEX_DROPS),
])
def test_without_drop_the_bridge_refuses_naming_each_part(routed_stack, name, endpoint, up, parts):
    model = "claude-code-agent" if name == "agent-claude-code" else "codex-agent"
    s = routed_stack({"m": None}, {model: {"provider": f"m-{up}", "model": "mock"}})
    r = httpx.post(f"http://{s.addr}{endpoint}",
                   json=payload(name, False, "x:{}", done=True), timeout=30)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    if endpoint == "/v1/messages":
        assert r.json()["type"] == "error" and err["type"] == "invalid_request_error"
    for p in parts:
        assert p in err["message"], err["message"]
    for internal in ("missing field", "line 1", "column"):
        assert internal not in err["message"]
