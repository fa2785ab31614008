//! The integration tests that install process-wide state, so they cannot share a
//! process with the others: a global `metrics` recorder (authorization refusals counted
//! by caller) and the global W3C trace propagator (one trace from the client library
//! through the daemon).

mod authorization;
mod tracing;
