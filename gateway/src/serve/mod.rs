//! Workers, accept loops and routing.
//!
//! Each worker is an OS thread with its own current-thread runtime, its own `SO_REUSEPORT`
//! listener (the kernel spreads connections across them) and its own upstream connection pool, so
//! the request path never touches a lock or a cache line another worker writes. Connection tasks are
//! `spawn_local`ed, which lets per-worker state be `Rc`/`RefCell` instead of atomics.
//!
//! [`run`] binds the listeners, starts the workers ([`worker`]) and waits for signals
//! ([`signals`]); a worker accepts connections and routes each request, and the request path of the
//! three dialects is [`proxy`], which starts with the native route's minimal parse
//! ([`crate::dialect::body_head`]) and ends in the upstream call with its fallbacks ([`attempts`]). [`paths`] lists the request paths
//! and postures as data, for the training coverage gate.

pub mod attempts;
pub mod conn;
mod native_body;
pub mod paths;
pub mod proxy;
pub mod signals;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::watch;

use crate::config::Config;
use crate::exchange::access_log;
use crate::serve::signals::Signals;
use crate::telemetry::metrics;

fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_reuse_address(true)?;
    sock.set_reuse_port(true)?;
    sock.set_nodelay(true)?;
    sock.set_nonblocking(true)?;
    sock.bind(&addr.into())
        .with_context(|| format!("cannot bind {addr}"))?;
    sock.listen(1024)?;
    Ok(sock.into())
}

/// Descriptors the gateway needs beyond its connections: listeners, the metrics listener, the
/// access log, the runtime's epoll and event descriptors.
const SPARE_DESCRIPTORS: u64 = 64;

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (a soft limit of 1,024, a common default,
/// caps a worker at about 500 streams: each holds a client and an upstream connection) and
/// warns when even the hard limit is below what `max_connections` needs. Out of descriptors the
/// accept loop still logs `accept failed` and backs off; this only makes it rarer.
fn raise_descriptor_limit(max_connections: u64) {
    let need = 2 * max_connections + SPARE_DESCRIPTORS;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read or write the one struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        eprintln!(
            "descriptor limit: cannot read it: {}",
            std::io::Error::last_os_error()
        );
        return;
    }
    let (soft, hard) = (lim.rlim_cur, lim.rlim_max);
    let mut now = soft;
    if soft < hard {
        lim.rlim_cur = hard;
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } == 0 {
            now = hard;
            eprintln!("descriptor limit: raised from {soft} to {hard}");
        } else {
            eprintln!(
                "descriptor limit: cannot raise {soft} to {hard}: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    if now < need {
        eprintln!(
            "warning: descriptor limit {now} is below the {need} that max_connections {max_connections} \
             needs (a client and an upstream connection per stream, and {SPARE_DESCRIPTORS} spare); \
             past it the workers cannot accept new connections; raise the hard limit \
             (systemd LimitNOFILE=, ulimit -Hn) or lower max_connections"
        );
    }
}

pub fn run(config: Config, config_path: String) -> anyhow::Result<()> {
    let startup = config.startup.clone();
    raise_descriptor_limit((startup.max_connections_per_worker * startup.workers) as u64);
    let signals = Signals::install()?;
    // Bind every listener before announcing: a port-0 address is resolved by the first bind and
    // the others join it, so all workers share one port.
    let first = bind(startup.addr)?;
    let addr = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..startup.workers {
        listeners.push(bind(addr)?);
    }

    access_log::init(&startup.access_log)?;
    if let Some(t) = &startup.tracing {
        crate::telemetry::traces::init(t)?;
    }
    if let Some(m) = &startup.metrics {
        let a = metrics::exposition::serve(m.listen)?;
        eprintln!("metrics listening on {a}");
    }
    crate::alloc::spawn_housekeeping();

    let (stop_tx, stop_rx) = watch::channel(false);
    let (cfg_tx, cfg_rx) = watch::channel(Arc::new(config.snapshot));
    let mut handles = Vec::with_capacity(listeners.len());
    for (i, l) in listeners.into_iter().enumerate() {
        let stop = stop_rx.clone();
        let cfg = cfg_rx.clone();
        let startup = startup.clone();
        handles.push(
            std::thread::Builder::new()
                .name(format!("gw-worker-{i}"))
                .spawn(move || worker::run(l, stop, cfg, &startup))?,
        );
    }
    eprintln!("listening on {addr}");

    signals.wait(&cfg_tx, &config_path, startup.store.as_ref());
    let _ = stop_tx.send(true);
    let mut failed = None;
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => failed = Some(e),
            Err(_) => failed = Some(anyhow::anyhow!("a worker panicked")),
        }
    }
    // The last snapshot's leases go back to the store (dropping the limits spawns the calls).
    drop((cfg_tx, cfg_rx));
    if let Some(s) = &startup.store {
        s.close();
    }
    access_log::flush();
    crate::telemetry::traces::export_once();
    match failed {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
