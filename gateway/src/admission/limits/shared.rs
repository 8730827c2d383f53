//! Shared admission: a request admitted from this replica's leases of each shared policy, part
//! by part in the local order, waiting for the store only when a lease cannot tell, and falling
//! back by `on_store_error` when the store cannot answer (`local`: the same limiter as a local
//! policy, divided by the replica count, empty as of the outage's start, and what it admits
//! owed to the shared bucket). Also the leases a policy is shared through.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::admission::Admission;
use super::clock::{now_ns, WINDOW_NS};
use super::lease::{Got, RateLease};
use super::limiter::Local;
use super::local::PARTS;
use super::policy::Kind;
use super::response::Rejection;
use super::slot_lease::SlotLease;
use super::state::{
    PolicyState, Shared, REQ_LEASE, REQ_LOCAL, SLOT_LEASE, SLOT_LOCAL, TOK_LEASE, TOK_LOCAL,
};
use super::store::{self, OnError, Store};
use super::upkeep::Leases;

/// Why a shared admission did not complete.
pub(super) enum Refused {
    Rejected(Rejection),
    MustWait,
}

/// The shared admission of `policies`: each part from its lease, waiting for the store until
/// `deadline` (`None`: not at all), or by `on_store_error` when the store cannot answer.
pub(super) async fn admit(
    store: &Arc<Store>,
    policies: [Option<&Arc<PolicyState>>; 2],
    estimated_tokens: u64,
    headers_on_success: bool,
    deadline: Option<tokio::time::Instant>,
) -> Result<Admission, Refused> {
    let mut adm = Admission::new(estimated_tokens, headers_on_success, true);
    let need_tokens = estimated_tokens.max(1) as i64;
    let mut fell_back = FellBack::default();
    for st in policies.into_iter().flatten() {
        let Some(sh) = &st.shared else {
            continue;
        };
        let i = adm.held.len();
        adm.held.push(st.clone());
        for kind in PARTS {
            let got = match (kind, deadline) {
                (Kind::Concurrency, _) if sh.slots.is_none() => continue,
                (Kind::Requests, _) if sh.requests.is_none() => continue,
                (Kind::Tokens, _) if sh.tokens.is_none() => continue,
                (Kind::Concurrency, None) => sh.slots.as_ref().unwrap().try_now(),
                (Kind::Concurrency, Some(d)) => sh.slots.as_ref().unwrap().acquire(d).await,
                (Kind::Requests, None) => sh.requests.as_ref().unwrap().try_now(1),
                (Kind::Requests, Some(d)) => sh.requests.as_ref().unwrap().acquire(1, 1, d).await,
                (Kind::Tokens, None) => sh.tokens.as_ref().unwrap().try_now(0),
                (Kind::Tokens, Some(d)) => {
                    sh.tokens.as_ref().unwrap().acquire(0, need_tokens, d).await
                }
            };
            match part(store, st, sh, kind, got, &mut fell_back) {
                Ok(bit) => adm.via[i] |= bit,
                Err(r) => {
                    if fell_back.decided {
                        store::count_fallback(store.config().on_error);
                    }
                    adm.rollback();
                    return Err(r);
                }
            }
        }
    }
    if fell_back.decided {
        store::count_fallback(store.config().on_error);
    }
    // Every check passed: reserve the token estimate.
    let now = now_ns();
    for (st, via) in adm.held.iter().zip(adm.via) {
        let Some(sh) = &st.shared else {
            continue;
        };
        if let (true, Some(t)) = (via & TOK_LEASE != 0, &sh.tokens) {
            t.charge(estimated_tokens as i64);
        }
        if let (true, Some(t)) = (via & TOK_LOCAL != 0, sh.fallback_tokens()) {
            t.charge(now, estimated_tokens);
            if let Some(l) = &sh.tokens {
                l.owe(estimated_tokens as i64, fell_back.since);
            }
        }
    }
    Ok(adm)
}

/// Whether `on_store_error` decided a part of an admission, and, for `local`, when the outage
/// began.
#[derive(Default)]
struct FellBack {
    decided: bool,
    since: u64,
}

