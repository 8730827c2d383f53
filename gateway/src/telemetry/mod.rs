//! Telemetry: what the gateway tells its operators about the requests it serves, without changing
//! them. [`metrics`] (per-worker counters, the Prometheus text and its listener) and [`traces`]
//! (OpenTelemetry spans of sampled requests, exported as OTLP by a thread of their own). Each owns
//! its config section and its validation, called by [`crate::config`]; a request's sample and
//! spans are taken from its record by [`crate::exchange`] when it ends.
//!
//! `traces` is a config posture ([`crate::config::postures`]); metrics are not (every request is
//! recorded whatever the config says; the section only adds the scrape listener). The access log,
//! the third thing an operator reads, is the record's line and lives with it
//! (`exchange/access_log.rs`).
//!
//! Above [`crate::admission`]: the metrics name the limits' kinds and scopes and show the shared
//! store's counters. Inside the layer `metrics` reads the traces' export counters; `traces` uses
//! nothing else here.

pub mod metrics;
pub mod traces;
