//! HTTP plumbing that knows nothing of routes, configuration, admission or telemetry: the body
//! types of both directions and the responses built from them ([`body`], [`pieces`]), the
//! client-facing SSE body that drives a stream transform ([`stream`]), the upstream connection
//! pool ([`client`]), the deadlines of the upstream call and of a body read, checked at a coarse
//! tick ([`deadline`]), TLS to https upstreams ([`tls`]), header values made per request without
//! an allocation ([`arena`]), and the POSTs of a thread outside the workers, the trace exporter's
//! ([`post`]).

pub mod arena;
pub mod body;
pub mod client;
pub mod deadline;
pub mod pieces;
pub mod post;
pub mod stream;
pub mod tls;
