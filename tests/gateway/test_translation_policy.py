"""docs/translation-policy.md through the official SDKs, against the mock as strict as the real
APIs (it refuses what they refuse, under realistic upstream model names): the allow-listed headers
reach the upstream (a beta-gated field passes with its beta and is refused without it), translated
requests carry what the target API accepts (`max_completion_tokens` to a reasoning model, never
`temperature` with `top_p` to a current Claude model), a part without a counterpart is refused
naming it or dropped and reported, a restricted tool is never widened, and `GET /v1/models` gives
an alias's context window."""

import anthropic
import httpx
import openai
import pytest

CLAUDE = "claude-sonnet-4-6"
GPT = "gpt-5.5"


@pytest.fixture
def stack(routed_stack):
    return routed_stack({"m": None}, {
        "claude": {"provider": "m-anthropic", "model": CLAUDE,
                   "context_window": 200000, "max_output_tokens": 64000},
        "claude-on-gpt": {"provider": "m-openai", "model": GPT},
        "claude-on-gpt-dropping": {"provider": "m-openai", "model": GPT,
                                   "drop": ["tools[].defer_loading",
                                            "messages[].content[].is_error"]},
        "gpt-on-claude": {"provider": "m-anthropic", "model": CLAUDE},
        "gpt-on-claude-dropping": {"provider": "m-anthropic", "model": CLAUDE,
                                   "drop": ["top_p", "tools.web_search",
                                            "messages[].content[].image_url.detail"]},
    })


def user(text):
    return [{"role": "user", "content": text}]


def test_a_beta_reaches_the_upstream_with_the_field_it_gates(stack):
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    m = stack.anthropic.beta.messages.create(
        model="claude", max_tokens=16, messages=user("hi [[mock:frames:2]]"),
        betas=["context-management-2025-06-27"], context_management=edits)
    assert m.content[0].text.startswith("Hello")
    # Without its beta the upstream refuses the field, as Anthropic's API does.
    with pytest.raises(anthropic.BadRequestError) as e:
        stack.anthropic.messages.create(model="claude", max_tokens=16, messages=user("hi"),
                                        extra_body={"context_management": edits})
    assert "context_management" in str(e.value)


def test_a_reasoning_model_gets_max_completion_tokens(stack):
    m = stack.anthropic.messages.create(model="claude-on-gpt", max_tokens=16,
                                        messages=user("hi [[mock:frames:2]]"))
    assert m.content[0].text.startswith("Hello")


def test_deferred_tools_and_tool_errors_are_refused_or_dropped_by_name(stack):
    tools = [{"name": "Bash", "input_schema": {"type": "object"}},
             {"name": "Later", "input_schema": {"type": "object"}, "defer_loading": True}]
    messages = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash",
                                           "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": "denied", "is_error": True}]},
    ]
    with pytest.raises(anthropic.BadRequestError) as e:
        stack.anthropic.messages.create(model="claude-on-gpt", max_tokens=16,
                                        messages=messages, tools=tools)
    for part in ("tools[].defer_loading (at tools[1].defer_loading)",
                 "messages[].content[].is_error (at messages[2].content[0].is_error)"):
        assert part in str(e.value)
    r = stack.anthropic.messages.with_raw_response.create(
        model="claude-on-gpt-dropping", max_tokens=16, messages=messages, tools=tools)
    assert r.headers["x-gateway-dropped"] == \
        "messages[].content[].is_error,tools[].defer_loading"
    assert r.parse().content[0].text.startswith("Hello")


def test_temperature_with_top_p_is_refused_naming_both_or_loses_top_p(stack):
    with pytest.raises(openai.BadRequestError) as e:
        stack.openai.chat.completions.create(model="gpt-on-claude", messages=user("hi"),
                                             temperature=0.2, top_p=0.9)
    assert "top_p (at top_p and temperature together)" in str(e.value)
    r = stack.openai.chat.completions.with_raw_response.create(
        model="gpt-on-claude-dropping", messages=user("hi [[mock:frames:2]]"),
        temperature=0.2, top_p=0.9)
    assert r.headers["x-gateway-dropped"] == "top_p"
    assert r.parse().choices[0].message.content.startswith("Hello")


def test_codex_restricted_web_search_is_left_out_whole_never_widened(stack):
    tools = [{"type": "web_search", "external_web_access": False},
             {"type": "function", "name": "f", "parameters": {"type": "object"}}]
    with pytest.raises(openai.BadRequestError) as e:
        stack.openai.responses.create(model="gpt-on-claude", input="hi", tools=tools)
    assert "tools.web_search (at tools[0].external_web_access)" in str(e.value)
    r = stack.openai.responses.with_raw_response.create(
        model="gpt-on-claude-dropping", input="hi [[mock:frames:2]]", tools=tools)
    assert r.headers["x-gateway-dropped"] == "tools.web_search"
    assert r.parse().output_text.startswith("Hello")


def test_an_image_resolution_is_refused_or_dropped(stack):
    png = "data:image/png;base64,iVBORw0KGgo="
    content = [{"type": "text", "text": "what? [[mock:frames:2]]"},
               {"type": "image_url", "image_url": {"url": png, "detail": "low"}}]
    with pytest.raises(openai.BadRequestError) as e:
        stack.openai.chat.completions.create(model="gpt-on-claude",
                                             messages=[{"role": "user", "content": content}])
    assert "messages[].content[].image_url.detail" in str(e.value)
    r = stack.openai.chat.completions.with_raw_response.create(
        model="gpt-on-claude-dropping", messages=[{"role": "user", "content": content}])
    assert r.headers["x-gateway-dropped"] == "messages[].content[].image_url.detail"


def test_the_models_listing_gives_an_aliases_context_window(stack):
    models = {m.id: m for m in stack.anthropic.models.list()}
    assert (models["claude"].max_input_tokens, models["claude"].max_tokens) == (200000, 64000)
    assert models["claude-on-gpt"].max_input_tokens is None
    ids = [m.id for m in stack.openai.models.list()]
    assert "claude" in ids and "gpt-on-claude" in ids
    assert httpx.get(f"http://{stack.addr}/v1/models").json()["data"][0]["id"] == "claude"
