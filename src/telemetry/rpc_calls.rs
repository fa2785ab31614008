//! The per-RPC work every call of both services shares, done once in one tower layer
//! (DESIGN, "One RPC table"): the count by status (`portcullis_rpc_calls_total{rpc,
//! code}`), the duration (`portcullis_rpc_duration_seconds{rpc}`) and the status on the
//! call's span (`rpc.grpc.status_code`; `outcome` for `INVALID_ARGUMENT` and `INTERNAL`).
//! The RPC is looked up in the contract's table (`portcullis_client::rpcs`), so a new RPC
//! is counted without a line here, and a path outside the table (refused by
//! authorization) gets no series of its own: what a peer sends never becomes a label.
//!
//! The layer sits outside authorization, so refused calls are counted with their code. A
//! call the client abandons before its answer (a reset stream, a dropped connection) is
//! counted as `cancelled`. The status is the answer's `grpc-status` header: tonic writes
//! it there for every error; a response without one is an answer the handler returned
//! (`ok`, whose status travels in the trailers).
//!
//! Metric handles are resolved once per (RPC, code), on first use, not per call. An
//! answered operator call is also counted by its caller (`portcullis_admin_calls_total{rpc,
//! caller}`), from the [`CallerName`] authorization puts on the answer.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

use portcullis_client::rpcs::Rpc;
use tonic::Code;
use tonic::codegen::http;
use tracing::Span;

use portcullis_client::rpcs::Service;

use super::metrics::{ADMIN_CALLS, RPC_CALLS, RPC_SECONDS};

/// The configured name of the caller a call was let through for (`-` when callers are
/// not configured), which authorization puts in the answer's extensions: the `caller`
/// label of `portcullis_admin_calls_total`, bounded by the callers' table.
#[derive(Debug, Clone)]
pub struct CallerName(pub Arc<str>);

/// gRPC's status codes, by number (`grpc/status.h`), as metric label values.
const CODES: [&str; 17] = [
    "ok",
    "cancelled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
];

/// One RPC's metric handles, each made on its first use (an RPC never called shows no
/// series).
struct Handles {
    duration: OnceLock<metrics::Histogram>,
    calls: [OnceLock<metrics::Counter>; CODES.len()],
}

impl Handles {
    fn new() -> Self {
        Self { duration: OnceLock::new(), calls: std::array::from_fn(|_| OnceLock::new()) }
    }

    fn took(&self, rpc: Rpc, seconds: f64) {
        self.duration
            .get_or_init(|| metrics::histogram!(RPC_SECONDS, "rpc" => rpc.method()))
            .record(seconds);
    }

    fn count(&self, rpc: Rpc, code: Code) {
        let index = (code as usize).min(CODES.len() - 1);
        self.calls[index]
            .get_or_init(
                || metrics::counter!(RPC_CALLS, "rpc" => rpc.method(), "code" => CODES[index]),
            )
            .increment(1);
    }
}

/// The tower layer of [`RpcCalls`], with a set of handles per RPC of the table.
#[derive(Clone)]
pub struct RpcCallsLayer {
    handles: Arc<[Handles]>,
}

impl Default for RpcCallsLayer {
    fn default() -> Self {
        Self { handles: Rpc::ALL.iter().map(|_| Handles::new()).collect() }
    }
}

impl<S> tower::Layer<S> for RpcCallsLayer {
    type Service = RpcCalls<S>;

    fn layer(&self, inner: S) -> RpcCalls<S> {
        RpcCalls { inner, handles: self.handles.clone() }
    }
}

/// See [`RpcCallsLayer`].
#[derive(Clone)]
pub struct RpcCalls<S> {
    inner: S,
    handles: Arc<[Handles]>,
}

/// One call in flight: counted as `cancelled` if dropped before its answer.
struct InFlight {
    rpc: Rpc,
    handles: Arc<[Handles]>,
    started: Instant,
    answered: bool,
}

impl InFlight {
    fn handles(&self) -> &Handles {
        // The handles are made from `Rpc::ALL`, whose order is the variants' own.
        &self.handles[self.rpc as usize]
    }

    /// Records the answer's code on the metrics and the current span (the call's); an
    /// operator call answered OK is counted by its caller too.
    fn answered(mut self, code: Code, caller: Option<&CallerName>) {
        self.answered = true;
        let handles = self.handles();
        handles.count(self.rpc, code);
        if code == Code::Ok && self.rpc.service() == Service::Admin {
            let caller = caller.map_or("-", |c| &*c.0).to_owned();
            metrics::counter!(ADMIN_CALLS, "rpc" => self.rpc.method(), "caller" => caller)
                .increment(1);
        }
        handles.took(self.rpc, self.started.elapsed().as_secs_f64());
        let span = Span::current();
        span.record("rpc.grpc.status_code", code as i64);
        match code {
            Code::InvalidArgument => super::traces::record_outcome("invalid_argument", None),
            Code::Internal => super::traces::record_outcome("internal", None),
            _ => {}
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if !self.answered {
            self.handles().count(self.rpc, Code::Cancelled);
        }
    }
}

/// The code of a response: its `grpc-status` header, else `OK` (see the module docs).
fn code<B>(response: &http::Response<B>) -> Code {
    response
        .headers()
        .get("grpc-status")
        .and_then(|v| std::str::from_utf8(v.as_bytes()).ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map_or(Code::Ok, Code::from_i32)
}

impl<S, B, RB> tower::Service<http::Request<B>> for RpcCalls<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let in_flight = Rpc::from_path(req.uri().path()).map(|rpc| InFlight {
            rpc,
            handles: self.handles.clone(),
            started: Instant::now(),
            answered: false,
        });
        let answer = self.inner.call(req);
        Box::pin(async move {
            let answer = answer.await;
            if let Some(in_flight) = in_flight {
                match &answer {
                    Ok(response) => in_flight.answered(code(response), response.extensions().get()),
                    Err(_) => in_flight.answered(Code::Unknown, None),
                }
            }
            answer
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handles_are_indexed_by_the_variant_and_the_codes_by_number() {
        for (i, rpc) in Rpc::ALL.iter().enumerate() {
            assert_eq!(*rpc as usize, i, "{rpc:?}");
        }
        assert_eq!(CODES[Code::Unauthenticated as usize], "unauthenticated");
        assert_eq!(CODES[Code::Cancelled as usize], "cancelled");
        assert_eq!(CODES.len(), Code::Unauthenticated as usize + 1);
    }
}
