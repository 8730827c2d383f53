//! `trainer fake-gateway` (hidden): a stand-in for an instrumented gateway in the trainer's own
//! tests. It reads the gateway config's `listen`, answers every dialect as the mock does (so the
//! training checks pass), serves `/livez`, and on SIGTERM writes a fake profile to
//! `LLVM_PROFILE_FILE` (`%p`/`%m` expanded) of `FAKE_GATEWAY_PROFILE_BYTES` bytes (default 4096;
//! 0 writes none, like a binary built without instrumentation), then exits with
//! `FAKE_GATEWAY_EXIT` (default 0). `FAKE_GATEWAY_ABORT` set: abort (SIGABRT) instead of exiting;
//! `FAKE_GATEWAY_STATUS=NNN`: answer every request with that status. With `limits.store` in the
//! config it serves `/metrics` saying the store is up and answering (`FAKE_GATEWAY_STORE_DOWN`
//! set: down), as a gateway of the `shared-limits` posture does.

use anyhow::{Context, Result};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct FakeGatewayArgs {
    #[arg(long)]
    pub config: PathBuf,
}

pub fn run(args: FakeGatewayArgs) -> Result<()> {
    let text = std::fs::read(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    let cfg: serde_json::Value = serde_json::from_slice(&text)?;
    let listen = cfg
        .get("listen")
        .and_then(|l| l.as_str())
        .context("config has no listen")?
        .parse()?;
    let force_status = std::env::var("FAKE_GATEWAY_STATUS")
        .ok()
        .and_then(|v| v.parse().ok());
    let server = crate::mock::MockServer::start_with(listen, 1, force_status)?;
    if cfg["limits"].get("store").is_some() {
        let metrics: std::net::SocketAddr = cfg["metrics"]["listen"]
            .as_str()
            .context("config has no metrics.listen")?
            .parse()?;
        let bound = serve_store_metrics(
            metrics,
            std::env::var_os("FAKE_GATEWAY_STORE_DOWN").is_none(),
        )?;
        // As the gateway says it, before its main listener's line.
        eprintln!("metrics listening on {bound}");
    }
    eprintln!("listening on {}", server.addr());
    crate::mock::wait_for_termination()?;
    drop(server);
    if std::env::var_os("FAKE_GATEWAY_ABORT").is_some() {
        std::process::abort();
    }
    let bytes: usize = std::env::var("FAKE_GATEWAY_PROFILE_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4096);
    if let Ok(pattern) = std::env::var("LLVM_PROFILE_FILE") {
        if bytes > 0 {
            let path = pattern
                .replace("%p", &std::process::id().to_string())
                .replace("%m", "1234567890");
            std::fs::write(&path, vec![0xa5u8; bytes])
                .with_context(|| format!("writing {path}"))?;
        }
    }
    let code: i32 = std::env::var("FAKE_GATEWAY_EXIT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    std::process::exit(code)
}

/// Answers every connection on `addr` with the store's metrics, `up` or not; returns the address
/// bound (`addr` may have port 0).
fn serve_store_metrics(addr: std::net::SocketAddr, up: bool) -> Result<std::net::SocketAddr> {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
    let bound = l.local_addr()?;
    let body = format!(
        "gateway_limits_store_up {}\ngateway_limits_store_calls_total{{result=\"ok\"}} {}\n",
        u8::from(up),
        u8::from(up)
    );
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            // The whole request head, so that closing after the answer never cuts the client off.
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    Ok(bound)
}
