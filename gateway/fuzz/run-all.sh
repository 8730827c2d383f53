#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 20) with a small seed corpus; prints one summary
# line per target. Needs a nightly toolchain and `cargo install cargo-fuzz`.
set -uo pipefail
cd "$(dirname "$0")"
secs=${1:-20}
root=../..
mkdir -p corpus
for t in json_head translate_request config_parse usage_scan; do mkdir -p corpus/$t; done
for f in "$root"/shapes/payloads/*.json; do
  [ -e "$f" ] || continue
  for t in json_head translate_request usage_scan; do cp "$f" corpus/$t/; done
done
mkdir -p corpus/config_parse corpus/translate_response corpus/sse_stream
printf '%s' '{"listen":"127.0.0.1:0","providers":{"o":{"kind":"openai","base_url":"http://h:1","api_key_env":"K"}},"models":{"m":{"provider":"o","model":"u"}},"keys":[{"id":"a","key_env":"A","models":["m"]}],"limits":{"default_key":{"requests_per_minute":5}},"metrics":{"listen":"127.0.0.1:0"},"access_log":{"path":"/tmp/x"}}' > corpus/config_parse/seed.json
printf '%s' '{"id":"c","object":"chat.completion","model":"up-gpt","choices":[{"index":0,"message":{"role":"assistant","content":"hi","tool_calls":[{"id":"t","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}' > corpus/translate_response/chat.json
printf '%s' '{"id":"m","type":"message","role":"assistant","model":"up-claude","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"t","name":"f","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":1}}' > corpus/translate_response/messages.json
printf '\x07%s' 'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}

data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{\"a"}}]}}]}

data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":2}}

data: [DONE]

' > corpus/sse_stream/chat
printf '\x0b%s' 'event: message_start
data: {"type":"message_start","message":{"id":"m","model":"up-claude","usage":{"input_tokens":3,"output_tokens":1}}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}

event: message_stop
data: {"type":"message_stop"}

' > corpus/sse_stream/messages
fail=0
for t in json_head translate_request translate_response sse_stream config_parse usage_scan; do
  log=$(mktemp)
  if cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$secs" -rss_limit_mb=2048 >"$log" 2>&1; then
    echo "$t: ok, $(grep -Eo '#[0-9]+.*(DONE|pulse).*' "$log" | tail -1)"
  else
    echo "$t: FAILED (log $log)"; grep -E 'panicked|ERROR|SUMMARY' "$log" | head -5; fail=1
  fi
done
exit $fail
