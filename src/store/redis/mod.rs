//! The Redis store: one Lua script per operation (`scripts`; each script under `lua/`
//! opens with its KEYS/ARGV contract), over a few long-lived multiplexed connections that a
//! deadpool pool creates, shares and replaces (`pool`). Each call costs exactly one
//! Redis command on the hot path, the script: no `PING`, no `UNWATCH` (the store's part of
//! docs/architecture.md's "Atomicity belongs to the store").
//!
//! Three shapes (docs/architecture.md's fleet store), one module each, all built on deadpool
//! and redis-rs (over TLS with `rediss://`, [`settings::RedisTls`]), sharing the scripts,
//! the error mapping and the safety checks here:
//! `standalone` (`store.redis_url`), `cluster` (`store.redis_cluster_nodes`: the library
//! follows MOVED/ASK and refreshes the slot map; every script's keys share one hash tag,
//! so each script runs on one node) and `sentinel` (`store.redis_sentinel`: each new
//! connection asks the Sentinels for the current master). [`settings`] holds the validated
//! configuration, passwords redacted.
//!
//! Store safety ([`RedisStore::ping`], also run once at start-up): a `maxmemory-policy`
//! that evicts keys could silently delete a lockout record, so it is refused (health
//! NOT_SERVING, every operation an error) unless `store.allow_eviction` is set. With
//! `store.wait_replicas = N` a counted attempt is answered only after `WAIT N` confirms
//! that N replicas have it, sent in one pipeline right behind the script on the same
//! connection. Every failure is a [`StoreError`], which the service answers with
//! `UNAVAILABLE` (fail closed).

pub mod attempt_count;
mod breached_count;
mod candidate_report;
mod cluster;
mod devices;
mod error;
mod info;
mod invocation;
mod key_check;
mod network_bucket;
mod pool;
mod realm_tally;
mod repeat_list;
mod scripts;
pub use scripts::RECORD_ATTEMPT_SOURCE;
mod send_log;
mod sentinel;
pub mod settings;
mod spray_window;
mod standalone;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::{ErrorKind, ServerErrorKind};

use super::Store;
use super::error::StoreError;
use crate::secret::KeyCheck;
use crate::store::key_check::{KeyCheckMode, ROTATION_PAUSE};
use error::{command, retires_connection};
use info::{NON_EVICTING_POLICIES, eviction_policies, fullest_node, info_text, node_texts};
use key_check::{KeyProof, Proof, invoke as key_check_invoke};
use pool::{LeanPool, Tracked};
use settings::{RedisSettings, RedisShape};

use crate::telemetry::metrics::{EVICTION_ALLOWED_GAUGE, MEMORY_LIMIT_GAUGE, MEMORY_USED_GAUGE};

/// Attempt records in a shared Redis.
pub struct RedisStore {
    /// The connections of the configured shape.
    connections: Connections,
    /// Deadline of a whole operation: checkout (or connect), script, reply, `WAIT`.
    operation_timeout: Duration,
    /// Serve although a node may evict keys.
    allow_eviction: bool,
    /// Set while the last safety check found an evicting policy that is not allowed:
    /// every operation is then refused.
    unsafe_policy: AtomicBool,
    /// Replicas that must confirm a counted attempt, and the longest wait for them.
    wait: Option<(u32, Duration)>,
    /// How long an attempt id's answer is kept, in ms (`store.attempt_id_horizon`).
    attempt_ttl_ms: u64,
    /// The key check every new connection and every readiness check proves; shared
    /// with the pool's manager ([`key_check`]).
    proof: Arc<KeyProof>,
}

/// The pool of each store shape.
enum Connections {
    /// One Redis (or a proxy in front of one).
    Standalone(LeanPool<deadpool_redis::Manager>),
    /// A Redis Cluster; each pooled connection reaches every node.
    Cluster(LeanPool<cluster::Manager>),
    /// The master the Sentinels name.
    Sentinel(LeanPool<sentinel::Manager>),
}