/// One part of a shared admission, from what its lease could do: the `via` bit to record, or
/// the refusal. While the store cannot answer, `on_store_error: local` takes the part from the
/// policy's fallback as local admission takes it, from what its part of the limit refilled
/// since the outage began ([`Local::take_fallback`]); a request so admitted is owed to the
/// shared bucket ([`RateLease::owe`]).
fn part(
    store: &Store,
    st: &PolicyState,
    sh: &Shared,
    kind: Kind,
    got: Got,
    fell_back: &mut FellBack,
) -> Result<u8, Refused> {
    let (lease_bit, local_bit) = match kind {
        Kind::Requests => (REQ_LEASE, REQ_LOCAL),
        Kind::Tokens => (TOK_LEASE, TOK_LOCAL),
        Kind::Concurrency => (SLOT_LEASE, SLOT_LOCAL),
    };
    match got {
        Got::Yes => Ok(lease_bit),
        Got::WouldWait => Err(Refused::MustWait),
        Got::Empty(wait) => Err(Refused::Rejected(Rejection::new(st, kind, now_ns(), wait))),
        Got::Unavailable => {
            fell_back.decided = true;
            match (store.config().on_error, &sh.fallback) {
                (OnError::Admit, _) | (OnError::Local, None) => Ok(0),
                (OnError::Reject, _) => Err(Refused::Rejected(Rejection::unavailable(
                    st.scope, kind, &st.name,
                ))),
                (OnError::Local, Some(fb)) => {
                    let since = store.outage_began();
                    let now = now_ns();
                    fell_back.since = since;
                    let leased = match (kind, &sh.slots) {
                        (Kind::Concurrency, Some(l)) => l.in_use(),
                        _ => 0,
                    };
                    fb.take_fallback(kind, now, since, leased)
                        .map_err(|wait| Refused::Rejected(Rejection::new(st, kind, now, wait)))?;
                    if let (Kind::Requests, Some(l)) = (kind, &sh.requests) {
                        l.owe(1, since);
                    }
                    Ok(local_bit)
                }
            }
        }
    }
}

/// A holder name for the slot leases of one build of the policies (a reload is a new build):
/// the replica and a counter.
pub(super) fn holder(store: &Store) -> String {
    static BUILD: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}:{}",
        store.replica(),
        BUILD.fetch_add(1, Ordering::Relaxed)
    )
}

/// The leases `st`'s policy is shared through on `store`, registered in `leases` for their
/// upkeep, with the fallback `on_store_error: local` uses.
pub(super) fn share(
    st: &PolicyState,
    store: &Arc<Store>,
    holder: &str,
    leases: &mut Leases,
) -> Shared {
    let cfg = store.config();
    // Only key ids and aliases name keys in Redis, never a caller's or upstream's key.
    let p = st.policy;
    let key = |kind: Kind| {
        // A spend budget's tokens are its own bucket (`...:spend`), beside the key's rate limits.
        let kind = match (kind, p.spend_window_ns) {
            (Kind::Tokens, Some(_)) => "spend",
            _ => kind.as_str(),
        };
        format!("{}{}:{}:{}", cfg.prefix, st.scope.as_str(), st.name, kind)
    };
    let requests = p
        .requests_per_minute
        .map(|n| RateLease::new(store, key(Kind::Requests), n, WINDOW_NS));
    let tokens = p
        .tokens_per_minute
        .map(|n| RateLease::new(store, key(Kind::Tokens), n, p.tokens_window()));
    let slots = p
        .max_concurrent
        .map(|n| SlotLease::new(store, key(Kind::Concurrency), holder.to_owned(), n));
    leases
        .rates
        .extend(requests.iter().chain(tokens.iter()).map(Arc::downgrade));
    leases.slots.extend(slots.iter().map(Arc::downgrade));
    Shared {
        requests,
        tokens,
        slots,
        fallback: (cfg.on_error == OnError::Local).then(|| Local::divided(&p, cfg.replicas)),
    }
}
