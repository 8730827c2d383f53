"""The official OpenAI and Anthropic SDKs, pointed at the gateway unchanged.

Every call goes through a native route and a translated one: `gpt` is served by an openai-kind
upstream (native for chat and responses), `claude` by an anthropic-kind upstream (native for
messages). The mock answers "Hello from the mock upstream. word2 ... wordN" in N frames, or one
`get_weather({"city": "Paris"})` call when the prompt carries [[mock:tool_call]].
"""

import json

import pytest

GREETING = "Hello from the mock upstream."
MODELS = ["gpt", "claude"]
CHAT_TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
MSG_TOOLS = [{"name": "get_weather", "description": "Weather for a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
RESP_TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather for a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def expected(frames):
    return GREETING + "".join(f" word{k}" for k in range(2, frames + 1))


# ---- chat.completions ----

@pytest.mark.parametrize("model", MODELS)
def test_chat_create(openai_client, model):
    r = openai_client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Hi [[mock:frames:3]]"}])
    assert r.model == model
    assert r.choices[0].message.content == expected(3)
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == 3
    assert r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + 3


@pytest.mark.parametrize("model", MODELS)
def test_chat_create_tool_call(openai_client, model):
    r = openai_client.chat.completions.create(
        model=model, tools=CHAT_TOOLS,
        messages=[{"role": "user", "content": "Weather in Paris? [[mock:tool_call]]"}])
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id


@pytest.mark.parametrize("model", MODELS)
def test_chat_stream(openai_client, model):
    stream = openai_client.chat.completions.create(
        model=model, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Hi [[mock:frames:6]]"}])
    text, finish, usage = "", None, None
    for chunk in stream:
        assert chunk.model == model
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            assert chunk.choices == []
            usage = chunk.usage
    assert text == expected(6)
    assert finish == "stop"
    assert usage.completion_tokens == 6 and usage.prompt_tokens > 0


@pytest.mark.parametrize("model", MODELS)
def test_chat_stream_tool_call(openai_client, model):
    stream = openai_client.chat.completions.create(
        model=model, stream=True, tools=CHAT_TOOLS,
        messages=[{"role": "user", "content": "Weather? [[mock:tool_call]]"}])
    name, args, finish = "", "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        for tc in chunk.choices[0].delta.tool_calls or []:
            assert tc.index == 0
            name += tc.function.name or ""
            args += tc.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert name == "get_weather"
    assert json.loads(args) == {"city": "Paris"}
    assert finish == "tool_calls"


def test_chat_multi_turn_with_tool_result(openai_client):
    # History with a tool round trip, translated to Messages for the anthropic upstream.
    r = openai_client.chat.completions.create(
        model="claude",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "user", "content": "Thanks [[mock:frames:2]]"},
        ], tools=CHAT_TOOLS)
    assert r.choices[0].message.content == expected(2)


def test_chat_unknown_model_is_404(openai_client):
    import openai
    with pytest.raises(openai.NotFoundError):
        openai_client.chat.completions.create(
            model="nope", messages=[{"role": "user", "content": "x"}])


@pytest.mark.parametrize("model", MODELS)
def test_chat_upstream_error_carried_over(openai_client, model):
    import openai
    with pytest.raises(openai.RateLimitError):
        openai_client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "[[mock:status:429]]"}])


@pytest.mark.parametrize("model", MODELS)
def test_chat_stream_mid_stream_failure_raises(openai_client, model):
    import openai
    with pytest.raises(openai.APIError):
        for _ in openai_client.chat.completions.create(
                model=model, stream=True,
                messages=[{"role": "user", "content": "[[mock:fail_mid_stream]]"}]):
            pass


# ---- messages ----

@pytest.mark.parametrize("model", MODELS)
def test_messages_create(anthropic_client, model):
    m = anthropic_client.messages.create(
        model=model, max_tokens=64, system="Be brief.",
        messages=[{"role": "user", "content": "Hi [[mock:frames:4]]"}])
    assert m.model == model
    assert m.role == "assistant"
    assert m.content[0].type == "text"
    assert m.content[0].text == expected(4)
    assert m.stop_reason == "end_turn"
    assert m.usage.output_tokens == 4
    assert m.usage.input_tokens > 0


