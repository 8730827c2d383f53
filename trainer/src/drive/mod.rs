//! Driving a gateway binary with the training shapes and checking every answer: the shapes as data
//! (`shapes`), what the mock answers and so what a response must be (`check`), the keep-alive load
//! driver (`load`), a shape's gateway config and environment (`config`), a gateway process
//! (`gateway`), the gateway's training command (`train`), a throwaway redis-server for the
//! shared-limits shapes (`redis`), and the stand-in gateway of the trainer's own tests
//! (`fake_gateway`).

pub mod check;
pub mod config;
pub mod fake_gateway;
pub mod gateway;
pub mod load;
pub mod redis;
pub mod shapes;
pub mod train;

use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::SystemTime;

/// A scratch directory under $TMPDIR.
pub fn tempdir(prefix: &str) -> Result<PathBuf> {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let d = std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    Ok(d)
}