/// A shared handle on one pooled connection, whatever the shape.
enum Connection {
    Multiplexed(Tracked<MultiplexedConnection>),
    Cluster(Tracked<ClusterConnection>),
}

impl Connection {
    fn retire(&self) {
        match self {
            Connection::Multiplexed(c) => c.retire(),
            Connection::Cluster(c) => c.retire(),
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
            Connection::Cluster(c) => c.conn.req_packed_command(cmd),
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
            Connection::Cluster(c) => c.conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Multiplexed(c) => c.conn.get_db(),
            Connection::Cluster(c) => c.conn.get_db(),
        }
    }
}

/// Makes ring the process's default rustls provider, unless one is installed already.
/// redis-rs builds its `rediss://` client configurations from that default; without
/// one, rustls picks the provider its crate features name and panics if they name more
/// than one. (The daemon's listener names ring explicitly and needs no default.)
fn install_crypto_provider() {
    // An error only says a default is installed already: that one stays.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl RedisStore {
    /// A store on one Redis at `url` (`redis://` or `rediss://`, credentials in the URL),
    /// with at most `pool_size` multiplexed connections and the other settings' defaults.
    ///
    /// # Errors
    /// As [`Self::open`].
    pub fn new(
        url: &str,
        operation_timeout: Duration,
        pool_size: usize,
    ) -> Result<Self, StoreError> {
        Self::open(&RedisSettings::standalone(url, operation_timeout, pool_size))
    }

    /// A store of the configured shape. Connects lazily, so a daemon starts while Redis
    /// is down and its health stays NOT_SERVING until Redis answers.
    ///
    /// # Errors
    /// [`StoreError::Command`] for a URL redis-rs cannot open, [`StoreError::Pool`] when
    /// the pool cannot be built.
    pub fn open(settings: &RedisSettings) -> Result<Self, StoreError> {
        install_crypto_provider();
        let (timeout, size) = (settings.operation_timeout, settings.pool_size);
        let (credentials, tls) = (&settings.credentials, &settings.tls);
        let proof = Arc::new(KeyProof::default());
        proof.set_claim_wait(settings.key_check_claim_wait);
        let shared = proof.clone();
        let connections = match &settings.shape {
            RedisShape::Standalone { url } => Connections::Standalone(standalone::pool(
                url,
                credentials,
                tls,
                timeout,
                size,
                shared,
            )?),
            RedisShape::Cluster { nodes } => {
                Connections::Cluster(cluster::pool(nodes, credentials, tls, timeout, size, shared)?)
            }
            RedisShape::Sentinel { master_name, nodes } => Connections::Sentinel(sentinel::pool(
                master_name,
                nodes,
                credentials,
                tls,
                timeout,
                size,
                shared,
            )?),
        };
        Ok(Self {
            connections,
            operation_timeout: timeout,
            allow_eviction: settings.allow_eviction,
            unsafe_policy: AtomicBool::new(false),
            wait: (settings.wait_replicas > 0)
                .then_some((settings.wait_replicas, settings.wait_timeout)),
            attempt_ttl_ms: crate::throttle::duration_ms(settings.attempt_id_horizon),
            proof,
        })
    }

    /// Runs one script invocation under the operation deadline on a shared pooled
    /// connection. A failure that makes the connection unfit (see
    /// [`retires_connection`]), or the deadline passing, retires it.
    async fn invoke<T: redis::FromRedisValue>(
        &self,
        call: &invocation::Invocation,
    ) -> Result<T, StoreError> {
        self.refuse_if_unsafe()?;
        self.on_connection(async |conn| call.invoke_async(conn).await).await
    }

    /// As [`Self::invoke`], and with `store.wait_replicas` set, `WAIT` pipelined right
    /// behind the script on the same connection: the answer comes only once enough
    /// replicas confirm, else [`StoreError::Replication`].
    async fn invoke_counted<T: redis::FromRedisValue>(
        &self,
        call: &invocation::Invocation,
    ) -> Result<T, StoreError> {
        let Some((replicas, wait_timeout)) = self.wait else {
            return self.invoke(call).await;
        };
        self.refuse_if_unsafe()?;
        let millis = u64::try_from(wait_timeout.as_millis()).unwrap_or(u64::MAX).max(1);
        let (reply, confirmed): (T, u32) = self
            .on_connection(async |conn| {
                let mut pipe = redis::pipe();
                pipe.add_command(call.command().clone()).cmd("WAIT").arg(replicas).arg(millis);
                match pipe.query_async(conn).await {
                    // The pipeline stops nothing: on NOSCRIPT the script did not run
                    // (WAIT did, harmlessly). Load it where the key lives and resend.
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        call.load_async(conn).await?;
                        pipe.query_async(conn).await
                    }
                    other => other,
                }
            })
            .await?;
        if confirmed < replicas {
            return Err(StoreError::Replication { wanted: replicas, confirmed });
        }
        Ok(reply)
    }

    fn refuse_if_unsafe(&self) -> Result<(), StoreError> {
        self.proof.refuse()?;
        if self.unsafe_policy.load(Ordering::Relaxed) {
            Err(StoreError::Unsafe("maxmemory-policy evicts keys".into()))
        } else {
            Ok(())
        }
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
                command(e)
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
        // A connection whose key check failed is never created: that is the mismatch.
        let pool_error = |e: Box<dyn std::error::Error + Send + Sync>| {
            self.proof.refuse().err().unwrap_or(StoreError::Pool(e))
        };
        Ok(match &self.connections {
            Connections::Standalone(pool) => Connection::Multiplexed(
                pool.get().await.map_err(|e| pool_error(Box::new(e)))?.share(),
            ),
            Connections::Cluster(pool) => {
                Connection::Cluster(pool.get().await.map_err(|e| pool_error(Box::new(e)))?.share())
            }
            Connections::Sentinel(pool) => Connection::Multiplexed(
                pool.get().await.map_err(|e| pool_error(Box::new(e)))?.share(),
            ),
        })
    }

    /// Reads `INFO memory` (every master of a cluster), reports the memory gauges
    /// ([`MEMORY_USED_GAUGE`], [`MEMORY_LIMIT_GAUGE`]), and applies the eviction rule:
    /// an evicting `maxmemory-policy` is refused unless allowed, and then reported by
    /// a warning and the [`EVICTION_ALLOWED_GAUGE`] gauge. `INFO`, not `CONFIG GET`:
    /// managed Redis services disable `CONFIG`.
    async fn check_safety(&self) -> Result<(), StoreError> {
        let value: redis::Value = self
            .on_connection(async |conn| redis::cmd("INFO").arg("memory").query_async(conn).await)
            .await?;
        if let Some((used, limit)) = fullest_node(&node_texts(&value)) {
            metrics::gauge!(MEMORY_USED_GAUGE).set(used as f64);
            metrics::gauge!(MEMORY_LIMIT_GAUGE).set(limit as f64);
        }
        let policies = eviction_policies(&info_text(&value));
        if policies.is_empty() {
            return Err(StoreError::Protocol("INFO memory has no maxmemory_policy".into()));
        }
        let evicting: Vec<&String> =
            policies.iter().filter(|p| !NON_EVICTING_POLICIES.contains(&p.as_str())).collect();
        let Some(policy) = evicting.first() else {
            self.unsafe_policy.store(false, Ordering::Relaxed);
            metrics::gauge!(EVICTION_ALLOWED_GAUGE).set(0.0);
            return Ok(());
        };
        if self.allow_eviction {
            if !self.unsafe_policy.swap(false, Ordering::Relaxed) {
                // Logged on every check would flood; once per daemon is enough with the gauge.
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    tracing::warn!(
                        policy = %policy,
                        "store: Redis maxmemory-policy {policy} may evict keys, lockout records \
                         among them; serving because store.allow_eviction = true"
                    );
                });
            }
            metrics::gauge!(EVICTION_ALLOWED_GAUGE).set(1.0);
            Ok(())
        } else {
            self.unsafe_policy.store(true, Ordering::Relaxed);
            Err(StoreError::Unsafe(format!(
                "Redis maxmemory-policy is {policy}, which may evict lockout records; \
                 set it to noeviction, or set store.allow_eviction = true to serve anyway"
            )))
        }
    }
}

