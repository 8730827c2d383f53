//! The field checks every config section uses, and the error they report: a problem with the JSON
//! path it is at, so that `gateway validate` names every problem instead of stopping at the first.
//! This is the bottom of the config code, a leaf of the crate: the sections (providers, models,
//! admission, telemetry) check their own part with it, and [`crate::config`] assembles them.

use serde_json::{Map, Value};

/// One problem in the file, with the JSON path it is at (`$.providers.up.kind`).
#[derive(Debug, Clone)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Collects errors and warnings while a file is checked section by section.
#[derive(Default)]
pub struct Checker {
    pub errors: Vec<ConfigError>,
    pub warnings: Vec<String>,
}

impl Checker {
    /// A required top-level section that maps names to entries (`providers`, `models`): its
    /// entries, or none after reporting it missing, not an object or empty (`what`: the entry kind).
    pub fn named_section<'v>(
        &mut self,
        top: &'v Map<String, Value>,
        key: &str,
        what: &str,
    ) -> Option<&'v Map<String, Value>> {
        let path = format!("$.{key}");
        let Some(v) = top.get(key) else {
            self.err(path, "is required");
            return None;
        };
        let m = self.obj(v, &path)?;
        if m.is_empty() {
            self.err(path, format!("must name at least one {what}"));
        }
        Some(m)
    }

    pub fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    pub fn obj<'v>(&mut self, v: &'v Value, path: &str) -> Option<&'v Map<String, Value>> {
        match v.as_object() {
            Some(o) => Some(o),
            None => {
                self.err(path, "must be an object");
                None
            }
        }
    }

    pub fn string<'v>(
        &mut self,
        o: &'v Map<String, Value>,
        key: &str,
        path: &str,
    ) -> Option<&'v str> {
        match o.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Some(s),
            Some(Value::String(_)) => {
                self.err(format!("{path}.{key}"), "must not be empty");
                None
            }
            Some(_) => {
                self.err(format!("{path}.{key}"), "must be a string");
                None
            }
            None => {
                self.err(format!("{path}.{key}"), "is required");
                None
            }
        }
    }

    pub fn positive(&mut self, o: &Map<String, Value>, key: &str, path: &str) -> Option<u64> {
        let v = o.get(key)?;
        match v.as_u64() {
            Some(n) if n > 0 => Some(n),
            _ => {
                self.err(format!("{path}.{key}"), "must be a positive integer");
                None
            }
        }
    }

    /// Keys of `o` (at `path`) that are not in `known` are warned about, as unknown top-level
    /// keys are: most likely a typo that would otherwise leave a default silently in force.
    pub fn warn_unknown(&mut self, o: &Map<String, Value>, path: &str, known: &[&str]) {
        for k in o.keys() {
            if !known.contains(&k.as_str()) {
                self.warnings
                    .push(format!("{path}.{k}: unknown key, ignored"));
            }
        }
    }
}
