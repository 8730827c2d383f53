//! The config postures that change the request path: each is a part of the config that, when on,
//! makes every request run code it would not run otherwise. The list is the gateway's own; the
//! training coverage gate (`trainer coverage`) asks the gateway for it (`gateway paths`) and asks,
//! for each training shape's config, which of them it turns on, so a new posture that lands here
//! without a training shape fails that gate.
//!
//! Metrics are not a posture of the request path: every request is recorded in the per-worker
//! shards whatever the config says; the `metrics` section only adds the scrape listener.
//!
//! A posture names a config switch, not a folder: each says where its code is (`code`), and
//! ARCHITECTURE.md's glossary lists them with it (`gateway/tests/code_map.rs` checks both).

use crate::config::Config;

/// One posture: its name in reports and shape files' coverage, what it adds to the request path,
/// where its code is, and how a config turns it on.
pub struct Posture {
    pub name: &'static str,
    pub what: &'static str,
    /// The file or folder under `gateway/src` that holds it (not printed by `gateway paths`).
    pub code: &'static str,
    pub enabled: fn(&Config) -> bool,
}

pub const POSTURES: &[Posture] = &[
    Posture {
        name: "keys",
        what: "caller keys: every request is authenticated (SHA-256, constant-time) and authorized for its model",
        code: "admission/auth.rs",
        enabled: |c| !c.snapshot.keys.is_open(),
    },
    Posture {
        name: "rate-limits",
        what: "rate-limit policies: every request is admitted against its key's and model's policies and settled with its usage",
        code: "admission/limits/",
        enabled: |c| !c.snapshot.limits.is_empty(),
    },
    Posture {
        name: "routing",
        what: "an alias with several deployments: its requests are routed (a choice by weight or load, a lease per attempt, the retry budget's deposit) and may fall back",
        code: "routing/health.rs",
        enabled: |c| c.snapshot.routes.values().any(|r| r.is_routed()),
    },
    Posture {
        name: "shared-limits",
        what: "a shared quota store (limits.store): admissions run from this replica's leases on a Redis",
        code: "admission/limits/shared.rs",
        enabled: |c| c.snapshot.limits.store_configured(),
    },
    Posture {
        name: "budgets",
        what: "spend budgets: a request to a priced alias reserves its most cost against its key's and alias's budgets and settles its real cost",
        code: "admission/spend.rs",
        enabled: |c| !c.snapshot.budgets.is_empty(),
    },
    Posture {
        name: "traces",
        what: "OpenTelemetry traces (tracing): every request is sampled or not, a sampled one records its spans and every attempt carries traceparent",
        code: "telemetry/traces/",
        enabled: |c| c.startup.tracing.is_some(),
    },
    Posture {
        name: "access-log",
        what: "the access log (on unless disabled): every request writes its JSON line",
        code: "exchange/access_log.rs",
        enabled: |c| c.startup.access_log.enabled,
    },
];

/// The postures `cfg` turns on, in [`POSTURES`] order.
pub fn enabled(cfg: &Config) -> Vec<&'static str> {
    POSTURES
        .iter()
        .filter(|p| (p.enabled)(cfg))
        .map(|p| p.name)
        .collect()
}