#[async_trait]
impl Store for RedisStore {
    /// Health: the store answers `INFO` and its eviction policy is safe (or allowed).
    async fn ping(&self) -> Result<(), StoreError> {
        self.check_safety().await
    }

    /// Readiness: the key check holds (proven again, so a rotation or a store that lost
    /// the value is seen within a health interval), then [`Self::ping`].
    async fn ready(&self) -> Result<(), StoreError> {
        self.prove_key_check().await?;
        self.check_safety().await
    }

    fn refusal(&self) -> Result<(), StoreError> {
        self.proof.refuse()
    }
}

/// The key check on Redis (docs/store.md, "One key secret per store"; the proof each
/// connection makes is `key_check::KeyProof`).
impl RedisStore {
    /// Proves `check` (this daemon's key secret's, [`KeySecret::store_check`]) on every
    /// connection before it is used and on every readiness check; while the store holds
    /// another daemon's value, every operation is refused with
    /// [`StoreError::KeySecretMismatch`] (docs/store.md, "One key secret per store").
    /// The daemon always sets it; a store without one (tests, tools) proves nothing.
    /// Call it before the first operation.
    ///
    /// [`KeySecret::store_check`]: crate::secret::KeySecret::store_check
    pub fn with_key_check(self, check: KeyCheck) -> Self {
        self.proof.set(check);
        self
    }

