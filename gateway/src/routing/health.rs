//! Per-worker routing state: requests in flight per upstream, consecutive failures and cooldowns,
//! the weighted round robin's counters, and the retry budget.
//!
//! Workers are current-thread runtimes on their own OS threads, so the state is a thread-local
//! that only its worker touches: no lock, no cache line shared with another worker. Each worker
//! therefore balances, counts failures and rests deployments on its own; with N workers a failing
//! deployment gets N probes after a cooldown, not one.
//!
//! The state is laid out for one configuration's [`Table`]; the first request after a reload
//! re-lays it, carrying over each upstream's failures and cooldown by (provider, model).

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::StatusCode;

use crate::dialect::error::GwError;
use crate::routing::policy::{Policy, MAX_RETRY_AFTER};
use crate::routing::route::{Route, Strategy, Table};

/// One retry in the budget's thousandths.
const RETRY: u64 = 1000;

#[derive(Default)]
struct Upstream {
    inflight: u32,
    /// Failures since `first_failure` with no success between them.
    failures: u32,
    first_failure: Option<Instant>,
    /// Skipped until then; once it has passed, one request (the probe) tries it again and the
    /// others keep skipping it until the probe's answer is in.
    cooling_until: Option<Instant>,
    probing: bool,
    /// The most recent failure, for the answer when every deployment is cooling down.
    last_error: Option<GwError>,
}

impl Upstream {
    fn available(&self, now: Instant) -> bool {
        match self.cooling_until {
            None => true,
            Some(t) => now >= t && !self.probing,
        }
    }
}

#[derive(Default)]
struct State {
    table: Option<Arc<Table>>,
    generation: u64,
    upstreams: Vec<Upstream>,
    /// The smooth weighted round robin's current weight of each (alias, deployment).
    current: Vec<i64>,
    /// Retries this worker may still make, in thousandths; `None` until the first routed request.
    budget: Option<u64>,
}

impl State {
    /// Lays the state out for `table`, keeping what is known about upstreams it still has.
    /// Requests in flight under the old layout are forgotten (their leases no longer match), so
    /// counts start from zero and no probe stays marked as running.
    fn relayout(&mut self, table: &Arc<Table>) {
        let mut old: HashMap<(String, String), Upstream> = HashMap::new();
        if let Some(t) = self.table.take() {
            for (key, u) in t.upstreams.iter().zip(self.upstreams.drain(..)) {
                old.insert(key.clone(), u);
            }
        }
        self.upstreams = table
            .upstreams
            .iter()
            .map(|key| match old.remove(key) {
                Some(u) => Upstream {
                    inflight: 0,
                    probing: false,
                    ..u
                },
                None => Upstream::default(),
            })
            .collect();
        self.current = vec![0; table.choices];
        self.generation = table.generation;
        self.table = Some(table.clone());
    }
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

fn with<R>(table: &Arc<Table>, f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with(|s| {
        let mut s = s.borrow_mut();
        if s.generation != table.generation {
            s.relayout(table);
        }
        f(&mut s)
    })
}

/// The cooldown settings a lease applies when its attempt fails.
#[derive(Clone, Copy, Debug)]
struct Rest {
    failures: u32,
    window: Duration,
    period: Duration,
}

/// An attempt's place in flight on its upstream; dropping it ends the attempt. The request path
/// keeps the lease of the attempt that serves until the response (or the stream) is finished.
#[derive(Debug)]
pub struct Lease {
    generation: u64,
    upstream: usize,
    /// This attempt is the one request let through after a cooldown.
    probe: bool,
    resolved: bool,
    rest: Rest,
}

impl Lease {
    /// Applies `f` to this lease's upstream if the worker's state is still laid out for it (and
    /// still exists: a lease dropped while the thread exits changes nothing).
    fn with_upstream(&self, f: impl FnOnce(&mut Upstream)) {
        let _ = STATE.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.generation == self.generation {
                if let Some(u) = s.upstreams.get_mut(self.upstream) {
                    f(u)
                }
            }
        });
    }

    /// The upstream answered with something that is not retried (success or the client's own
    /// error): it works, so its failure count restarts and a probe ends its cooldown.
    pub fn succeeded(&mut self) {
        let probe = self.probe;
        self.with_upstream(|u| {
            u.failures = 0;
            u.first_failure = None;
            if probe {
                u.cooling_until = None;
                u.probing = false;
            }
        });
        self.resolved = true;
    }

    /// The attempt failed with `err` (a retried status, a connection error, a timeout), the
    /// upstream asking for `retry_after`. Returns whether this failure started a cooldown.
    pub fn failed(&mut self, err: &GwError, retry_after: Option<Duration>, now: Instant) -> bool {
        let (probe, rest) = (self.probe, self.rest);
        let mut started = false;
        self.with_upstream(|u| {
            u.last_error = Some(err.clone());
            let cooling = u.cooling_until.is_some_and(|t| t > now);
            let mut until = None;
            if probe {
                u.probing = false;
                until = Some(now + rest.period);
            } else {
                match u.first_failure {
                    Some(t) if now.saturating_duration_since(t) <= rest.window => u.failures += 1,
                    _ => {
                        u.first_failure = Some(now);
                        u.failures = 1;
                    }
                }
                if u.failures >= rest.failures {
                    until = Some(now + rest.period);
                }
            }
            if let Some(ra) = retry_after {
                let t = now + ra.min(MAX_RETRY_AFTER);
                until = Some(until.map_or(t, |p| p.max(t)));
            }
            if let Some(t) = until {
                let keep = u.cooling_until.filter(|&c| c > t);
                u.cooling_until = Some(keep.unwrap_or(t));
                u.failures = 0;
                u.first_failure = None;
                started = !cooling;
            }
        });
        self.resolved = true;
        started
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let (probe, resolved) = (self.probe, self.resolved);
        self.with_upstream(|u| {
            u.inflight = u.inflight.saturating_sub(1);
            if probe && !resolved {
                // The request went away before the probe's answer: let another request probe.
                u.probing = false;
            }
        });
    }
}

