//! JSON files as the engine reads and writes them: a read names what the file is and where, and a
//! write is pretty-printed with a final newline and lands whole (a stage never leaves half a
//! manifest or marker behind).

use anyhow::{Context, Result};
use serde_json::Value;
use std::path::Path;

/// Read `path` as JSON; `what` names it in the error ("the training record").
pub fn read(path: &Path, what: &str) -> Result<Value> {
    let data =
        std::fs::read(path).with_context(|| format!("reading the {what} {}", path.display()))?;
    serde_json::from_slice(&data)
        .with_context(|| format!("the {what} {} is not JSON", path.display()))
}

/// Write `v` pretty-printed to `path`, through a temporary file renamed over it.
pub fn write(path: &Path, v: &Value) -> Result<()> {
    let text = serde_json::to_string_pretty(v)? + "\n";
    write_atomically(path, text.as_bytes()).with_context(|| format!("writing {}", path.display()))
}

/// `data` written to `PATH.tmp`, then renamed to `path`.
pub fn write_atomically(path: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, data)?;
    std::fs::rename(&tmp, path)
}

/// The string at `path` inside `v` (`["trained_on", "source_sha256"]`).
pub fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(*k))?.as_str()
}
