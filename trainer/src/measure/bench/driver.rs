//! The bench's load: the trainer's load driver (`crate::drive::load`) on its own OS thread pinned to the
//! rig CPU, run twice back to back — a warm-up, then the measurement window — with the CPU
//! counters read on that thread at the window's edges, right before the window's run starts and
//! right after its last response is in.

use crate::drive::load;
use crate::host::procfs;
use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use std::net::SocketAddr;

use std::time::{Duration, Instant};

/// Longest a single request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
pub struct Target {
    pub addr: SocketAddr,
    /// `/v1/chat/completions`, `/v1/messages` or `/v1/responses`.
    pub path: String,
    pub body: Bytes,
    /// Headers beyond the JSON content type (the `keys` posture's caller key).
    pub headers: Vec<(String, String)>,
}

/// CPU counters read at one edge of a window.
#[derive(Clone, Debug, Default)]
pub struct Snap {
    pub gateway: Option<procfs::ProcCpu>,
    pub mock: u64,
    pub me: u64,
    pub gw_core: Option<procfs::CpuTimes>,
    pub rig_core: Option<procfs::CpuTimes>,
}

/// Whose counters to read.
#[derive(Clone, Copy, Debug)]
pub struct Watch {
    pub gateway: Option<u32>,
    pub mock: u32,
    /// (gateway cpu, rig cpu) when pinned.
    pub cores: Option<(usize, usize)>,
}

fn snap(w: &Watch) -> Result<Snap> {
    Ok(Snap {
        gateway: w.gateway.map(procfs::proc_cpu).transpose()?,
        mock: procfs::cpu_ticks(w.mock).unwrap_or(0),
        me: procfs::cpu_ticks(std::process::id()).unwrap_or(0),
        gw_core: w.cores.and_then(|(g, _)| procfs::cpu_times(g)),
        rig_core: w.cores.and_then(|(_, r)| procfs::cpu_times(r)),
    })
}

pub struct Measured {
    pub warm: load::Outcome,
    /// The window's run; its `elapsed` is the window's length.
    pub window: load::Outcome,
    pub before: Snap,
    pub after: Snap,
    /// Peak RSS (KiB) of the watched gateway at the end of the window.
    pub gateway_rss_kib: Option<u64>,
}

/// Warm up for `warmup`, then measure one window of `window` against `target`.
pub fn measure(
    target: &Target,
    connections: usize,
    warmup: Duration,
    window: Duration,
    watch: Watch,
    check: load::Check,
) -> Result<Measured> {
    let mut request = load::Request::post_json(&target.path, target.body.clone());
    for (k, v) in &target.headers {
        request = request.header(k, v);
    }
    if target.path == "/v1/messages" {
        request = request.header("anthropic-version", "2023-06-01");
    }
    let addr = target.addr;
    std::thread::Builder::new()
        .name("bench-load".into())
        .spawn(move || -> Result<Measured> {
            if let Some((_, rig)) = watch.cores {
                super::pin::pin_current_thread(rig)?;
            }
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let opts = |until: Instant| {
                let mut o = load::Options::new(addr, connections.max(1), load::Stop::Until(until));
                o.timeout = Some(REQUEST_TIMEOUT);
                o
            };
            let warm = if warmup.is_zero() {
                load::Outcome::default()
            } else {
                rt.block_on(load::run(
                    &opts(Instant::now() + warmup),
                    &request,
                    check.clone(),
                ))
            };
            let before = snap(&watch)?;
            let window = rt.block_on(load::run(
                &opts(Instant::now() + window),
                &request,
                check.clone(),
            ));
            let after = snap(&watch)?;
            let gateway_rss_kib = watch.gateway.map(procfs::peak_rss_kib).transpose()?;
            Ok(Measured {
                warm,
                window,
                before,
                after,
                gateway_rss_kib,
            })
        })
        .context("spawning the load thread")?
        .join()
        .map_err(|_| anyhow!("the load thread panicked"))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn measures_a_window_against_a_local_server() {
        // A tiny keep-alive HTTP server answering `{}` to everything.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { break };
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut have = Vec::new();
                    loop {
                        let n = match s.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        have.extend_from_slice(&buf[..n]);
                        // One request = head + content-length bytes of body ("{}").
                        while let Some(end) = have.windows(4).position(|w| w == b"\r\n\r\n") {
                            if have.len() < end + 4 + 2 {
                                break;
                            }
                            have.drain(..end + 4 + 2);
                            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}");
                        }
                    }
                });
            }
        });
        let target = Target {
            addr,
            path: "/v1/chat/completions".into(),
            body: Bytes::from_static(b"{}"),
            headers: Vec::new(),
        };
        let watch = Watch {
            gateway: Some(std::process::id()),
            mock: std::process::id(),
            cores: None,
        };
        let m = measure(
            &target,
            2,
            Duration::from_millis(100),
            Duration::from_millis(300),
            watch,
            Arc::new(|status, body: &[u8]| {
                if status == 200 && body == b"{}" {
                    Ok(())
                } else {
                    Err(format!("status {status}"))
                }
            }),
        )
        .unwrap();
        assert_eq!(m.window.failed, 0, "{:?}", m.window.first_failure);
        assert!(m.window.ok > 0 && m.warm.ok > 0);
        assert!(m.window.elapsed >= Duration::from_millis(300));
        assert!(m.gateway_rss_kib.unwrap() > 0);
        assert!(m.after.me >= m.before.me);
    }
}
