//! What an alias resolves to: its deployments (provider, upstream model, weight, priority) and how
//! one is chosen, with everything a request needs computed at load.

use std::sync::Arc;

use bytes::Bytes;

use crate::provider::price::Price;
use crate::provider::upstream::Provider;

/// How a deployment is chosen among the healthy ones of the best priority.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// Smooth weighted round robin: exactly `weight` picks in every `sum of weights` requests.
    Weighted,
    /// Fewest requests in flight on this worker relative to the weight; ties by weight.
    LeastLoaded,
}

/// One upstream an alias can be served by.
#[derive(Debug)]
pub struct Deployment {
    pub provider: Arc<Provider>,
    pub upstream_model: String,
    /// The upstream model as a JSON string literal, spliced into native request bodies.
    pub upstream_json: Bytes,
    /// `upstream_json` followed by `,"stream_options":{"include_usage":true}`: spliced in its
    /// place when a native chat stream asks for usage (`dialect/stream_usage.rs`).
    pub upstream_json_usage: Bytes,
    /// What its tokens cost; `None`: nothing (`provider/price.rs`).
    pub price: Option<Price>,
    /// The provider's name as a JSON string literal, for the access log.
    pub provider_json: Bytes,
    /// Share of the traffic among deployments of the same priority.
    pub weight: u32,
    /// Lower is tried first; a higher priority only serves when every deployment of the lower
    /// ones is cooling down or already failed this request.
    pub priority: u32,
    /// This deployment's upstream (provider and model) in [`Table::upstreams`]: aliases that
    /// share an upstream share its health.
    pub upstream: usize,
    /// This (alias, deployment) pair's place in the per-worker balancing state.
    pub choice: usize,
}

/// Where one client-visible alias goes.
#[derive(Debug)]
pub struct Route {
    pub alias: String,
    /// The alias's place among every configured alias sorted: a posture keeps its per-alias
    /// state in a table by it (the budgets: `admission/spend.rs`), found without hashing the alias.
    pub index: usize,
    /// The alias as a JSON string literal (quotes included), spliced into responses.
    pub alias_json: Bytes,
    /// At least one; with one, the request path keeps no routing state at all.
    pub deployments: Box<[Deployment]>,
    /// The priciest of the deployments' prices, each kind of token apart (`None`: none is
    /// priced): what a spend budget reserves at (`admission/spend.rs`), found once at load.
    pub reserve_price: Option<Price>,
    pub strategy: Strategy,
    /// The layout of the per-worker state this route's indices point into.
    pub table: Arc<Table>,
    /// Request parts translation may drop for this alias rather than refuse (`drop`).
    pub drop: Box<[String]>,
    /// What `GET /v1/models` says of the alias: its context window and output cap
    /// (`context_window`, `max_output_tokens`), for clients that size a conversation by them.
    pub limits: Limits,
}

/// An alias's token limits as its config states them (`None`: not stated).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    pub context_window: Option<u64>,
    pub max_output_tokens: Option<u64>,
}

impl Route {
    /// [`Route::reserve_price`] of `deployments`.
    pub fn reserve_price(deployments: &[Deployment]) -> Option<Price> {
        deployments
            .iter()
            .filter_map(|d| d.price)
            .reduce(|a, b| Price {
                input: a.input.max(b.input),
                output: a.output.max(b.output),
                cached_input: a.cached_input.max(b.cached_input),
            })
    }

    /// Whether there is anything to choose or fall back to.
    pub fn is_routed(&self) -> bool {
        self.deployments.len() > 1
    }
}

/// The distinct upstreams of one configuration and the size of its balancing state. A worker
/// keeps its routing state laid out for one table and re-lays it when a reload brings another.
#[derive(Debug)]
pub struct Table {
    /// Unique per loaded configuration, so that a worker notices a reload with one comparison.
    pub generation: u64,
    /// (provider name, upstream model) of every deployment's upstream, each once.
    pub upstreams: Vec<(String, String)>,
    /// (alias, deployment) pairs.
    pub choices: usize,
}
