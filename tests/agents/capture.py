#!/usr/bin/env python3
"""Capture what each installed agent sends, in each of its modes, for tests/agents/captures/.

    tests/agents/capture.py                 # both agents, every mode: captures/<agent>-<version>/
    tests/agents/capture.py claude          # one agent
    tests/agents/capture.py --resummarize   # rewrite the summaries from the recorded requests

Each agent runs scripted tool-call sessions (tests/agents/agents.py's prompt) in each of its
modes against a recording proxy in front of the trainer's mock (cargo debug build unless
TRAINER_BIN), with no gateway between: what is recorded is the agent's own requests, every
header and body. The model names are realistic (`MODELS` below), as a real upstream sees them.
The mock is as strict as the real APIs, so a capture that ran through also shows that the mock
refuses nothing the agents send.

Per mode one JSON file: the endpoints, every header (credentials and per-session ids replaced by
a placeholder), every body path (`messages[].content[].cache_control`; arrays as `[]`, with
tool schemas and tool-call arguments left opaque), the `type` (and message `role`) values seen
at each path, each tool type's fields, the scalar settings' values, and the requests themselves
(long strings cut, schemas elided). tests/agents/test_captures.py reads them against
docs/translation-policy.md (tests/agents/parts.py names the parts). A new agent version: in
tests/agents `npm install --save-exact @anthropic-ai/claude-code@VERSION` (or @openai/codex), run
this, commit the new directory. An older version's captures stay and stay covered; to capture one
without changing the lockfile: `npm install --no-save PACKAGE@VERSION`, run this, `npm ci`.
"""

import http.client
import http.server
import json
import pathlib
import re
import sys
import tempfile
import threading

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
import agents  # noqa: E402

# Each mode runs one session per model: current model names as a real API would see them (an
# agent sends other parts for other models: Claude Code budget thinking to Haiku 4.5, adaptive
# to Sonnet 4.6; Codex other tools to a -codex model), and a gateway alias the agent does not
# know, which is what a gateway's users configure.
MODELS = {"claude": ["claude-sonnet-4-6", "claude-haiku-4-5", "gateway-alias"],
          "codex": ["gpt-5.5", "gpt-5.3-codex", "gateway-alias"]}
PACKAGE = {"claude": "claude-code", "codex": "codex"}

# Header values that are secrets or differ per run: recorded as a placeholder.
SECRET = {"authorization", "x-api-key", "cookie", "proxy-authorization"}
VOLATILE = {"content-length", "host", "x-claude-code-session-id", "session_id", "session-id",
            "conversation_id", "x-client-request-id", "x-codex-turn-metadata", "traceparent",
            "x-stainless-retry-count", "x-stainless-timeout", "x-request-id",
            "x-codex-window-id", "x-codex-installation-id", "x-codex-turn-state",
            "x-openai-subagent", "x-codex-parent-thread-id", "thread-id", "thread_id"}

# Subtrees whose inner keys are the client's data, not API fields: a tool's JSON schema, a tool
# call's arguments, a JSON-schema output format.
OPAQUE = re.compile(r"(^|\.)(input_schema|parameters|schema|properties)$|"
                    r"^messages\[\]\.content\[\]\.input$|^tools\[\]\.format\.definition$")
CUT = 160


CUT_MARK = re.compile(r"\.\.\. \[\d+ chars\]$")


ELIDED = re.compile(r"(^|\.)(input_schema|parameters)$")


def cut(v, path=""):
    """V as committed: every string over CUT characters shortened and tool schemas elided
    (idempotent: what is already cut stays as it is)."""
    if isinstance(v, str):
        if len(v) <= CUT or CUT_MARK.search(v):
            return v
        return v[:CUT] + f"... [{len(v)} chars]"
    if isinstance(v, list):
        return [cut(x, path + "[]") for x in v]
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            p = f"{path}.{k}" if path else k
            out[k] = (f"<{len(json.dumps(x))} bytes of JSON schema>"
                      if ELIDED.search(p) and isinstance(x, dict) else cut(x, p))
        return out
    return v


# Where a value is the conversation, a description or an id, not a setting: no values recorded.
NOT_SETTINGS = re.compile(r"^(messages|input|system|instructions)(\[\]|\.|$)|"
                          r"\.(description|name|text|id|call_id|user_id|arguments)$|"
                          r"^(prompt_cache_key|client_metadata|model)(\.|$)")


def walk(v, path, paths, types, values):
    """Every path under V, the `type` (and message `role`) values at each, and the scalar values
    of settings."""
    if not isinstance(v, (dict, list)) and not NOT_SETTINGS.search(path):
        values.setdefault(path, set()).add(json.dumps(v))
    if isinstance(v, dict):
        for key in ("type", "role"):
            if isinstance(v.get(key), str):
                types.setdefault(f"{path}.{key}" if key == "role" else path,
                                 set()).add(v[key])
        for k, x in v.items():
            p = f"{path}.{k}" if path else k
            paths.add(p)
            if not OPAQUE.search(p):
                walk(x, p, paths, types, values)
    elif isinstance(v, list):
        for x in v:
            walk(x, path + "[]", paths, types, values)


def tool_fields(body, tools):
    """Each tool's fields under its type (`custom` for an Anthropic tool without one); a
    namespace's inner tools under `namespace.tools[].<type>`."""
    for t in body.get("tools") or []:
        kind = t.get("type", "custom")
        tools.setdefault(kind, set()).update(t)
        if kind == "namespace":
            for inner in t.get("tools") or []:
                tools.setdefault(f"namespace.tools[].{inner.get('type', 'custom')}",
                                 set()).update(inner)


