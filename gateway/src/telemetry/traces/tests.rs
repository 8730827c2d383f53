//! The spans as a collector reads them: encoded into two workers' buffers, put behind one export
//! header and decoded field by field (every length checked), with their attributes.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::spans;
use super::{Attempts, Finished, Trace};
use crate::checker::Checker;

/// A protobuf message's fields, checked to be well formed (every length consumed exactly).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Field<'a> {
    Varint(u64),
    Fixed(u64),
    Len(&'a [u8]),
}

fn fields(mut b: &[u8]) -> Vec<(u64, Field<'_>)> {
    fn varint(b: &mut &[u8]) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let (c, rest) = b.split_first().expect("a varint runs past its message");
            *b = rest;
            v |= u64::from(c & 0x7f) << shift;
            if c & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }
    let mut out = Vec::new();
    while !b.is_empty() {
        let key = varint(&mut b);
        let f = match key & 7 {
            0 => Field::Varint(varint(&mut b)),
            1 => {
                let (v, rest) = b.split_at(8);
                b = rest;
                Field::Fixed(u64::from_le_bytes(v.try_into().unwrap()))
            }
            2 => {
                let n = varint(&mut b) as usize;
                assert!(n <= b.len(), "a length past its message");
                let (v, rest) = b.split_at(n);
                b = rest;
                Field::Len(v)
            }
            w => panic!("wire type {w}"),
        };
        out.push((key >> 3, f));
    }
    out
}

fn len<'a>(f: &Field<'a>) -> &'a [u8] {
    match f {
        Field::Len(b) => b,
        other => panic!("not a length-delimited field: {other:?}"),
    }
}

/// A span's name, kind, attributes (key to a value's text) and status code.
type Decoded = (String, u64, Vec<(String, String)>, u64);

fn decode_span(b: &[u8]) -> Decoded {
    let (mut name, mut kind, mut attrs, mut status) = (String::new(), 0, Vec::new(), 0);
    for (n, f) in fields(b) {
        match n {
            5 => name = String::from_utf8(len(&f).to_vec()).unwrap(),
            6 => kind = if let Field::Varint(v) = f { v } else { 0 },
            9 => {
                let kv = fields(len(&f));
                let key = String::from_utf8(len(&kv[0].1).to_vec()).unwrap();
                let any = fields(len(&kv[1].1));
                let value = match any[0] {
                    (1, Field::Len(s)) => String::from_utf8(s.to_vec()).unwrap(),
                    (3, Field::Varint(v)) => v.to_string(),
                    (5, Field::Len(arr)) => fields(arr)
                        .iter()
                        .map(|(_, v)| {
                            String::from_utf8(len(&fields(len(v))[0].1).to_vec()).unwrap()
                        })
                        .collect::<Vec<_>>()
                        .join(","),
                    other => panic!("value {other:?}"),
                };
                attrs.push((key, value));
            }
            15 => {
                for (n, f) in fields(len(&f)) {
                    if let (3, Field::Varint(v)) = (n, f) {
                        status = v;
                    }
                }
            }
            _ => {}
        }
    }
    (name, kind, attrs, status)
}

/// An export's service name and spans.
fn decode(body: &[u8]) -> (String, Vec<Decoded>) {
    let top = fields(body);
    assert_eq!(top.len(), 1);
    let (mut service, mut spans) = (String::new(), Vec::new());
    for (n, f) in fields(len(&top[0].1)) {
        match n {
            1 => {
                let attr = fields(len(&fields(len(&f))[0].1));
                service = String::from_utf8(len(&fields(len(&attr[1].1))[0].1).to_vec()).unwrap();
            }
            2 => {
                for (n, f) in fields(len(&f)) {
                    if n == 2 {
                        spans.push(decode_span(len(&f)));
                    }
                }
            }
            _ => panic!("field {n} of ResourceSpans"),
        }
    }
    (service, spans)
}

