//! The upstream connection pool. Each worker builds its own (no pool is shared between threads);
//! one pool serves every upstream, http and https alike (plain connections pass through the TLS
//! connector untouched).

use std::time::Duration;

use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::http::body::UpBody;

pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, UpBody>;

/// A worker's pool: keep-alive connections with `TCP_NODELAY`, idle ones closed after 90 s, TLS
/// by `tls` for https upstreams. Call inside the worker's runtime.
pub fn new(tls: &rustls::ClientConfig) -> UpstreamClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_keepalive(Some(Duration::from_secs(60)));
    // The TLS connector needs the URI's scheme to reach it.
    connector.enforce_http(false);
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls.clone())
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector);
    Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(1024)
        .build(connector)
}
