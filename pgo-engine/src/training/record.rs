//! The training record (`pgo-engine train --record`): what a training left and the machine it ran
//! on, and what the training command said of its own workload (its report, `PGO_REPORT`). The
//! manifest of a fresh profile copies it (`pinned::manifest`), the freshness check reads its
//! machine and host, the proof marker its workloads.

use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value};
use std::path::Path;

use crate::json_file;

pub const RECORD_SCHEMA: u64 = 1;

/// The fields of a training command's report that the engine reads; the rest of the report is
/// kept as it is. Every field is optional: a command may report nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Workload {
    /// What was trained, by name (the gateway: its shapes).
    pub workloads: Vec<String>,
    /// The workload deliberately left out of training, on which a holdout gate measures; the
    /// proof refuses a marker whose holdout is among the trained workloads.
    pub holdout: Option<String>,
    /// How many of the binary's outputs the command checked (the gateway: responses).
    pub checked: Option<u64>,
}

impl Workload {
    /// Read from a report (or a manifest's training section): `workloads` (the pinned manifests
    /// of the gateway written before the engine was split out call them `shapes`), `holdout`,
    /// `checked` (`requests_checked` there). A field of the wrong type is an error.
    pub fn read(v: &Value) -> Result<Workload> {
        if !v.is_object() {
            bail!("is not a JSON object");
        }
        let list = v.get("workloads").or_else(|| v.get("shapes"));
        let workloads = match list {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|w| match w.as_str() {
                    Some(n) if !n.is_empty() => Ok(n.to_owned()),
                    _ => Err(anyhow!("a workload is not a name: {w}")),
                })
                .collect::<Result<_>>()?,
            Some(other) => bail!("\"workloads\" is not a list of names: {other}"),
        };
        let holdout = match v.get("holdout") {
            None | Some(Value::Null) => None,
            Some(Value::String(h)) if !h.is_empty() => Some(h.clone()),
            Some(other) => bail!("\"holdout\" is not a name: {other}"),
        };
        let checked = match v.get("checked").or_else(|| v.get("requests_checked")) {
            None | Some(Value::Null) => None,
            Some(n) => Some(
                n.as_u64()
                    .ok_or_else(|| anyhow!("\"checked\" is not a count: {n}"))?,
            ),
        };
        if let Some(h) = &holdout {
            if workloads.contains(h) {
                bail!("the holdout {h} is among the trained workloads");
            }
        }
        Ok(Workload {
            workloads,
            holdout,
            checked,
        })
    }

    /// As a manifest's `training` section and the marker record it.
    pub fn to_json(&self) -> Value {
        json!({
            "workloads": self.workloads,
            "holdout": self.holdout,
            "checked": self.checked,
        })
    }
}

/// A training record as read back.
#[derive(Debug, Clone)]
pub struct Record {
    pub profile_kind: String,
    pub profile_files: u64,
    pub profile_bytes: u64,
    /// `host::load::MachineLoad` or null.
    pub machine: Value,
    /// `host::load::Host`.
    pub host: Value,
    pub workload: Workload,
}

impl Record {
    /// Read a record; the workload's fields are its `workload`'s (the command's report).
    pub fn read(path: &Path) -> Result<Record> {
        let v = json_file::read(path, "training record")?;
        let count = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| anyhow!("the training record {} has no count {k:?}", path.display()))
        };
        let report = match v.get("workload") {
            Some(Value::Null) | None => &Value::Object(Default::default()),
            Some(w) => w,
        };
        let workload = Workload::read(report).map_err(|e| {
            anyhow!(
                "the training record {}: its workload report {e}",
                path.display()
            )
        })?;
        Ok(Record {
            profile_kind: json_file::str_at(&v, &["profile_kind"])
                .unwrap_or("")
                .to_owned(),
            profile_files: count("profile_files")?,
            profile_bytes: count("profile_bytes")?,
            machine: v.get("machine").cloned().unwrap_or(Value::Null),
            host: v.get("host").cloned().unwrap_or(Value::Null),
            workload,
        })
    }

    /// The share of the machine's CPU that other work used while it trained.
    pub fn other_cpu_pct(&self) -> Option<f64> {
        self.machine["other_cpu_pct"].as_f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_names_its_workloads_or_nothing() {
        let w = Workload::read(
            &json!({ "workloads": ["a", "b"], "holdout": "h", "checked": 9, "extra": 1 }),
        )
        .unwrap();
        assert_eq!(w.workloads, ["a", "b"]);
        assert_eq!((w.holdout.as_deref(), w.checked), (Some("h"), Some(9)));
        assert_eq!(Workload::read(&json!({})).unwrap(), Workload::default());
        // The gateway's manifests of before: shapes, requests_checked.
        let old = json!({ "shapes": ["s"], "holdout": "h", "requests_checked": 3 });
        let w = Workload::read(&old).unwrap();
        assert_eq!(
            (w.workloads.clone(), w.checked),
            (vec!["s".to_owned()], Some(3))
        );
        for bad in [
            json!([]),
            json!({ "workloads": "a" }),
            json!({ "workloads": [""] }),
            json!({ "workloads": [{ "name": "s" }] }),
            json!({ "holdout": 3 }),
            json!({ "checked": -1 }),
            json!({ "workloads": ["h"], "holdout": "h" }),
        ] {
            assert!(Workload::read(&bad).is_err(), "{bad}");
        }
    }
}
