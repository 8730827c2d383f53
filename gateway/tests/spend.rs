//! Usage and cost against the real gateway and mock: every answer's tokens are known at its end
//! (a native chat stream asks its upstream for usage and drops the chunk when the client did not
//! ask), priced deployments' cost is in the access log, the metrics and a buffered answer's
//! `x-gateway-cost-usd`.

mod common;
mod posture_support;

use posture_support as ps;
use serde_json::{json, Value};

fn chat_stream(model: &str, stream_options: Option<Value>) -> Value {
    let mut b = json!({"model": model, "stream": true, "max_tokens": 16,
                       "messages": [{"role": "user", "content": "hello [[mock:frames:4]]"}]});
    if let Some(o) = stream_options {
        b["stream_options"] = o;
    }
    b
}

/// Chunks of a chat stream that carry a usage object.
fn usage_chunks(r: &common::Resp) -> usize {
    r.events()
        .iter()
        .filter(|(_, d)| d != "[DONE]")
        .filter(|(_, d)| {
            let v: Value = serde_json::from_str(d).unwrap();
            v["usage"].is_object()
        })
        .count()
}

/// Dollars from the decimal text the gateway writes (nine decimals), as nanodollars.
fn nano(usd: &str) -> u64 {
    let (whole, frac) = usd.split_once('.').unwrap();
    assert_eq!(frac.len(), 9, "{usd}");
    whole.parse::<u64>().unwrap() * 1_000_000_000 + frac.parse::<u64>().unwrap()
}

/// The access log's `cost_usd` (read back as a float by serde_json), as nanodollars.
fn logged_nano(v: &Value) -> u64 {
    (v.as_f64().unwrap() * 1e9).round() as u64
}

