//! `gateway`: an LLM gateway speaking OpenAI Chat Completions, Anthropic Messages and OpenAI
//! Responses to clients, in front of OpenAI- and Anthropic-style upstreams.
//!
//! The crate is a library with a thin binary (`main.rs`), so that the fuzz targets and tests can
//! call its parsing and translation directly. Modules are layered; each uses only the ones listed
//! before it (ARCHITECTURE.md has the map, `tests/layers.rs` checks it):
//!
//! 1. [`json`], [`sse`], [`alloc`], [`checker`]: leaves
//! 2. [`dialect`]: the three dialects, the neutral form, translation, the dialect error
//! 3. [`http`]: bodies, the SSE body, the upstream pool, TLS
//! 4. [`provider`]: upstreams and the requests they expect
//! 5. [`routing`]: aliases to providers
//! 6. [`admission`]: caller keys, rate limits, spend budgets
//! 7. [`telemetry`]: metrics, traces
//! 8. [`exchange`]: one request's life (admission bookkeeping, settlement, metrics sample, spans,
//!    the access log)
//! 9. [`config`]: the file, assembled from every section
//! 10. [`serve`]: workers, the request path, signals

pub mod admission;
pub mod alloc;
pub mod checker;
pub mod config;
pub mod dialect;
pub mod exchange;
pub mod http;
pub mod json;
pub mod provider;
pub mod routing;
pub mod serve;
pub mod sse;
pub mod telemetry;
