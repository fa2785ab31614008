//! The Redis store: one Lua script per operation ([`scripts`]; see `lua/*.lua` for each
//! script's KEYS/ARGV contract), over a few long-lived multiplexed connections that a
//! deadpool pool creates, shares and replaces ([`pool`]). Each call costs exactly one
//! Redis command on the hot path, the script: no `PING`, no `UNWATCH` (the store's part of
//! DESIGN.md's "Atomicity belongs to the store").
//!
//! Layout: `standalone` (one Redis URL) builds the pool; `pool` holds connections
//! without per-checkout round trips; `scripts` holds the scripts every shape shares; and
//! [`retires_connection`] is the one place that decides which failures make a connection
//! unfit for reuse. Every failure is a [`StoreError`], which the service answers with
//! `UNAVAILABLE` (fail closed).

mod pool;
mod scripts;
mod standalone;

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use redis::{ErrorKind, RedisError, ScriptInvocation, ServerErrorKind};

use super::keys::{AccountKey, AttemptId, KeySecret};
use super::{Counted, Store, StoreError};
use crate::throttle::Policy;
use pool::{LeanPool, Tracked};

/// Attempt records in a shared Redis.
pub struct RedisStore {
    /// The connections of the configured shape.
    connections: Connections,
    /// Keys attempt ids (account keys arrive already derived).
    secret: KeySecret,
    /// Deadline of a whole operation: checkout (or connect), script, reply.
    operation_timeout: Duration,
}

/// The pool of each store shape.
enum Connections {
    /// One Redis (or a proxy in front of one).
    Standalone(LeanPool<deadpool_redis::Manager>),
}

/// A shared handle on one pooled connection, whatever the shape.
enum Connection {
    Multiplexed(Tracked<MultiplexedConnection>),
}

impl Connection {
    fn retire(&self) {
        match self {
            Connection::Multiplexed(c) => c.retire(),
        }
    }
}

impl redis::aio::ConnectionLike for Connection {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Connection::Multiplexed(c) => c.conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Connection::Multiplexed(c) => c.conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Multiplexed(c) => c.conn.get_db(),
        }
    }
}

/// Whether a failed call makes its connection unfit for the next one, so the pool
/// replaces it instead of handing it out again: a broken or timed-out socket, and
/// `READONLY` (the node was demoted to a replica in a failover; a fresh connection
/// finds the new master). Other server errors (`OOM`, a script's `assert`) leave the
/// connection fine. Either way the call itself is a [`StoreError`].
pub fn retires_connection(error: &RedisError) -> bool {
    error.is_unrecoverable_error()
        || error.is_io_error()
        || error.is_connection_dropped()
        || error.is_timeout()
        || error.kind() == ErrorKind::Server(ServerErrorKind::ReadOnly)
}

impl RedisStore {
    /// A store on one Redis at `url` (`redis://` or `rediss://`, credentials in the URL),
    /// with at most `pool_size` multiplexed connections. Connects lazily, so a daemon
    /// starts while Redis is down and its health stays NOT_SERVING until Redis answers.
    ///
    /// # Errors
    /// [`StoreError::Command`] for a URL redis-rs cannot open, [`StoreError::Pool`] when
    /// the pool cannot be built.
    pub fn new(
        url: &str,
        secret: KeySecret,
        operation_timeout: Duration,
        pool_size: usize,
    ) -> Result<Self, StoreError> {
        let pool = standalone::pool(url, operation_timeout, pool_size)?;
        Ok(Self { connections: Connections::Standalone(pool), secret, operation_timeout })
    }

    /// Runs one script invocation under the operation deadline on a shared pooled
    /// connection. A failure that makes the connection unfit (see
    /// [`retires_connection`]), or the deadline passing, retires it.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        call: &ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.on_connection(async |conn| call.invoke_async(conn).await).await
    }

    /// Runs `work` on a shared connection under the operation deadline.
    async fn on_connection<T>(
        &self,
        work: impl AsyncFnOnce(&mut Connection) -> redis::RedisResult<T>,
    ) -> Result<T, StoreError> {
        let mut used: Option<Connection> = None;
        let outcome = tokio::time::timeout(self.operation_timeout, async {
            let conn = used.insert(self.connection().await?);
            work(conn).await.map_err(|e| {
                if retires_connection(&e) {
                    conn.retire();
                }
                StoreError::Command(e)
            })
        })
        .await;
        match outcome {
            Ok(result) => result,
            Err(_elapsed) => {
                // A reply that never came: the socket may be dead without a reset.
                if let Some(conn) = &used {
                    conn.retire();
                }
                Err(StoreError::Timeout(self.operation_timeout))
            }
        }
    }

    /// A handle on one of the pool's connections. The pool object goes back at once:
    /// the handle shares the connection, so concurrent calls pipeline on it.
    async fn connection(&self) -> Result<Connection, StoreError> {
        match &self.connections {
            Connections::Standalone(pool) => {
                let object = pool.get().await.map_err(|e| StoreError::Pool(Box::new(e)))?;
                Ok(Connection::Multiplexed(object.share()))
            }
        }
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn is_open(&self, key: &AccountKey, policy: &Policy) -> Result<bool, StoreError> {
        let mut call = scripts::admit().key(key.record());
        call.arg(policy.max_failures)
            .arg(policy.window_ms(0))
            .arg(policy.window_ms(policy.max_step()));
        let open: i64 = self.invoke(&call).await?;
        match open {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(StoreError::Protocol(format!("admit returned {other}"))),
        }
    }

    async fn record_attempt(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptId>,
        policy: &Policy,
    ) -> Result<Counted, StoreError> {
        let mut call = scripts::record_attempt().key(key.record());
        if let Some(id) = attempt_id {
            call.key(key.attempt(&self.secret, id));
        }
        call.arg(policy.max_failures)
            .arg(policy.window_ms(0))
            .arg(policy.window_ms(policy.max_step()))
            .arg(policy.retention_ms())
            .arg(u8::from(policy.escalates()))
            .arg(policy.max_step());
        let reply: Vec<i64> = self.invoke(&call).await?;
        let [allowed, failures, _step, window_start_ms, replays] = reply[..] else {
            return Err(StoreError::Protocol(format!(
                "record_attempt returned {} values",
                reply.len()
            )));
        };
        let allowed = match allowed {
            1 => true,
            0 => false,
            other => {
                return Err(StoreError::Protocol(format!("record_attempt allowed={other}")));
            }
        };
        Ok(Counted {
            allowed,
            // A replay reports failures = -1: never a lockout.
            locked_now: u64::try_from(failures).is_ok_and(|f| policy.locks_at(f)),
            window_start_ms: u64::try_from(window_start_ms)
                .map_err(|_| StoreError::Protocol("negative window start".into()))?,
            replays: u64::try_from(replays)
                .map_err(|_| StoreError::Protocol("negative replay count".into()))?,
        })
    }

    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptId>,
        window_start_ms: u64,
    ) -> Result<(), StoreError> {
        let mut call = scripts::refund().key(key.record());
        if let Some(id) = attempt_id {
            call.key(key.attempt(&self.secret, id));
        }
        call.arg(window_start_ms);
        let _refunded: i64 = self.invoke(&call).await?;
        Ok(())
    }

    async fn clear(&self, key: &AccountKey) -> Result<(), StoreError> {
        let call = scripts::clear().key(key.record());
        let _deleted: i64 = self.invoke(&call).await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.on_connection(async |conn| redis::cmd("PING").query_async::<String>(conn).await)
            .await
            .map(drop)
    }
}
