//! Process lifecycle and CLI: the clean exit the profile depends on, draining, validate.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

#[test]
fn livez_and_clean_exit_on_sigterm() {
    let st = Stack::start();
    let r = get(st.gateway.addr, "/livez");
    assert_eq!(r.status, 200);
    st.stop();
}

#[test]
fn sigint_exits_zero() {
    let st = Stack::start();
    st.gateway.signal(libc::SIGINT);
    let mut gw = st.gateway;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(s) = gw.child.try_wait().unwrap() {
            assert_eq!(s.code(), Some(0));
            break;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sigterm_finishes_in_flight_requests() {
    let up = raw_upstream(|_h, _b, s| {
        std::thread::sleep(Duration::from_millis(600));
        write_json(
            s,
            200,
            &json!({"id": "c", "object": "chat.completion", "created": 1, "model": "mock-gpt",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "late"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}),
        );
    });
    let gw = start_gateway(&config(up.addr, 5000));
    let addr = gw.addr;
    let t = std::thread::spawn(move || {
        post(
            addr,
            "/v1/chat/completions",
            &json!({"model": "gpt", "messages": user("hi")}),
        )
    });
    up.requests.recv_timeout(Duration::from_secs(5)).unwrap();
    let code = gw.terminate();
    let r = t.join().unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "late");
    assert_eq!(code, Some(0));
}

#[test]
fn several_workers_share_one_port() {
    let mock = start_mock();
    let mut cfg = config(mock.addr, 5000);
    cfg["workers"] = json!(4);
    let gw = start_gateway(&cfg);
    let threads: Vec<_> = (0..16)
        .map(|_| {
            let a = gw.addr;
            std::thread::spawn(move || {
                post(
                    a,
                    "/v1/chat/completions",
                    &json!({"model": "gpt", "messages": user("hi")}),
                )
                .status
            })
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), 200);
    }
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn caller_auth_headers_are_accepted() {
    let st = Stack::start();
    let body =
        serde_json::to_vec(&json!({"model": "claude", "max_tokens": 8, "messages": user("hi")}))
            .unwrap();
    for headers in [
        &[
            ("authorization", "Bearer sk-anything"),
            ("anthropic-version", "2026-10-21"),
        ][..],
        &[
            ("x-api-key", "sk-anything"),
            ("anthropic-version", "2023-06-01"),
        ][..],
        &[][..],
    ] {
        let r = request(st.gateway.addr, "POST", "/v1/messages", headers, &body);
        assert_eq!(r.status, 200, "{headers:?}");
    }
    st.stop();
}

#[test]
fn validate_reports_every_error_with_its_path() {
    let dir = tmpdir("validate");
    let bad = dir.join("bad.json");
    std::fs::write(
        &bad,
        r#"{"listen": "x", "workers": 0,
            "providers": {"p": {"kind": "grpc", "base_url": "http://h/v1"}},
            "models": {"m": {"provider": "nope"}}}"#,
    )
    .unwrap();
    let out = Command::new(gateway_bin())
        .args(["validate", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    for path in [
        "$.listen",
        "$.workers",
        "$.providers.p.kind",
        "$.providers.p.base_url",
        "$.providers.p.api_key_env",
        "$.models.m.provider",
        "$.models.m.model",
    ] {
        assert!(err.contains(path), "{path} not reported in:\n{err}");
    }

    let good = dir.join("good.json");
    std::fs::write(
        &good,
        serde_json::to_vec(&config("127.0.0.1:9".parse().unwrap(), 1000)).unwrap(),
    )
    .unwrap();
    let out = Command::new(gateway_bin())
        .args(["validate", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(gateway_bin())
        .args(["serve", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn sigterm_right_after_listening_exits_zero() {
    // The handlers are installed before the announcement, so even an immediate SIGTERM drains
    // and exits cleanly instead of killing the process.
    for _ in 0..5 {
        let gw = start_gateway(&config("127.0.0.1:9".parse().unwrap(), 1000));
        assert_eq!(gw.terminate(), Some(0));
    }
}

#[test]
fn sighup_reloads_config_and_rejects_invalid_file_whole() {
    let mock = start_mock();
    let dir = tmpdir("reload");
    let path = dir.join("config.json");
    let mut cfg = config(mock.addr, 5000);
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    let mut child = Command::new(gateway_bin())
        .arg("--config")
        .arg(&path)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let wait_for = |what: &str| loop {
        let l = rx.recv_timeout(Duration::from_secs(10)).expect(what);
        if l.contains(what) {
            return l;
        }
    };
    let addr: std::net::SocketAddr = wait_for("listening on ")
        .trim_start_matches("listening on ")
        .parse()
        .unwrap();
    let chat = |model: &str| {
        post(
            addr,
            "/v1/chat/completions",
            &json!({"model": model, "messages": user("hi")}),
        )
        .status
    };
    assert_eq!(chat("gpt-new"), 404);

    cfg["models"]["gpt-new"] = json!({"provider": "up-openai", "model": "mock-gpt"});
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    wait_for("config reloaded");
    assert_eq!(chat("gpt-new"), 200);

    std::fs::write(
        &path,
        br#"{"listen": "127.0.0.1:0", "providers": {}, "models": {"x": 1}}"#,
    )
    .unwrap();
    unsafe { libc::kill(child.id() as i32, libc::SIGHUP) };
    wait_for("config reload rejected");
    assert_eq!(chat("gpt-new"), 200, "old config keeps serving");
    assert_eq!(
        get(addr, "/v1/models").json()["data"]
            .as_array()
            .unwrap()
            .len(),
        3
    );

    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

/// The README's quick start: `examples/gateway.json` validates as shipped, and, moved to free
/// ports, serves a chat completion and a Messages answer from the trainer's mock.
#[test]
fn example_config_validates_and_serves() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gateway.json");
    let out = Command::new(gateway_bin())
        .args(["validate", "--config"])
        .arg(&example)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mock = start_mock();
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&example).unwrap()).unwrap();
    cfg["listen"] = json!("127.0.0.1:0");
    for p in cfg["providers"].as_object_mut().unwrap().values_mut() {
        p["base_url"] = json!(format!("http://{}", mock.addr));
    }
    let gw = start_gateway(&cfg);
    let r = post(
        gw.addr,
        "/v1/chat/completions",
        &json!({"model": "gpt-4o-mini", "messages": user("Hello!")}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["model"], "gpt-4o-mini");
    assert!(r.json()["choices"][0]["message"]["content"].is_string());
    let r = post(
        gw.addr,
        "/v1/messages",
        &json!({"model": "claude-haiku", "max_tokens": 16, "messages": user("Hello!")}),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["type"], "message");
    assert_eq!(gw.terminate(), Some(0));
}
