//! Traces: one span per sampled request and one per upstream attempt, after the OpenTelemetry
//! GenAI semantic conventions, exported as OTLP/HTTP protobuf by a thread of their own.
//!
//! ```json
//! "tracing": { "endpoint": "http://127.0.0.1:4318/v1/traces", "sample_ratio": 0.01,
//!              "service_name": "gateway" }
//! ```
//!
//! Off without the section (or with `sample_ratio` 0). A request is sampled when its client's
//! W3C `traceparent` says so (its `sampled` flag: the client's decision is kept), else by the
//! ratio on its trace id; the client's trace id and span are continued (the request span is the
//! child of the client's), and every attempt carries `traceparent` to its upstream (the attempt
//! span's id; a request not sampled passes the client's header on unchanged).
//!
//! The request path decides and, when the request ends, encodes its spans straight into its
//! worker's own buffer, as the access log writes its line: no lock another worker takes, no I/O,
//! no record to build and free later. The exporter thread (`gw-traces`) takes the buffers every
//! 200 ms, puts the one resource and scope header in front of their bytes and POSTs them to the
//! endpoint. A buffer holds at most [`MAX_BUFFERED`] requests; past it, and when an export fails
//! (the collector is down or slow), spans are dropped and counted
//! (`gateway_trace_spans_dropped_total`, `gateway_trace_exports_total{result}`), never waited for.
//!
//! The parts: [`config`] (the section and the sampling ratio), [`context`] (`traceparent`, the
//! ids, a request's trace as it goes), [`spans`] (what the spans say) on [`otlp`] (the protobuf
//! written directly), [`export`] (the buffers and the exporter thread, which POSTs through
//! [`crate::http::post`]).

mod config;
mod context;
mod export;
mod otlp;
mod spans;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;

use http::HeaderValue;

pub use config::TracingConfig;
pub use context::{traceparent, Attempt, Attempts, Trace, TRACEPARENT};
pub use export::{counters, export_once, finish, MAX_BUFFERED};
pub use spans::Finished;

/// The sampling decision, once traces are on.
static SAMPLER: OnceLock<config::Sampler> = OnceLock::new();

/// Starts the exporter for `cfg` (at startup, once; the section is startup-only).
pub fn init(cfg: &TracingConfig) -> anyhow::Result<()> {
    if SAMPLER.get().is_some() {
        return Ok(());
    }
    export::start(cfg)?;
    let _ = SAMPLER.set(config::Sampler::new(cfg.sample_ratio));
    Ok(())
}

/// Whether traces are on (the request path's one check when they are not).
#[inline]
pub fn enabled() -> bool {
    SAMPLER.get().is_some()
}

/// The sampling decision for a request whose client sent `traceparent` (or none): its trace, or
/// `None` when it is not sampled (or traces are off).
pub fn start(traceparent: Option<&HeaderValue>) -> Option<Box<Trace>> {
    let sampler = SAMPLER.get()?;
    let client = traceparent.and_then(|v| context::parse_traceparent(v.as_bytes()));
    let (trace_id, parent, sampled) = match client {
        Some((id, parent, sampled)) => (id, Some(parent), sampled),
        None => (context::trace_id(), None, false),
    };
    if !sampled && !sampler.samples(&trace_id) {
        return None;
    }
    Some(Trace::new(trace_id, parent))
}
