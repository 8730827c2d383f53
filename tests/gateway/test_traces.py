"""OpenTelemetry traces of the gateway, decoded by the official OTLP definitions
(`opentelemetry-proto`, PyPI): a collector on loopback receives the gateway's OTLP/HTTP protobuf
exports, an upstream on loopback records the `traceparent` each attempt carries, and the OpenAI
SDK is the client. One span per request (SERVER, the child of the client's span) and one per
upstream attempt (CLIENT, the parent of the upstream's `traceparent`), GenAI attributes; a
collector that is down costs requests nothing and its spans are counted as dropped.
"""

import http.server
import importlib.util
import json
import os
import pathlib
import tempfile
import threading
import time
import urllib.request

import pytest

# This directory's conftest (another one is `conftest` on the path): its process helpers.
_spec = importlib.util.spec_from_file_location(
    "gateway_conftest", pathlib.Path(__file__).with_name("conftest.py"))
_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_conftest)
_start, _stop = _conftest._start, _conftest._stop

trace_pb2 = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


def _serve(handler):
    srv = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def collector():
    """An OTLP/HTTP collector: every export decoded as an ExportTraceServiceRequest."""
    got = []

    class H(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["content-length"]))
            req = trace_pb2.ExportTraceServiceRequest()
            req.ParseFromString(body)
            got.append((self.path, self.headers["content-type"], req))
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = _serve(H)
    return srv, got


def upstream():
    """An OpenAI-style upstream answering every chat completion, recording each `traceparent`."""
    seen = []

    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            seen.append(self.headers.get("traceparent"))
            body = json.dumps({
                "id": "c", "object": "chat.completion", "created": 1, "model": "up-model-2025",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
            }).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = _serve(H)
    return srv, seen


def closed_port(srv):
    """`srv`'s port once it is shut down: nothing listens there any more."""
    port = srv.server_port
    srv.shutdown()
    srv.server_close()
    return port


def attrs(span):
    out = {}
    for kv in span.attributes:
        v = kv.value
        if v.HasField("array_value"):
            out[kv.key] = [e.string_value for e in v.array_value.values]
        else:
            out[kv.key] = v.string_value if v.HasField("string_value") else v.int_value
    return out


def gateway(binaries, d, up_port, collector_port, ratio=1.0):
    gateway_bin, _ = binaries
    cfg = {
        "listen": "127.0.0.1:0", "workers": 1,
        "metrics": {"listen": "127.0.0.1:0"},
        "providers": {"up": {"kind": "openai", "base_url": f"http://127.0.0.1:{up_port}",
                             "api_key_env": "TRACES_UP_KEY"}},
        "models": {"gpt": {"provider": "up", "model": "up-model"}},
        "tracing": {"endpoint": f"http://127.0.0.1:{collector_port}/v1/traces",
                    "sample_ratio": ratio, "service_name": "gw-under-test"},
    }
    path = pathlib.Path(d) / "config.json"
    path.write_text(json.dumps(cfg))
    env = dict(os.environ, TRACES_UP_KEY="sk-up")
    proc, addr, lines = _start([gateway_bin, "--config", str(path)], "listening on ", env=env)
    metrics = next(l.split("metrics listening on ")[1].strip() for l in lines
                   if l.startswith("metrics listening on "))
    return proc, addr, lines, metrics