@pytest.mark.parametrize("model", MODELS)
def test_messages_create_tool_use(anthropic_client, model):
    m = anthropic_client.messages.create(
        model=model, max_tokens=64, tools=MSG_TOOLS,
        messages=[{"role": "user", "content": "Weather? [[mock:tool_call]]"}])
    assert m.stop_reason == "tool_use"
    block = next(b for b in m.content if b.type == "tool_use")
    assert block.name == "get_weather"
    assert block.input == {"city": "Paris"}
    assert block.id


@pytest.mark.parametrize("model", MODELS)
def test_messages_stream(anthropic_client, model):
    with anthropic_client.messages.stream(
            model=model, max_tokens=64,
            messages=[{"role": "user", "content": "Hi [[mock:frames:5]]"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == expected(5)
    assert final.model == model
    assert final.content[0].text == expected(5)
    assert final.stop_reason == "end_turn"
    assert final.usage.output_tokens == 5
    assert final.usage.input_tokens > 0


@pytest.mark.parametrize("model", MODELS)
def test_messages_stream_tool_use(anthropic_client, model):
    with anthropic_client.messages.stream(
            model=model, max_tokens=64, tools=MSG_TOOLS,
            messages=[{"role": "user", "content": "Weather? [[mock:tool_call]]"}]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    block = next(b for b in final.content if b.type == "tool_use")
    assert block.name == "get_weather"
    assert block.input == {"city": "Paris"}


def test_messages_multi_turn_with_tool_result(anthropic_client):
    m = anthropic_client.messages.create(
        model="gpt", max_tokens=64, system="Be brief.", tools=MSG_TOOLS,
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "text", "text": "Thanks [[mock:frames:2]]"}]},
        ])
    assert m.content[0].text == expected(2)


@pytest.mark.parametrize("model", MODELS)
def test_messages_errors(anthropic_client, model):
    import anthropic
    with pytest.raises(anthropic.NotFoundError):
        anthropic_client.messages.create(model="nope", max_tokens=8,
                                         messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.InternalServerError):
        anthropic_client.messages.create(model=model, max_tokens=8,
                                         messages=[{"role": "user", "content": "[[mock:status:500]]"}])


@pytest.mark.parametrize("model", MODELS)
def test_messages_stream_mid_stream_failure_raises(anthropic_client, model):
    import anthropic
    with pytest.raises(anthropic.APIStatusError):
        with anthropic_client.messages.stream(
                model=model, max_tokens=64,
                messages=[{"role": "user", "content": "[[mock:fail_mid_stream]]"}]) as stream:
            for _ in stream:
                pass


# ---- responses ----

@pytest.mark.parametrize("model", MODELS)
def test_responses_create(openai_client, model):
    r = openai_client.responses.create(model=model, instructions="Be brief.",
                                       input="Hi [[mock:frames:3]]")
    assert r.model == model
    assert r.status == "completed"
    assert r.output_text == expected(3)
    assert r.usage.output_tokens == 3
    assert r.usage.input_tokens > 0


@pytest.mark.parametrize("model", MODELS)
def test_responses_create_function_call(openai_client, model):
    r = openai_client.responses.create(model=model, tools=RESP_TOOLS,
                                       input="Weather? [[mock:tool_call]]")
    call = next(o for o in r.output if o.type == "function_call")
    assert call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id


@pytest.mark.parametrize("model", MODELS)
def test_responses_stream(openai_client, model):
    stream = openai_client.responses.create(model=model, stream=True,
                                            input=[{"role": "user", "content": "Hi [[mock:frames:5]]"}])
    text, seqs, types, final = "", [], [], None
    for ev in stream:
        types.append(ev.type)
        seqs.append(ev.sequence_number)
        if ev.type == "response.output_text.delta":
            text += ev.delta
        if ev.type == "response.completed":
            final = ev.response
    assert text == expected(5)
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert final.model == model
    assert final.output_text == expected(5)
    assert final.usage.output_tokens == 5


@pytest.mark.parametrize("model", MODELS)
def test_responses_stream_function_call(openai_client, model):
    stream = openai_client.responses.create(model=model, stream=True, tools=RESP_TOOLS,
                                            input="Weather? [[mock:tool_call]]")
    args, final = "", None
    for ev in stream:
        if ev.type == "response.function_call_arguments.delta":
            args += ev.delta
        if ev.type == "response.completed":
            final = ev.response
    assert json.loads(args) == {"city": "Paris"}
    call = next(o for o in final.output if o.type == "function_call")
    assert call.name == "get_weather"