def header_value(name, value):
    if name in SECRET:
        return "<secret>"
    if name in VOLATILE:
        return "<varies>"
    return value


def summarize(agent, mode, argv, exit_code, records):
    headers, paths, types, tools, endpoints, values = {}, set(), {}, {}, [], {}
    for r in records:
        endpoints.append(f"{r['method']} {r['path']}")
        for name, value in r["headers"]:
            headers.setdefault(name, set()).add(header_value(name, value))
        if isinstance(r["body"], dict):
            walk(r["body"], "", paths, types, values)
            tool_fields(r["body"], tools)
    return {
        "agent": PACKAGE[agent],
        "version": agents.version(agent),
        "mode": mode,
        "argv": [a if not a.startswith("/") else pathlib.Path(a).name for a in argv],
        "exit": exit_code,
        "endpoints": sorted(set(endpoints)),
        "headers": {k: sorted(v) for k, v in sorted(headers.items())},
        "body_paths": sorted(paths),
        "types": {k: sorted(v) for k, v in sorted(types.items())},
        "tools": {k: sorted(v) for k, v in sorted(tools.items())},
        "values": {k: sorted(v) for k, v in sorted(values.items())},
        "requests": [dict(r, headers=[[n, header_value(n, v)] for n, v in r["headers"]],
                          body=cut(r["body"])) for r in records],
    }


class Recorder(http.server.ThreadingHTTPServer):
    """Records each request and forwards it to the mock; answers with the mock's whole answer."""
    daemon_threads = True

    def __init__(self, upstream):
        self.upstream = upstream
        self.records = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def _any(self):
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        with self.server.lock:
            self.server.records.append({"method": self.command, "path": self.path,
                                        "headers": [[k.lower(), v] for k, v in
                                                    self.headers.items()],
                                        "body": body})
        host, port = self.server.upstream.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=60)
        fwd = {k: v for k, v in self.headers.items()
               if k.lower() not in ("host", "connection", "content-length", "accept-encoding")}
        c.request(self.command, self.path, body=raw, headers=fwd)
        resp = c.getresponse()
        data = resp.read()
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(k, v)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        c.close()

    do_GET = do_POST = do_HEAD = do_PUT = do_DELETE = _any


def session(agent, mode, model, recorder):
    """One scripted tool-call session of AGENT in MODE naming MODEL: (argv, exit, said, records)."""
    with tempfile.TemporaryDirectory() as d:
        work = pathlib.Path(d) / "work"
        work.mkdir()
        (work / "note.txt").write_text("note-captured\n")
        tool, args = agents.tool_call(agent, mode, work)
        prompt = agents.prompt_calling(tool, args)
        with recorder.lock:
            recorder.records.clear()
        base = f"http://127.0.0.1:{recorder.server_address[1]}"
        p = agents.run(agent, base, model, prompt, work, mode)
        with recorder.lock:
            records = list(recorder.records)
        argv = (agents.claude_argv(model, prompt, mode) if agent == "claude"
                else agents.codex_argv(prompt, mode))
    said = "The tool said: " in p.stdout
    if p.returncode != 0 or not said:
        print((p.stdout + p.stderr)[-2000:], file=sys.stderr)
    return argv, p.returncode, said, records


def capture(agent, mode, recorder, out_dir):
    runs = [session(agent, mode, m, recorder) for m in MODELS[agent]]
    records = [r for run in runs for r in run[3]]
    exit_code = max(abs(run[1]) for run in runs)
    summary = summarize(agent, mode, runs[0][0], exit_code, records)
    summary["models"] = MODELS[agent]
    path = out_dir / f"{PACKAGE[agent]}-{summary['version']}" / f"{mode}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=1, ensure_ascii=False) + "\n")
    ok = all(run[1] == 0 and run[2] for run in runs)
    print(f"{path.relative_to(ROOT)}: {len(records)} requests over {len(runs)} sessions, "
          f"{'each ran its tool and got its result back' if ok else 'FAILED'}")
    return ok


def resummarize():
    """Rewrite every committed capture's summary from its recorded requests (after a change to
    what the summary holds; the requests themselves are not run again)."""
    for path in sorted((HERE / "captures").glob("*/*.json")):
        old = json.loads(path.read_text())
        agent = "claude" if old["agent"] == "claude-code" else "codex"
        new = summarize(agent, old["mode"], [], old["exit"], old["requests"])
        new.update(version=old["version"], argv=old["argv"], models=old.get("models"))
        path.write_text(json.dumps(new, indent=1, ensure_ascii=False) + "\n")
        print(f"{path.relative_to(ROOT)}: summary rewritten")


def main(argv):
    import os
    import subprocess
    if argv[1:] == ["--resummarize"]:
        return resummarize()
    which = argv[1:] or ["claude", "codex"]
    if not agents.installed():
        sys.exit("capture: the agents are not installed (npm ci in tests/agents)")
    trainer = os.environ.get("TRAINER_BIN")
    if not trainer:
        subprocess.run(["cargo", "build", "-q", "-p", "trainer"], cwd=ROOT, check=True)
        trainer = str(ROOT / "target" / "debug" / "trainer")
    mock = subprocess.Popen([trainer, "mock", "--listen", "127.0.0.1:0"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = mock.stderr.readline()
        if not line.startswith("mock listening on "):
            sys.exit(f"capture: the mock did not start: {line}")
        recorder = Recorder(line.split()[-1])
        threading.Thread(target=recorder.serve_forever, daemon=True).start()
        ok = True
        for agent in which:
            for mode in agents.MODES[agent]:
                ok &= capture(agent, mode, recorder, HERE / "captures")
        recorder.shutdown()
    finally:
        mock.terminate()
        mock.wait(10)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main(sys.argv)