    /// Proves the key check once (readiness).
    ///
    /// # Errors
    /// [`StoreError::KeySecretMismatch`] when the store holds another value; any other
    /// [`StoreError`] when Redis cannot answer.
    pub(super) async fn prove_key_check(&self) -> Result<(), StoreError> {
        let proof = self.proof.clone();
        let proved =
            self.on_connection(async move |conn| proof.run(conn, KeyCheckMode::Prove).await).await;
        match proved? {
            Proof::Held => Ok(()),
            Proof::Other => Err(StoreError::KeySecretMismatch),
            Proof::Pending => Err(StoreError::KeyCheckPending),
        }
    }

    /// How long this daemon, once it finds no key check value in the store before it
    /// ever proved its own, waits for the daemons already serving the store to write
    /// theirs back before it writes its own (`store.key_check_claim_wait`; docs/store.md,
    /// "One key secret per store"); replaces what the settings said. Call it before the
    /// first operation.
    pub fn with_claim_wait(self, wait: Duration) -> Self {
        self.proof.set_claim_wait(wait);
        self
    }

    /// The operator's rotation step (`portcullis adopt-key-secret`), in two writes so
    /// that no two key secrets ever serve at once: first the store is *closed* (a value
    /// no key secret gives, so every daemon refuses at its next check), then, after
    /// [`ROTATION_PAUSE`] (three health intervals: every daemon has checked by then),
    /// its value becomes `check`'s and the daemons holding that secret serve at their
    /// next check. Call it on a store opened without [`Self::with_key_check`].
    ///
    /// # Errors
    /// [`StoreError`] when Redis cannot answer (after the first write the store stays
    /// closed: run the command again).
    pub async fn adopt_key_check(&self, check: &KeyCheck) -> Result<(), StoreError> {
        let closed = KeyCheck::closed();
        self.on_connection(async |conn| key_check_invoke(conn, &closed, KeyCheckMode::Adopt).await)
            .await?;
        tokio::time::sleep(ROTATION_PAUSE).await;
        let held = self
            .on_connection(async |conn| key_check_invoke(conn, check, KeyCheckMode::Adopt).await)
            .await?;
        if check.matches(&held) {
            Ok(())
        } else {
            Err(StoreError::Protocol("key_check did not keep the adopted value".into()))
        }
    }
}
