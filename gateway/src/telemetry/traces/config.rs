//! The `tracing` section and the sampling decision it sets.

use http::Uri;
use serde_json::Value;

use crate::checker::Checker;

/// The checked `tracing` section.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingConfig {
    /// The OTLP/HTTP traces endpoint (`http://` only).
    pub endpoint: Uri,
    pub sample_ratio: f64,
    pub service_name: String,
}

impl TracingConfig {
    /// The `tracing` section; `None` when absent, wrong (reported) or sampling nothing.
    pub fn from_config(c: &mut Checker, v: Option<&Value>) -> Option<TracingConfig> {
        let o = c.obj(v?, "$.tracing")?;
        c.warn_unknown(
            o,
            "$.tracing",
            &["endpoint", "sample_ratio", "service_name"],
        );
        let endpoint = c.string(o, "endpoint", "$.tracing");
        let uri = endpoint.and_then(|e| match e.parse::<Uri>() {
            Ok(u) if u.scheme_str() == Some("http") && u.host().is_some() => Some(u),
            _ => {
                c.err(
                    "$.tracing.endpoint",
                    "must be an http:// URL (the OTLP/HTTP traces endpoint, e.g. http://127.0.0.1:4318/v1/traces)",
                );
                None
            }
        });
        let ratio = match o.get("sample_ratio") {
            None => Some(1.0),
            Some(v) => match v.as_f64() {
                Some(r) if (0.0..=1.0).contains(&r) => Some(r),
                _ => {
                    c.err("$.tracing.sample_ratio", "must be a number from 0 to 1");
                    None
                }
            },
        };
        let service_name = match o.get("service_name") {
            None => "gateway".to_string(),
            Some(_) => c.string(o, "service_name", "$.tracing")?.to_string(),
        };
        let endpoint = uri?;
        let sample_ratio = ratio?;
        if sample_ratio == 0.0 {
            return None;
        }
        Some(TracingConfig {
            endpoint,
            sample_ratio,
            service_name,
        })
    }
}

/// The ratio's decision on a trace id of its own (a client's `traceparent` that says "sampled"
/// is followed instead): a trace whose id's last 8 bytes read at most the threshold is sampled,
/// so that every hop sampling by the same ratio keeps the same traces.
#[derive(Debug)]
pub(super) struct Sampler {
    threshold: u64,
}

impl Sampler {
    pub(super) fn new(ratio: f64) -> Sampler {
        let threshold = if ratio >= 1.0 {
            u64::MAX
        } else {
            (ratio * u64::MAX as f64) as u64
        };
        Sampler { threshold }
    }

    #[inline]
    pub(super) fn samples(&self, trace_id: &[u8; 16]) -> bool {
        u64::from_be_bytes(trace_id[8..].try_into().expect("8 bytes")) <= self.threshold
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_checked() {
        let check = |v: Value| {
            let mut c = Checker::default();
            let t = TracingConfig::from_config(&mut c, Some(&v));
            (
                t,
                c.errors.iter().map(|e| e.path.clone()).collect::<Vec<_>>(),
            )
        };
        let (t, e) = check(
            serde_json::json!({"endpoint": "http://127.0.0.1:4318/v1/traces", "sample_ratio": 0.5}),
        );
        assert!(e.is_empty());
        let u = t.unwrap().endpoint;
        assert_eq!(
            (u.host(), u.port_u16(), u.path()),
            (Some("127.0.0.1"), Some(4318), "/v1/traces")
        );
        let (t, e) =
            check(serde_json::json!({"endpoint": "https://x/v1/traces", "sample_ratio": 2}));
        assert!(t.is_none());
        assert_eq!(e, ["$.tracing.endpoint", "$.tracing.sample_ratio"]);
        let (t, e) = check(serde_json::json!({"endpoint": "http://x:1/v", "sample_ratio": 0}));
        assert!(t.is_none() && e.is_empty(), "ratio 0 is off");
    }

    #[test]
    fn the_ratio_samples_by_the_ids_last_bytes() {
        let id = |low: u64| {
            let mut t = [0xff; 16];
            t[8..].copy_from_slice(&low.to_be_bytes());
            t
        };
        let half = Sampler::new(0.5);
        assert!(half.samples(&id(0)) && half.samples(&id(u64::MAX / 2 - 1)));
        assert!(!half.samples(&id(u64::MAX / 2 + 2)));
        assert!(Sampler::new(1.0).samples(&id(u64::MAX)));
    }
}