/// What to do next for a routed request.
#[derive(Debug)]
pub enum Pick {
    /// Try the route's deployment at this index, holding the lease while the attempt runs.
    Go(usize, Lease),
    /// Every deployment not tried yet is cooling down: the error to answer with (the latest
    /// failure of the one that is back soonest, with `retry_after` until then).
    Cooling(GwError),
    /// Every deployment has been tried.
    Exhausted,
}

/// Chooses the deployment for the next attempt of a request to `route` that has already tried
/// the deployments whose bits are set in `tried`: among those not tried and not cooling down, the
/// best priority; among those, by the route's strategy.
pub fn pick(route: &Route, policy: &Policy, tried: u64, now: Instant) -> Pick {
    let ds = &route.deployments;
    with(&route.table, |st| {
        let mut best: Option<u32> = None;
        let mut cooling = false;
        for (i, d) in ds.iter().enumerate() {
            if tried & (1 << i) != 0 {
                continue;
            }
            if st.upstreams[d.upstream].available(now) {
                best = Some(best.map_or(d.priority, |b| b.min(d.priority)));
            } else {
                cooling = true;
            }
        }
        let Some(best) = best else {
            return if cooling {
                Pick::Cooling(cooling_error(st, route, tried, now))
            } else {
                Pick::Exhausted
            };
        };
        let mut candidates: u64 = 0;
        for (i, d) in ds.iter().enumerate() {
            if tried & (1 << i) == 0
                && d.priority == best
                && st.upstreams[d.upstream].available(now)
            {
                candidates |= 1 << i;
            }
        }
        if route.strategy == Strategy::LeastLoaded {
            candidates = least_loaded(st, route, candidates);
        }
        let chosen = smooth_weighted(st, route, candidates);
        let d = &ds[chosen];
        let u = &mut st.upstreams[d.upstream];
        u.inflight += 1;
        let probe = u.cooling_until.is_some();
        if probe {
            u.probing = true;
        }
        Pick::Go(
            chosen,
            Lease {
                generation: st.generation,
                upstream: d.upstream,
                probe,
                resolved: false,
                rest: Rest {
                    failures: policy.cooldown_failures,
                    window: policy.cooldown_window,
                    period: policy.cooldown_period,
                },
            },
        )
    })
}

/// The candidates with the fewest requests in flight per unit of weight.
fn least_loaded(st: &State, route: &Route, candidates: u64) -> u64 {
    let load = |i: usize| {
        let d = &route.deployments[i];
        (
            u64::from(st.upstreams[d.upstream].inflight),
            u64::from(d.weight),
        )
    };
    let mut min: Option<(u64, u64)> = None;
    for i in bits(candidates) {
        let (n, w) = load(i);
        if min.is_none_or(|(mn, mw)| n * mw < mn * w) {
            min = Some((n, w));
        }
    }
    let Some((mn, mw)) = min else {
        return candidates;
    };
    bits(candidates)
        .filter(|&i| {
            let (n, w) = load(i);
            n * mw == mn * w
        })
        .fold(0, |acc, i| acc | 1 << i)
}