def test_responses_multi_turn_with_function_output(openai_client):
    r = openai_client.responses.create(
        model="claude", instructions="Be brief.", tools=RESP_TOOLS,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather",
             "arguments": "{\"city\": \"Paris\"}"},
            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            {"role": "user", "content": "Thanks [[mock:frames:2]]"},
        ])
    assert r.output_text == expected(2)


@pytest.mark.parametrize("model", MODELS)
def test_responses_stream_mid_stream_failure_ends_in_error_event(openai_client, model):
    types = [ev.type for ev in openai_client.responses.create(
        model=model, stream=True, input="[[mock:fail_mid_stream]]")]
    assert types[-1] == "error"
    assert "response.completed" not in types


# ---- models ----

def test_models_list(openai_client):
    ids = sorted(m.id for m in openai_client.models.list())
    assert ids == ["claude", "gpt"]


# ---- the SDKs' accumulating stream helpers ----

@pytest.mark.parametrize("model", MODELS)
def test_chat_stream_helper(openai_client, model):
    with openai_client.chat.completions.stream(model=model, messages=[{"role":"user","content":"Hi [[mock:frames:3]]"}], tools=CHAT_TOOLS) as s:
        for _ in s: pass
        final = s.get_final_completion()
    assert final.choices[0].message.content == expected(3)

@pytest.mark.parametrize("model", MODELS)
def test_chat_stream_helper_tool(openai_client, model):
    with openai_client.chat.completions.stream(model=model, messages=[{"role":"user","content":"[[mock:tool_call]]"}], tools=CHAT_TOOLS) as s:
        for _ in s: pass
        final = s.get_final_completion()
    tc = final.choices[0].message.tool_calls[0]
    assert tc.function.name == "get_weather" and json.loads(tc.function.arguments) == {"city":"Paris"}

@pytest.mark.parametrize("model", MODELS)
def test_responses_stream_helper(openai_client, model):
    with openai_client.responses.stream(model=model, input="Hi [[mock:frames:3]]") as s:
        for _ in s: pass
        final = s.get_final_response()
    assert final.output_text == expected(3)

@pytest.mark.parametrize("model", MODELS)
def test_responses_stream_helper_tool(openai_client, model):
    with openai_client.responses.stream(model=model, input="[[mock:tool_call]]", tools=RESP_TOOLS) as s:
        for _ in s: pass
        final = s.get_final_response()
    call = next(o for o in final.output if o.type == "function_call")
    assert json.loads(call.arguments) == {"city":"Paris"}


# ---- images, through every dialect to both upstream kinds ----

# A 1x1 PNG.
PNG_B64 = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg==")
PNG_DATA_URL = f"data:image/png;base64,{PNG_B64}"


@pytest.mark.parametrize("model", MODELS)
def test_chat_with_image(openai_client, model):
    r = openai_client.chat.completions.create(model=model, messages=[{"role": "user", "content": [
        {"type": "text", "text": "What is this? [[mock:frames:2]]"},
        {"type": "image_url", "image_url": {"url": PNG_DATA_URL, "detail": "auto"}}]}])
    assert r.choices[0].message.content == expected(2)


@pytest.mark.parametrize("model", MODELS)
def test_messages_with_image(anthropic_client, model):
    m = anthropic_client.messages.create(model=model, max_tokens=16, messages=[{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
        {"type": "text", "text": "What are these? [[mock:frames:2]]"}]}])
    assert m.content[0].text == expected(2)


@pytest.mark.parametrize("model", MODELS)
def test_responses_with_image(openai_client, model):
    r = openai_client.responses.create(model=model, input=[{"role": "user", "content": [
        {"type": "input_text", "text": "What is this? [[mock:frames:2]]"},
        {"type": "input_image", "image_url": PNG_DATA_URL, "detail": "auto"}]}])
    assert r.output_text == expected(2)


def test_untranslatable_part_is_a_dialect_error(anthropic_client, openai_client):
    import anthropic
    import openai
    with pytest.raises(anthropic.BadRequestError, match="document"):
        anthropic_client.messages.create(model="gpt", max_tokens=8, messages=[{"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}])
    with pytest.raises(openai.BadRequestError, match="input_audio"):
        openai_client.chat.completions.create(model="claude", messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}]}])
