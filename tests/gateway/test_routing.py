"""Fallbacks of an alias with several deployments, seen through the official OpenAI and Anthropic
SDKs: each deployment is its own mock, the failing one started with directives of its own (a
status, `retry-after`, a reset connection, a stall past the timeout, a stream that breaks after
its first byte). The clients are made with `max_retries=0`, so every retry seen is the gateway's.

The split by weight, least-loaded, the retry budget and cooldowns are in gateway/tests/routing.rs.
"""

import time

import pytest

GREETING = "Hello from the mock upstream."


def expected(frames):
    return GREETING + "".join(f" word{k}" for k in range(2, frames + 1))


def pool(first, second):
    """`pool`: provider FIRST tried first, SECOND only when FIRST fails (priorities)."""
    return {"pool": {"deployments": [{"provider": first, "model": "up-1", "priority": 0},
                                     {"provider": second, "model": "up-2", "priority": 1}]}}


def chat(client, stream, frames=3):
    msgs = [{"role": "user", "content": f"Hi [[mock:frames:{frames}]]"}]
    if not stream:
        r = client.chat.completions.create(model="pool", messages=msgs)
        assert r.model == "pool"
        return r.choices[0].message.content
    text = ""
    for chunk in client.chat.completions.create(model="pool", messages=msgs, stream=True):
        assert chunk.model == "pool"
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    return text


def messages(client, stream, frames=3):
    msgs = [{"role": "user", "content": f"Hi [[mock:frames:{frames}]]"}]
    if not stream:
        m = client.messages.create(model="pool", max_tokens=64, messages=msgs)
        assert m.model == "pool"
        return m.content[0].text
    with client.messages.stream(model="pool", max_tokens=64, messages=msgs) as s:
        text = "".join(s.text_stream)
        assert s.get_final_message().model == "pool"
    return text


@pytest.mark.parametrize("stream", [False, True])
def test_500_falls_back(routed_stack, stream):
    st = routed_stack({"bad": "[[mock:status:500]]", "good": None}, pool("bad-openai", "good-openai"))
    assert chat(st.openai, stream) == expected(3)
    assert (st.requests("bad"), st.requests("good")) == (1, 1)


def test_429_with_retry_after_falls_back_and_rests_the_deployment(routed_stack):
    st = routed_stack({"bad": "[[mock:status:429]][[mock:retry_after:30]]", "good": None},
                      pool("bad-anthropic", "good-anthropic"))
    assert messages(st.anthropic, False) == expected(3)
    assert messages(st.anthropic, True) == expected(3)
    # retry-after 30: the second request went straight to the other deployment.
    assert (st.requests("bad"), st.requests("good")) == (1, 2)


@pytest.mark.parametrize("stream", [False, True])
def test_reset_connection_falls_back(routed_stack, stream):
    st = routed_stack({"bad": "[[mock:reset]]", "good": None}, pool("bad-openai", "good-openai"))
    assert chat(st.openai, stream) == expected(3)
    assert (st.requests("bad"), st.requests("good")) == (1, 1)


@pytest.mark.parametrize("stream", [False, True])
def test_stall_past_the_timeout_falls_back(routed_stack, stream):
    st = routed_stack({"bad": "[[mock:stall]]", "good": None},
                      pool("bad-anthropic", "good-anthropic"), upstream_ms=500)
    t = time.monotonic()
    assert messages(st.anthropic, stream) == expected(3)
    assert time.monotonic() - t >= 0.5
    assert (st.requests("bad"), st.requests("good")) == (1, 1)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("client", ["chat", "messages"])
def test_client_falls_back_from_openai_to_anthropic_and_back(routed_stack, client, stream):
    def call(st):
        if client == "chat":
            return chat(st.openai, stream, 4)
        return messages(st.anthropic, stream, 4)
    # One way the first attempt is native and the fallback translated, the other way round.
    for first, second, status in [("x-openai", "y-anthropic", 503),
                                  ("x-anthropic", "y-openai", 529)]:
        st = routed_stack({"x": f"[[mock:status:{status}]]", "y": None}, pool(first, second))
        assert call(st) == expected(4)
        assert (st.requests("x"), st.requests("y")) == (1, 1)


def test_stream_failing_after_its_first_byte_is_not_retried(routed_stack):
    import anthropic
    import openai
    st = routed_stack({"bad": "[[mock:fail_mid_stream]]", "good": None},
                      {**pool("bad-openai", "good-openai"),
                       "mpool": pool("bad-anthropic", "good-anthropic")["pool"]})
    with pytest.raises(openai.APIError):
        for _ in st.openai.chat.completions.create(
                model="pool", stream=True, messages=[{"role": "user", "content": "Hi"}]):
            pass
    with pytest.raises(anthropic.APIStatusError):
        with st.anthropic.messages.stream(model="mpool", max_tokens=64,
                                          messages=[{"role": "user", "content": "Hi"}]) as s:
            for _ in s.text_stream:
                pass
    assert (st.requests("bad"), st.requests("good")) == (2, 0)


def test_every_deployment_failing_answers_the_last_error_in_the_clients_dialect(routed_stack):
    import anthropic
    import openai
    st = routed_stack({"x": "[[mock:status:500]]", "y": "[[mock:status:503]]"},
                      pool("x-openai", "y-anthropic"))
    with pytest.raises(openai.InternalServerError) as e:
        chat(st.openai, False)
    assert e.value.status_code == 503 and "mock: status directive 503" in str(e.value)
    with pytest.raises(anthropic.APIStatusError) as e:
        messages(st.anthropic, True)
    assert e.value.status_code == 503
    assert (st.requests("x"), st.requests("y")) == (2, 2)
