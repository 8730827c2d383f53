//! HTTP plumbing that knows nothing of routes, configuration or posture: the body types of both
//! directions and the responses built from them ([`body`]), the client-facing SSE body that drives
//! a stream transform ([`stream`]), the upstream connection pool ([`client`]) and TLS to https
//! upstreams ([`tls`]).

pub mod body;
pub mod client;
pub mod stream;
pub mod tls;
