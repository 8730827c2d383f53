//! Process signals. SIGTERM/SIGINT only make `wait` return: the workers then drain and `main`
//! returns normally, because an instrumented (PGO or BOLT) binary writes its profile from the
//! normal exit path, which `process::exit` from a handler or an abort would skip.
//! SIGHUP re-reads the config file; a file with any error is rejected whole and the running
//! configuration stays.

use std::sync::Arc;

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

use crate::admission::limits::store::Store;
use crate::admission::limits::StoreSource;
use crate::config::{self, Snapshot};

pub struct Signals {
    rt: tokio::runtime::Runtime,
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    /// Installs the handlers. This must happen before the gateway announces that it listens:
    /// a SIGTERM that arrives earlier would otherwise kill the process with the default action,
    /// skipping the drain and the profile write.
    pub fn install() -> anyhow::Result<Signals> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _guard = rt.enter();
        let term = signal(SignalKind::terminate())?;
        let int = signal(SignalKind::interrupt())?;
        let hup = signal(SignalKind::hangup())?;
        drop(_guard);
        Ok(Signals { rt, term, int, hup })
    }

    /// Returns on SIGTERM or SIGINT; reloads the config on SIGHUP (its limits shared through the
    /// `store` started at startup, if any).
    pub fn wait(
        self,
        cfg_tx: &watch::Sender<Arc<Snapshot>>,
        config_path: &str,
        store: Option<&Arc<Store>>,
    ) {
        let Signals {
            rt,
            mut term,
            mut int,
            mut hup,
        } = self;
        rt.block_on(async {
            loop {
                tokio::select! {
                    _ = term.recv() => break,
                    _ = int.recv() => break,
                    _ = hup.recv() => reload(cfg_tx, config_path, store),
                }
            }
        });
        eprintln!("shutting down: draining in-flight requests");
    }
}

fn reload(cfg_tx: &watch::Sender<Arc<Snapshot>>, config_path: &str, store: Option<&Arc<Store>>) {
    match config::load_file(config_path, StoreSource::Running(store)) {
        Ok(c) => {
            for w in &c.warnings {
                eprintln!("config warning: {w}");
            }
            let _ = cfg_tx.send(Arc::new(c.snapshot));
            eprintln!("config reloaded");
        }
        Err(errs) => {
            for e in errs {
                eprintln!("config reload rejected: {e}");
            }
        }
    }
}