/// Smooth weighted round robin (as nginx does it) over `candidates`, which is not empty: each
/// gains its weight, the largest is chosen and pays the total back. Over any run of picks among
/// the same candidates each gets its weight's share, evenly interleaved.
fn smooth_weighted(st: &mut State, route: &Route, candidates: u64) -> usize {
    let mut total = 0i64;
    let mut chosen = None;
    let mut chosen_weight = i64::MIN;
    for i in bits(candidates) {
        let d = &route.deployments[i];
        let w = i64::from(d.weight);
        let c = &mut st.current[d.choice];
        *c += w;
        total += w;
        if *c > chosen_weight {
            chosen_weight = *c;
            chosen = Some(i);
        }
    }
    let chosen = chosen.expect("at least one candidate");
    st.current[route.deployments[chosen].choice] -= total;
    chosen
}

fn bits(mut set: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        if set == 0 {
            return None;
        }
        let i = set.trailing_zeros() as usize;
        set &= set - 1;
        Some(i)
    })
}

fn cooling_error(st: &State, route: &Route, tried: u64, now: Instant) -> GwError {
    let mut soonest: Option<(Instant, usize)> = None;
    for (i, d) in route.deployments.iter().enumerate() {
        if tried & (1 << i) != 0 {
            continue;
        }
        let back = st.upstreams[d.upstream].cooling_until.unwrap_or(now);
        if soonest.is_none_or(|(t, _)| back < t) {
            soonest = Some((back, d.upstream));
        }
    }
    let (back, upstream) = soonest.expect("some deployment is cooling down");
    let mut e = st.upstreams[upstream]
        .last_error
        .clone()
        .unwrap_or_else(|| {
            GwError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("every deployment of {} is cooling down", route.alias),
            )
        });
    let wait = back.saturating_duration_since(now);
    e.retry_after = Some((wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1));
    e
}

/// A request to a routed alias arrived: it adds its share to this worker's retry budget, which
/// saves up to `burst` retries (at least one).
pub fn deposit(table: &Arc<Table>, policy: &Policy) {
    let cap = u64::from(policy.retry_burst_milli).max(RETRY);
    with(table, |st| {
        let b = st.budget.unwrap_or(u64::from(policy.retry_burst_milli));
        st.budget = Some((b + u64::from(policy.retry_share_milli)).min(cap));
    })
}