#[test]
fn usage_on_every_answer_and_its_cost() {
    let mock = common::start_mock();
    let dir = common::tmpdir("spend");
    let log = dir.join("access.jsonl");
    let mut cfg = ps::config(
        mock.addr,
        json!({"metrics": {"listen": "127.0.0.1:0"}, "access_log": {"path": log},
               "spend": {"cost_header": true}}),
    );
    cfg["models"]["gpt"]["price"] = json!({"input": 2.5, "output": 10, "cached_input": 1.25});
    let gw = ps::start(&cfg, &[]);
    assert!(
        gw.startup
            .iter()
            .any(|l| l.contains("no price for claude (up-anthropic/mock-claude)")),
        "{:?}",
        gw.startup
    );
    let a = gw.addr;
    let path = "/v1/chat/completions";

    // 0: native chat stream, no stream_options: no usage chunk reaches the client.
    let r = ps::post_with(a, path, &[], &chat_stream("gpt", None));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(usage_chunks(&r), 0, "{}", r.text());
    assert!(r.text().ends_with("data: [DONE]\n\n"));
    assert_eq!(
        r.header("x-gateway-cost-usd"),
        None,
        "a stream's cost is not a header"
    );
    // 1: the client asked: its usage chunk is there.
    let r = ps::post_with(
        a,
        path,
        &[],
        &chat_stream("gpt", Some(json!({"include_usage": true}))),
    );
    assert_eq!(usage_chunks(&r), 1, "{}", r.text());
    // 2: the client said no: the gateway asked all the same, and dropped the chunk.
    let r = ps::post_with(
        a,
        path,
        &[],
        &chat_stream("gpt", Some(json!({"include_usage": false}))),
    );
    assert_eq!(usage_chunks(&r), 0, "{}", r.text());
    // 3: buffered, priced: the header.
    let r = ps::post_with(a, path, &[], &ps::chat("gpt", "hi"));
    assert_eq!(r.status, 200);
    let header = r
        .header("x-gateway-cost-usd")
        .expect("cost header")
        .to_owned();
    // 4: bridged stream (chat client, anthropic upstream), unpriced.
    let r = ps::post_with(a, path, &[], &chat_stream("claude", None));
    assert_eq!(r.status, 200);
    assert_eq!(usage_chunks(&r), 0, "{}", r.text());
    assert_eq!(r.header("x-gateway-cost-usd"), None);
    // 5: native responses stream, priced.
    let r = ps::post_with(
        a,
        "/v1/responses",
        &[],
        &json!({"model": "gpt", "input": "hi", "stream": true}),
    );
    assert_eq!(r.status, 200);

    let lines = ps::log_lines(&log, 6);
    assert_eq!(lines.len(), 6, "{lines:#?}");
    let mut spent = 0;
    for (n, l) in lines.iter().enumerate() {
        let (i, o) = (l["tokens_in"].as_u64(), l["tokens_out"].as_u64());
        assert!(i.unwrap_or(0) > 0 && o.unwrap_or(0) > 0, "line {n}: {l}");
        if n == 4 {
            assert!(l.get("cost_usd").is_none(), "{l}");
            continue;
        }
        // The log's cost is the price applied to its tokens (no cached tokens from the mock).
        let want = i.unwrap() * 2_500 + o.unwrap() * 10_000;
        let got = logged_nano(&l["cost_usd"]);
        assert_eq!(got, want, "line {n}: {l}");
        if n == 3 {
            assert_eq!(nano(&header), want);
        }
        spent += got;
    }
    // The stream without stream_options has its output counted: 4 frames of the mock.
    assert_eq!(lines[0]["tokens_out"], lines[1]["tokens_out"]);

    let m = gw.scrape();
    let line = m
        .lines()
        .find(|l| l.starts_with("gateway_spend_usd_total{key=\"none\",model=\"gpt\"} "))
        .unwrap_or_else(|| panic!("{m}"));
    assert_eq!(nano(line.rsplit(' ').next().unwrap()), spent, "{m}");
    assert!(
        !m.contains("model=\"claude\"} "),
        "an unpriced alias spends nothing: {m}"
    );
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn prices_are_checked() {
    let mut cfg = common::config("127.0.0.1:9".parse().unwrap(), 1000);
    cfg["models"]["gpt"]["price"] = json!({"input": "cheap", "output": 1});
    let (ok, out) = common::validate(&cfg);
    assert!(!ok);
    assert!(out.contains("$.models.gpt.price.input"), "{out}");
}

#[test]
fn a_spent_budget_refuses_in_the_clients_dialect() {
    let mock = common::start_mock();
    let dir = common::tmpdir("budget");
    let log = dir.join("access.jsonl");
    let mut cfg = ps::config(
        mock.addr,
        json!({
            "metrics": {"listen": "127.0.0.1:0"}, "access_log": {"path": log},
            "keys": [{"id": "k", "key_env": "GW_BUDGET_KEY"}, {"id": "free", "key_env": "GW_BUDGET_FREE"}],
            "budgets": {"keys": {"k": {"usd": 0.002, "period": "day"}}},
        }),
    );
    cfg["models"]["gpt"]["price"] = json!({"input": 2.5, "output": 10});
    let gw = ps::start(
        &cfg,
        &[("GW_BUDGET_KEY", "sk-k"), ("GW_BUDGET_FREE", "sk-free")],
    );
    let auth = [("authorization", "Bearer sk-k")];
    let path = "/v1/chat/completions";
    let mut served = 0;
    let refused = loop {
        let r = ps::post_with(gw.addr, path, &auth, &ps::chat("gpt", "hello there"));
        match r.status {
            200 => served += 1,
            429 => break r,
            s => panic!("{s}: {}", r.text()),
        }
        assert!(served < 100, "the budget never ran out");
    };
    assert!(served > 1, "{served}");
    let e = refused.json();
    assert_eq!(e["error"]["type"], "insufficient_quota", "{e}");
    assert_eq!(e["error"]["code"], "insufficient_quota");
    let msg = e["error"]["message"].as_str().unwrap();
    assert!(msg.contains("budget") && !msg.contains("rate"), "{msg}");
    assert!(
        refused
            .header("retry-after")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 60
    );
    // The Anthropic dialect's refusal (the same alias, translated).
    let r = ps::post_with(
        gw.addr,
        "/v1/messages",
        &auth,
        &ps::messages("gpt", "hi", false),
    );
    assert_eq!(r.status, 429);
    let e = r.json();
    assert_eq!(e["type"], "error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("budget exceeded"),
        "{e}"
    );
    // A stream is refused before it starts; an unpriced alias and another key are not held.
    let r = ps::post_with(gw.addr, path, &auth, &chat_stream("gpt", None));
    assert_eq!(r.status, 429);
    let r = ps::post_with(gw.addr, path, &auth, &ps::chat("claude", "hi"));
    assert_eq!(r.status, 200);
    let free = [("authorization", "Bearer sk-free")];
    let r = ps::post_with(gw.addr, path, &free, &ps::chat("gpt", "hi"));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-gateway-cost-usd"),
        None,
        "the header is opt-in (spend.cost_header)"
    );

    // What the key spent: its budget, overshot by at most the last request admitted.
    let m = gw.scrape();
    let spent = m
        .lines()
        .find(|l| l.starts_with("gateway_spend_usd_total{key=\"k\",model=\"gpt\"} "))
        .map(|l| nano(l.rsplit(' ').next().unwrap()))
        .unwrap();
    let lines = ps::log_lines(&log, served + 5);
    let last = lines
        .iter()
        .filter(|l| l["status"] == 200 && l["model"] == "gpt")
        .map(|l| logged_nano(&l["cost_usd"]))
        .max()
        .unwrap();
    assert!(
        spent >= 2_000_000 && spent < 2_000_000 + last,
        "spent {spent} nanodollars of 2000000"
    );
    let over: Vec<_> = lines.iter().filter(|l| l["status"] == 429).collect();
    assert_eq!(over.len(), 3);
    assert!(over.iter().all(|l| l["over_budget"] == "key"), "{over:?}");
    assert_eq!(gw.terminate(), Some(0));
}