def spans_of(got, n, timeout=5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        spans = [s for _, _, r in got for rs in r.resource_spans for ss in rs.scope_spans
                 for s in ss.spans]
        if len(spans) >= n:
            return spans
        time.sleep(0.05)
    return spans


def test_spans_follow_the_client_trace_and_reach_the_upstream(binaries):
    import openai

    col, got = collector()
    up, seen = upstream()
    with tempfile.TemporaryDirectory() as d:
        proc, addr, _, _ = gateway(binaries, d, up.server_port, col.server_port)
        try:
            client = openai.OpenAI(base_url=f"http://{addr}/v1", api_key="sk-client",
                                   max_retries=0)
            tp = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
            r = client.chat.completions.create(
                model="gpt", messages=[{"role": "user", "content": "hi"}],
                extra_headers={"traceparent": tp})
            assert r.choices[0].message.content == "ok"
            # A request without traceparent: a trace of its own, still sampled (ratio 1).
            client.chat.completions.create(model="gpt", messages=[{"role": "user", "content": "x"}])
            spans = spans_of(got, 4)
        finally:
            assert _stop(proc) == 0
    col.shutdown()
    up.shutdown()

    path, ctype, req = got[0]
    assert path == "/v1/traces" and ctype == "application/x-protobuf"
    res = {kv.key: kv.value.string_value for kv in req.resource_spans[0].resource.attributes}
    assert res["service.name"] == "gw-under-test"
    assert len(spans) == 4, spans
    server = [s for s in spans if s.kind == s.SPAN_KIND_SERVER]
    client_spans = [s for s in spans if s.kind == s.SPAN_KIND_CLIENT]
    assert len(server) == 2 and len(client_spans) == 2

    first = next(s for s in server if s.trace_id.hex() == CLIENT_TRACE)
    assert first.parent_span_id.hex() == CLIENT_SPAN
    assert first.name == "chat gpt"
    a = attrs(first)
    assert a["gen_ai.operation.name"] == "chat"
    assert a["gen_ai.request.model"] == "gpt"
    assert a["gen_ai.provider.name"] == "openai"
    assert a["gen_ai.response.model"] == "up-model"
    assert a["gen_ai.usage.input_tokens"] == 7
    assert a["gen_ai.usage.output_tokens"] == 3
    assert a["gen_ai.response.finish_reasons"] == ["stop"]
    assert first.status.code == first.status.STATUS_CODE_OK
    assert first.end_time_unix_nano > first.start_time_unix_nano > 0

    attempt = next(s for s in client_spans if s.trace_id.hex() == CLIENT_TRACE)
    assert attempt.parent_span_id == first.span_id
    b = attrs(attempt)
    assert b["server.address"] == "127.0.0.1"
    assert b["server.port"] == up.server_port
    assert b["gen_ai.provider.name"] == "openai"
    assert first.start_time_unix_nano <= attempt.start_time_unix_nano
    assert attempt.end_time_unix_nano <= first.end_time_unix_nano
    # The upstream saw the attempt span as its parent, in the client's trace.
    assert seen[0] == f"00-{CLIENT_TRACE}-{attempt.span_id.hex()}-01"

    other = next(s for s in server if s.trace_id.hex() != CLIENT_TRACE)
    assert len(other.parent_span_id) == 0
    assert seen[1].split("-")[1] == other.trace_id.hex()


def test_unsampled_requests_pass_the_client_traceparent_and_a_dead_collector_drops(binaries):
    import openai

    up, seen = upstream()
    dead = closed_port(collector()[0])
    with tempfile.TemporaryDirectory() as d:
        # A tiny ratio: the request without a sampled parent is not sampled; one whose client
        # sampled it is (the client's decision is kept), and its export fails (no collector).
        proc, addr, _, metrics = gateway(binaries, d, up.server_port, dead, ratio=1e-9)
        try:
            client = openai.OpenAI(base_url=f"http://{addr}/v1", api_key="sk-client",
                                   max_retries=0)
            unsampled = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-00"
            client.chat.completions.create(
                model="gpt", messages=[{"role": "user", "content": "hi"}],
                extra_headers={"traceparent": unsampled})
            assert seen[-1] == unsampled
            t0 = time.time()
            client.chat.completions.create(
                model="gpt", messages=[{"role": "user", "content": "hi"}],
                extra_headers={"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"})
            assert time.time() - t0 < 1.0, "a dead collector never delays a request"
            assert seen[-1] != unsampled and seen[-1].endswith("-01")
            # Its two spans are dropped when the export fails, and counted.
            deadline = time.time() + 5
            text = ""
            while time.time() < deadline:
                text = urllib.request.urlopen(f"http://{metrics}/metrics").read().decode()
                if "gateway_trace_spans_dropped_total 2" in text:
                    break
                time.sleep(0.1)
            assert "gateway_trace_spans_dropped_total 2" in text, text
            assert 'gateway_trace_exports_total{result="failed"} 1' in text
        finally:
            assert _stop(proc) == 0
    up.shutdown()


def test_a_failed_request_has_error_spans(binaries):
    import openai

    col, got = collector()
    dead_port = closed_port(upstream()[0])
    with tempfile.TemporaryDirectory() as d:
        proc, addr, _, _ = gateway(binaries, d, dead_port, col.server_port)
        try:
            client = openai.OpenAI(base_url=f"http://{addr}/v1", api_key="sk-client",
                                   max_retries=0)
            with pytest.raises(openai.APIStatusError) as err:
                client.chat.completions.create(
                    model="gpt", messages=[{"role": "user", "content": "hi"}])
            spans = spans_of(got, 2)
        finally:
            assert _stop(proc) == 0
    col.shutdown()

    status = err.value.status_code
    assert status >= 500
    assert len(spans) == 2, spans
    server = next(s for s in spans if s.kind == s.SPAN_KIND_SERVER)
    attempt = next(s for s in spans if s.kind == s.SPAN_KIND_CLIENT)
    a = attrs(server)
    assert server.status.code == server.status.STATUS_CODE_ERROR
    assert a["error.type"] == str(status)
    assert a["http.response.status_code"] == status
    assert a["gen_ai.request.model"] == "gpt"
    assert "gen_ai.usage.input_tokens" not in a
    b = attrs(attempt)
    assert attempt.status.code == attempt.status.STATUS_CODE_ERROR
    assert b["error.type"] == str(status)
    assert b["server.port"] == dead_port
    assert "gen_ai.response.model" not in b
    assert attempt.parent_span_id == server.span_id
