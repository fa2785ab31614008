//! The Redis store: one Lua script per operation (see `lua/*.lua` for each script's
//! KEYS/ARGV contract), through a deadpool-redis pool of multiplexed connections.
//!
//! `redis::Script` sends EVALSHA and, on NOSCRIPT (after `SCRIPT FLUSH` or a restart),
//! loads the script and sends it again. NOSCRIPT means the script did not run, so the
//! retry never counts an attempt twice.

use std::sync::OnceLock;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_redis::{Manager, Pool, Runtime};
use redis::{AsyncConnectionConfig, Script, ScriptInvocation};

use super::keys::{AccountKey, AttemptId, KeySecret};
use super::{Counted, Inspection, Store, StoreError};
use crate::throttle::{Policy, Record};

fn record_attempt_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("lua/record_attempt.lua")))
}

fn admit_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("lua/admit.lua")))
}

fn refund_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("lua/refund.lua")))
}

fn clear_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("lua/clear.lua")))
}

fn inspect_script() -> &'static Script {
    static SCRIPT: OnceLock<Script> = OnceLock::new();
    SCRIPT.get_or_init(|| Script::new(include_str!("lua/inspect.lua")))
}

/// Attempt records in a shared Redis.
pub struct RedisStore {
    pool: Pool,
    /// Keys attempt ids (account keys arrive already derived).
    secret: KeySecret,
    /// Deadline of a whole operation: pool wait, connect, script, reply.
    operation_timeout: Duration,
}

impl RedisStore {
    /// Builds the pool; connects lazily, so a daemon starts while Redis is down and its
    /// health stays NOT_SERVING until Redis answers.
    ///
    /// # Errors
    /// [`StoreError::Pool`] for a URL redis-rs cannot open.
    pub fn new(
        url: &str,
        secret: KeySecret,
        operation_timeout: Duration,
        pool_size: usize,
    ) -> Result<Self, StoreError> {
        let connection = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(operation_timeout))
            .set_response_timeout(Some(operation_timeout));
        let manager = Manager::new_with_config(url, connection).map_err(StoreError::Command)?;
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(operation_timeout))
            .create_timeout(Some(operation_timeout))
            .recycle_timeout(Some(operation_timeout))
            .build()
            .map_err(|e| StoreError::Pool(Box::new(e)))?;
        Ok(Self { pool, secret, operation_timeout })
    }

    /// Runs one script invocation on a pooled connection under the operation deadline.
    /// The connection goes back to the pool when the reply arrives, never held across
    /// unrelated awaits.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        call: &ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        self.deadline(async {
            let mut conn = self.connection().await?;
            call.invoke_async(&mut conn).await.map_err(StoreError::Command)
        })
        .await
    }

    async fn connection(&self) -> Result<deadpool_redis::Connection, StoreError> {
        self.pool.get().await.map_err(|e| StoreError::Pool(Box::new(e)))
    }

    async fn deadline<T>(
        &self,
        work: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        tokio::time::timeout(self.operation_timeout, work)
            .await
            .map_err(|_| StoreError::Timeout(self.operation_timeout))?
    }
}

#[async_trait]
impl Store for RedisStore {
    async fn is_open(&self, key: &AccountKey, policy: &Policy) -> Result<bool, StoreError> {
        let mut call = admit_script().key(key.record());
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
        let mut call = record_attempt_script().key(key.record());
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
        let mut call = refund_script().key(key.record());
        if let Some(id) = attempt_id {
            call.key(key.attempt(&self.secret, id));
        }
        call.arg(window_start_ms);
        let _refunded: i64 = self.invoke(&call).await?;
        Ok(())
    }

    async fn clear(&self, key: &AccountKey) -> Result<(), StoreError> {
        let call = clear_script().key(key.record());
        let _deleted: i64 = self.invoke(&call).await?;
        Ok(())
    }

    async fn inspect(&self, key: &AccountKey) -> Result<Inspection, StoreError> {
        let call = inspect_script().key(key.record());
        let reply: Vec<i64> = self.invoke(&call).await?;
        let [exists, failures, window_start_ms, step, now_ms] = reply[..] else {
            return Err(StoreError::Protocol(format!("inspect returned {} values", reply.len())));
        };
        let field = |v: i64, name: &str| {
            u64::try_from(v).map_err(|_| StoreError::Protocol(format!("inspect: negative {name}")))
        };
        let record = match exists {
            0 => None,
            1 => Some(Record {
                failures: field(failures, "failures")?,
                window_start_ms: field(window_start_ms, "window start")?,
                step: u32::try_from(step)
                    .map_err(|_| StoreError::Protocol("inspect: step out of range".into()))?,
            }),
            other => return Err(StoreError::Protocol(format!("inspect exists={other}"))),
        };
        Ok(Inspection { record, now_ms: field(now_ms, "time")? })
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.deadline(async {
            let mut conn = self.connection().await?;
            redis::cmd("PING").query_async::<String>(&mut conn).await.map_err(StoreError::Command)
        })
        .await
        .map(drop)
    }
}
