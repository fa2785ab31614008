//! Long-lived multiplexed connections, managed by deadpool, checked without a round trip.
//!
//! deadpool-redis's managers check every connection on every checkout with `UNWATCH` +
//! `PING`: two extra commands (one round trip) per script call, which cost the throttle
//! most of its throughput (docs/performance-log.md). A multiplexed connection does not
//! need that: it is shared, pipelines concurrent requests, and is never left inside a
//! `MULTI`/`WATCH` (the store sends only scripts). So [`Lean`] wraps a deadpool-redis
//! manager, keeps its `create` (connection set-up, TLS, credentials, cluster topology,
//! Sentinel discovery) and replaces its `recycle` with a flag read: a connection is
//! replaced when a call on it failed in a way that makes it unfit ([`Tracked::retire`]),
//! never pinged.
//!
//! [`Lean`] also proves the daemon's key secret on every connection it creates
//! ([`super::key_check`]), so a reconnect is never used unproven.
//!
//! A checkout clones the connection out of the pool object and hands the object back at
//! once, so many calls share one connection at a time (redis-rs pipelines them) and the
//! pool (FIFO) rotates them over its few connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use redis::RedisError;

use super::key_check::KeyProof;

/// A deadpool manager of Redis connections (deadpool-redis's, or the cluster and
/// Sentinel ones of this store) whose checkout costs no Redis command.
pub(super) struct Lean<M> {
    /// Creates the connections.
    pub manager: M,
    /// Proven on every new connection before it is handed out.
    pub proof: Arc<KeyProof>,
}

/// A connection and the flag that retires it.
pub(super) struct Tracked<C> {
    /// The multiplexed (or cluster) connection; clones share one socket and driver.
    pub conn: C,
    /// Set by any clone whose call failed in a way that makes the connection unfit:
    /// the pool drops it at its next checkout and creates a fresh one.
    pub retired: Arc<AtomicBool>,
}

impl<C: Clone> Tracked<C> {
    /// A handle on the same connection (and the same retire flag).
    pub fn share(&self) -> Self {
        Self { conn: self.conn.clone(), retired: self.retired.clone() }
    }

    /// Marks the connection unfit: no new call takes it from the pool.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }
}

impl<M> managed::Manager for Lean<M>
where
    M: managed::Manager<Error = RedisError>,
    M::Type: Clone + Sync + Send + redis::aio::ConnectionLike,
{
    type Type = Tracked<M::Type>;
    type Error = RedisError;

    /// Boxed: setting a connection up (TCP, TLS, credentials, topology, the key check)
    /// is a future of about 10 KB. Unboxed it is part of deadpool's `get` future, so
    /// of every store call's future, which is moved (copied whole) on every call; boxed,
    /// it is copied only when a connection is made.
    fn create(&self) -> impl Future<Output = Result<Self::Type, RedisError>> + Send {
        Box::pin(async move {
            let mut conn = self.manager.create().await?;
            self.proof.on_connect(&mut conn).await?;
            Ok(Tracked { conn, retired: Arc::new(AtomicBool::new(false)) })
        })
    }

    async fn recycle(&self, obj: &mut Self::Type, _: &Metrics) -> RecycleResult<RedisError> {
        if obj.retired.load(Ordering::Relaxed) {
            Err(RecycleError::message("connection retired after a failed call"))
        } else {
            Ok(())
        }
    }
}

/// The pool of one store shape.
pub(super) type LeanPool<M> = managed::Pool<Lean<M>>;
