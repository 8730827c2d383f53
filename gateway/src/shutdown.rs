//! Process signals. SIGTERM/SIGINT only make `wait` return: the workers then drain and `main`
//! returns normally, because an instrumented (PGO or BOLT) binary writes its profile from the
//! normal exit path, which `process::exit` from a handler or an abort would skip.
//! SIGHUP re-reads the config file; a file with any error is rejected whole and the running
//! configuration stays.

use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::config::{self, Snapshot};

pub fn wait(cfg_tx: &watch::Sender<Arc<Snapshot>>, config_path: &str) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let mut hup = signal(SignalKind::hangup())?;
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                _ = hup.recv() => match config::load_file(config_path) {
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
                },
            }
        }
        eprintln!("shutting down: draining in-flight requests");
        anyhow::Ok(())
    })
}