/// Takes one retry from this worker's budget; `false` when it is spent.
pub fn withdraw(table: &Arc<Table>) -> bool {
    with(table, |st| match st.budget {
        Some(b) if b >= RETRY => {
            st.budget = Some(b - RETRY);
            true
        }
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::Checker;

    /// The routes of a `models` section over providers `a` and `b` (each test thread has its own
    /// worker state).
    fn routes(models: serde_json::Value) -> crate::routing::AliasMap<Arc<Route>> {
        let top = serde_json::json!({"providers": {}, "models": models});
        let mut providers = HashMap::new();
        for name in ["a", "b", "c"] {
            providers.insert(
                name.to_owned(),
                Arc::new(crate::provider::upstream::Provider::stub(
                    name,
                    crate::provider::upstream::ProviderKind::OpenAi,
                )),
            );
        }
        let mut c = Checker::default();
        let r = crate::routing::models::section(&mut c, top.as_object().unwrap(), &providers);
        assert!(c.errors.is_empty(), "{:?}", c.errors);
        r
    }

    fn go(route: &Route, policy: &Policy, tried: u64, now: Instant) -> (usize, Lease) {
        match pick(route, policy, tried, now) {
            Pick::Go(i, l) => (i, l),
            other => panic!("expected a deployment, got {other:?}"),
        }
    }

    fn err(status: u16) -> GwError {
        GwError::new(StatusCode::from_u16(status).unwrap(), format!("e{status}"))
    }

    #[test]
    fn weighted_is_exact_and_interleaved() {
        let r = routes(serde_json::json!({"m": {"deployments": [
            {"provider": "a", "model": "x", "weight": 3},
            {"provider": "b", "model": "x", "weight": 1}]}}));
        let (route, policy, now) = (&r["m"], Policy::default(), Instant::now());
        let picks: Vec<usize> = (0..8).map(|_| go(route, &policy, 0, now).0).collect();
        assert_eq!(picks, [0, 0, 1, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn priorities_and_tried_deployments() {
        let r = routes(serde_json::json!({"m": {"deployments": [
            {"provider": "a", "model": "x", "priority": 1},
            {"provider": "b", "model": "x"},
            {"provider": "c", "model": "x"}]}}));
        let (route, policy, now) = (&r["m"], Policy::default(), Instant::now());
        for _ in 0..4 {
            assert_ne!(go(route, &policy, 0, now).0, 0, "priority 0 first");
        }
        assert_eq!(go(route, &policy, 0b110, now).0, 0, "then the next one");
        assert!(matches!(pick(route, &policy, 0b111, now), Pick::Exhausted));
    }

    #[test]
    fn least_loaded_avoids_the_busy_one() {
        let r = routes(
            serde_json::json!({"m": {"strategy": "least-loaded", "deployments": [
            {"provider": "a", "model": "x"}, {"provider": "b", "model": "x"}]}}),
        );
        let (route, policy, now) = (&r["m"], Policy::default(), Instant::now());
        let (first, held) = go(route, &policy, 0, now);
        for _ in 0..3 {
            let (i, _done) = go(route, &policy, 0, now);
            assert_ne!(i, first, "the other one has nothing in flight");
        }
        drop(held);
        let a = go(route, &policy, 0, now).0;
        let b = go(route, &policy, 0, now).0;
        assert_ne!(a, b, "idle again: ties alternate by weight");
    }

    #[test]
    fn cooldown_skips_then_one_probe_readmits() {
        let r = routes(serde_json::json!({"m": {"deployments": [
            {"provider": "a", "model": "x"}, {"provider": "b", "model": "x"}]}}));
        let route = &r["m"];
        let policy = Policy {
            cooldown_failures: 2,
            ..Policy::default()
        };
        let t0 = Instant::now();
        let fail_a = |now: Instant| {
            let (_, mut l) = go(route, &policy, 0b10, now);
            l.failed(&err(500), None, now)
        };
        assert!(!fail_a(t0), "one failure is not repeated failure");
        assert!(fail_a(t0), "the second starts a cooldown");
        for _ in 0..4 {
            assert_eq!(go(route, &policy, 0, t0).0, 1, "a is skipped");
        }
        match pick(route, &policy, 0b10, t0) {
            Pick::Cooling(e) => {
                assert_eq!(e.message, "e500", "the last upstream error");
                assert_eq!(e.retry_after, Some(30));
            }
            other => panic!("{other:?}"),
        }
        let later = t0 + policy.cooldown_period;
        let (i, mut probe) = go(route, &policy, 0b10, later);
        assert_eq!(i, 0);
        assert!(
            matches!(pick(route, &policy, 0b10, later), Pick::Cooling(_)),
            "one probe at a time"
        );
        probe.succeeded();
        drop(probe);
        assert_eq!(go(route, &policy, 0b10, later).0, 0, "re-admitted");
        // Rested again; a probe that fails rests it again at once, without waiting for
        // repeated failures.
        assert!(!fail_a(later) && fail_a(later));
        let again = later + policy.cooldown_period;
        assert!(fail_a(again), "the probe failed");
        assert!(matches!(
            pick(route, &policy, 0b10, again),
            Pick::Cooling(_)
        ));
    }

    #[test]
    fn retry_after_rests_the_deployment_for_that_long() {
        let r = routes(serde_json::json!({"m": {"deployments": [
            {"provider": "a", "model": "x"}, {"provider": "b", "model": "x"}]}}));
        let (route, policy, now) = (&r["m"], Policy::default(), Instant::now());
        let (_, mut l) = go(route, &policy, 0b10, now);
        assert!(l.failed(&err(429), Some(Duration::from_secs(2)), now));
        drop(l);
        assert!(matches!(pick(route, &policy, 0b10, now), Pick::Cooling(_)));
        let back = now + Duration::from_secs(2);
        assert_eq!(go(route, &policy, 0b10, back).0, 0);
    }

    #[test]
    fn budget_allows_burst_plus_share() {
        let r = routes(serde_json::json!({"m": {"deployments": [
            {"provider": "a", "model": "x"}, {"provider": "b", "model": "x"}]}}));
        let table = &r["m"].table;
        let policy = Policy {
            retry_share_milli: 250,
            retry_burst_milli: 2000,
            ..Policy::default()
        };
        let mut retries = 0;
        for _ in 0..100 {
            deposit(table, &policy);
            while withdraw(table) {
                retries += 1;
            }
        }
        // 2 saved up, then one per 4 requests (the first deposit tops up the burst).
        assert!((26..=27).contains(&retries), "{retries}");
    }

    #[test]
    fn a_reload_keeps_cooldowns_by_upstream() {
        let models = serde_json::json!({"m": {"deployments": [
            {"provider": "a", "model": "x"}, {"provider": "b", "model": "x"}]}});
        let old = routes(models.clone());
        let policy = Policy {
            cooldown_failures: 1,
            ..Policy::default()
        };
        let now = Instant::now();
        let (_, mut l) = go(&old["m"], &policy, 0b10, now);
        assert!(l.failed(&err(500), None, now));
        let new = routes(models);
        assert_ne!(old["m"].table.generation, new["m"].table.generation);
        assert!(matches!(
            pick(&new["m"], &policy, 0b10, now),
            Pick::Cooling(_)
        ));
        drop(l); // a lease of the old layout changes nothing in the new one
        assert_eq!(go(&new["m"], &policy, 0, now).0, 1);
    }
}