fn get<'a>(attrs: &'a [(String, String)], key: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Spans encoded into two workers' buffers and put behind one header decode as one
/// well-formed export: a failed attempt and the serving one, a long model name and a long
/// finish reason (the paths that do not go through the stack), and an error.
#[test]
fn spans_encode_as_one_well_formed_export() {
    use crate::provider::upstream::{Provider, ProviderKind};
    let long_model = "m".repeat(150);
    let top = serde_json::json!({
        "providers": {"a": {}, "b": {}},
        "models": {"pool": {"deployments": [
            {"provider": "a", "model": "small", "priority": 0},
            {"provider": "b", "model": long_model, "priority": 1}]}},
    });
    let mut providers = std::collections::HashMap::new();
    providers.insert(
        "a".to_owned(),
        Arc::new(Provider::stub("a", ProviderKind::OpenAi)),
    );
    providers.insert(
        "b".to_owned(),
        Arc::new(Provider::stub("b", ProviderKind::Anthropic)),
    );
    let mut c = Checker::default();
    let routes = crate::routing::section(&mut c, top.as_object().unwrap(), &providers);
    assert!(c.errors.is_empty(), "{:?}", c.errors);
    let route = routes["pool"].clone();
    let mut trace = Trace {
        trace_id: [7; 16],
        span_id: [1; 8],
        parent: None,
        attempts: Attempts::default(),
        finish_reason: Some("r".repeat(300).into()),
    };
    trace.attempt(0, Duration::from_millis(1));
    trace.attempt_failed("server_error", Duration::from_millis(2));
    trace.attempt(1, Duration::from_millis(3));
    let finished = |trace: &Trace, status, error| {
        let mut buf = Vec::new();
        spans::request_spans(
            &mut buf,
            &Finished {
                trace,
                start: SystemTime::now(),
                duration: Duration::from_millis(9),
                upstream_end: Some(Duration::from_millis(8)),
                operation: "chat",
                route: Some(&route),
                input_tokens: Some(300),
                output_tokens: Some(2),
                status,
                error,
            },
        );
        buf
    };
    let ok = finished(&trace, 200, None);
    trace.finish_reason = Some("stop".into());
    let failed = finished(&trace, 502, Some("502"));
    let (service, spans) = decode(&spans::request("svc", &[ok, failed]));
    assert_eq!(service, "svc");
    assert_eq!(spans.len(), 6);
    let (name, kind, attrs, status) = &spans[0];
    assert_eq!((name.as_str(), *kind, *status), ("chat pool", 2, 1));
    assert_eq!(get(attrs, "gen_ai.request.model"), Some("pool"));
    assert_eq!(get(attrs, "gen_ai.provider.name"), Some("anthropic"));
    assert_eq!(
        get(attrs, "gen_ai.response.model"),
        Some(long_model.as_str())
    );
    assert_eq!(
        get(attrs, "gen_ai.response.finish_reasons"),
        Some("r".repeat(300).as_str())
    );
    assert_eq!(get(attrs, "gen_ai.usage.input_tokens"), Some("300"));
    assert_eq!(get(attrs, "http.response.status_code"), Some("200"));
    let (name, kind, attrs, status) = &spans[1];
    assert_eq!((name.as_str(), *kind, *status), ("chat small", 3, 2));
    assert_eq!(get(attrs, "error.type"), Some("server_error"));
    assert_eq!(get(attrs, "server.address"), Some("h"));
    assert_eq!(get(attrs, "gen_ai.response.model"), None);
    let (name, _, attrs, status) = &spans[2];
    assert_eq!((name, *status), (&format!("chat {long_model}"), 1));
    assert_eq!(get(attrs, "gen_ai.usage.output_tokens"), Some("2"));
    assert_eq!(
        get(attrs, "gen_ai.response.model"),
        Some(long_model.as_str())
    );
    let (_, _, attrs, status) = &spans[3];
    assert_eq!(*status, 2);
    assert_eq!(get(attrs, "gen_ai.response.finish_reasons"), Some("stop"));
    assert_eq!(get(attrs, "error.type"), Some("502"));
    let (_, _, attrs, status) = &spans[5];
    assert_eq!(*status, 2);
    assert_eq!(get(attrs, "error.type"), Some("502"));
    assert_eq!(get(attrs, "gen_ai.usage.input_tokens"), None);

    // The worker's cache holds a route while a config does; the next miss lets go of it.
    let cached = Arc::downgrade(&route);
    drop((routes, route));
    assert!(cached.upgrade().is_some());
    let mut c = Checker::default();
    let reloaded = crate::routing::section(&mut c, top.as_object().unwrap(), &providers);
    let mut buf = Vec::new();
    spans::request_spans(
        &mut buf,
        &Finished {
            trace: &trace,
            start: SystemTime::now(),
            duration: Duration::from_millis(9),
            upstream_end: None,
            operation: "chat",
            route: Some(&reloaded["pool"]),
            input_tokens: None,
            output_tokens: None,
            status: 200,
            error: None,
        },
    );
    assert!(cached.upgrade().is_none());
}
