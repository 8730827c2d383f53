//! https upstreams: the gateway verifies the upstream's certificate against the built-in roots
//! plus `upstream_ca_files`, and fails closed (502, nothing sent) when it cannot.
//!
//! Fixtures (tests/fixtures/tls): a test CA and a certificate for `localhost` / 127.0.0.1 signed by
//! it, both valid for 100 years, made once with openssl (EC P-256); the CA's key was discarded.

mod common;

use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};

use common::*;
use rustls_pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(name)
}

/// An https upstream answering every request with a canned chat completion; sends each request
/// it decrypts (head, body) on the channel.
fn tls_upstream() -> (u16, mpsc::Receiver<(String, Vec<u8>)>) {
    let certs: Vec<CertificateDer> = CertificateDer::pem_file_iter(fixture("upstream.pem"))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(fixture("upstream.key")).unwrap();
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let cfg = Arc::new(cfg);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for tcp in l.incoming() {
            let Ok(tcp) = tcp else { break };
            let (cfg, tx) = (cfg.clone(), tx.clone());
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(cfg).unwrap();
                let mut tls = rustls::StreamOwned::new(conn, tcp);
                while let Some((head, body)) = read_request(&mut tls) {
                    let _ = tx.send((head, body));
                    write_json(
                        &mut tls,
                        200,
                        &json!({"id": "chatcmpl-tls", "object": "chat.completion", "created": 1,
                            "model": "up-model", "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "over TLS"}}],
                            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
                    );
                }
            });
        }
    });
    (port, rx)
}

fn gateway_for(port: u16, ca_files: Option<Vec<PathBuf>>) -> Proc {
    let mut cfg = json!({
        "listen": "127.0.0.1:0",
        "workers": 1,
        "providers": {"secure": {"kind": "openai", "base_url": format!("https://localhost:{port}"),
                                 "api_key_env": "GW_TEST_OPENAI_KEY"}},
        "models": {"gpt": {"provider": "secure", "model": "up-model"}}
    });
    if let Some(files) = ca_files {
        cfg["upstream_ca_files"] = json!(files);
    }
    start_gateway(&cfg)
}

fn chat() -> Value {
    json!({"model": "gpt", "messages": [{"role": "user", "content": "hi"}]})
}

#[test]
fn https_upstream_trusted_through_upstream_ca_files() {
    let (port, seen) = tls_upstream();
    let gw = gateway_for(port, Some(vec![fixture("ca.pem")]));
    for _ in 0..3 {
        let r = post(gw.addr, "/v1/chat/completions", &chat());
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert_eq!(v["choices"][0]["message"]["content"], "over TLS");
        assert_eq!(v["model"], "gpt");
    }
    let (head, body) = seen.recv().unwrap();
    assert!(head.starts_with("POST /v1/chat/completions "), "{head}");
    let h = head.to_ascii_lowercase();
    assert!(h.contains("authorization: bearer sk-test-openai"), "{head}");
    assert!(h.contains(&format!("host: localhost:{port}")), "{head}");
    let u: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(u["model"], "up-model");
    assert_eq!(gw.terminate(), Some(0));
}

#[test]
fn untrusted_upstream_certificate_is_a_502_and_nothing_is_sent() {
    let (port, seen) = tls_upstream();
    // Only the built-in public roots: the test CA is not among them.
    let gw = gateway_for(port, None);
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let body = if path == "/v1/messages" {
            json!({"model": "gpt", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
        } else {
            chat()
        };
        let r = post(gw.addr, path, &body);
        assert_eq!(r.status, 502, "{}", r.text());
        let msg = assert_error_shape(path, &r);
        assert!(msg.contains("invalid peer certificate"), "{msg}");
    }
    assert!(
        seen.try_recv().is_err(),
        "a request went to an unverified upstream"
    );
    assert_eq!(gw.terminate(), Some(0));
}
