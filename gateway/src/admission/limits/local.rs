//! Local admission: a request checked against the local limiter of each policy that applies
//! (the key's, then the model's), all or nothing.

use std::sync::Arc;

use super::admission::Admission;
use super::policy::Kind;
use super::response::Rejection;
use super::state::PolicyState;

/// The order in which a policy's parts are taken: a slot, a request, then the token check.
pub(super) const PARTS: [Kind; 3] = [Kind::Concurrency, Kind::Requests, Kind::Tokens];

/// Takes every part of every policy in `policies` at `now`, then reserves `estimated_tokens`
/// on each. On a refusal what was already taken is given back, and the refusal names the
/// policy and the part.
pub(super) fn admit(
    now: u64,
    policies: [Option<&Arc<PolicyState>>; 2],
    estimated_tokens: u64,
    headers_on_success: bool,
) -> Result<Admission, Rejection> {
    let mut adm = Admission::new(estimated_tokens, headers_on_success, false);
    for st in policies.into_iter().flatten() {
        for (n, kind) in PARTS.into_iter().enumerate() {
            if let Err(wait) = st.local.take(kind, now) {
                // The parts of this policy taken before the refused one, then the earlier
                // policies.
                if n > 1 {
                    st.local.refund_request();
                }
                if n > 0 {
                    st.local.release_slot();
                }
                adm.rollback();
                return Err(Rejection::new(st, kind, now, wait));
            }
        }
        adm.held.push(st.clone());
    }
    // Every check passed: reserve the token estimate.
    for st in adm.held.iter() {
        if let Some(t) = &st.local.tokens {
            t.charge(now, estimated_tokens);
        }
    }
    Ok(adm)
}
