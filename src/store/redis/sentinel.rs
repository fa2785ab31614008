//! A Sentinel-monitored master (`store.redis_sentinel`) through redis-rs's
//! `SentinelClient`: each new connection asks the Sentinels which node is the master
//! of `master_name` (and redis-rs checks that node's `ROLE`). After a failover the old
//! master answers READONLY or not at all; that connection is retired
//! ([`super::error::retires_connection`]) and its replacement finds the promoted node. Scripts
//! missing there are loaded on `NOSCRIPT`.
//!
//! TLS: `rediss://` Sentinel URLs mean TLS to the Sentinels and to the master they name,
//! both verified against [`RedisTls`] (and presenting its client certificate, if any).

use std::sync::Arc;
use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleResult};
use redis::aio::MultiplexedConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{ConnectionAddr, IntoConnectionInfo, RedisError, TlsMode};
use tokio::sync::Mutex;

use super::error::command;
use super::key_check::KeyProof;
use super::pool::{Lean, LeanPool};
use super::settings::{Credentials, RedisTls, sentinel_credentials};
use super::standalone::build;
use crate::store::error::StoreError;

/// Creates connections to the master the Sentinels name. deadpool-redis's sentinel
/// manager takes no TLS certificates, hence this one; [`Lean`] replaces its `recycle`.
pub(super) struct Manager(Mutex<SentinelClient>);

impl managed::Manager for Manager {
    type Type = MultiplexedConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<MultiplexedConnection, RedisError> {
        self.0.lock().await.get_async_connection().await
    }

    async fn recycle(
        &self,
        _: &mut MultiplexedConnection,
        _: &Metrics,
    ) -> RecycleResult<RedisError> {
        Ok(())
    }
}

/// The pool of the master named `master_name` by the Sentinels at `nodes`.
///
/// The Sentinels' own user and password come from their URLs (the same in every URL:
/// redis-rs applies one pair to all Sentinels), the data nodes' from `credentials`.
pub(super) fn pool(
    master_name: &str,
    nodes: &[String],
    credentials: &Credentials,
    tls: &RedisTls,
    operation_timeout: Duration,
    pool_size: usize,
    proof: Arc<KeyProof>,
) -> Result<LeanPool<Manager>, StoreError> {
    let infos = nodes
        .iter()
        .map(|url| url.as_str().into_connection_info())
        .collect::<Result<Vec<_>, _>>()
        .map_err(command)?;
    let (user, password) = sentinel_credentials(nodes).map_err(command)?;
    let mut builder = SentinelClientBuilder::new(
        infos.iter().map(|i| i.addr().clone()),
        master_name,
        SentinelServerType::Master,
    )
    .map_err(command)?;
    if let Some(user) = user {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let Some(user) = &credentials.username {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = &credentials.password {
        builder = builder.set_client_to_redis_password(password);
    }
    // The data nodes use TLS when the Sentinels do.
    if infos.iter().any(|i| matches!(i.addr(), ConnectionAddr::TcpTls { .. })) {
        builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
    }
    if let Some(certificates) = tls.certificates() {
        // Refused by the builder for a `redis://` Sentinel: certificates never go unused.
        builder = builder
            .set_client_to_sentinel_certificates(certificates.clone())
            .set_client_to_redis_certificates(certificates);
    }
    let client = builder.build().map_err(command)?;
    build(Lean { manager: Manager(Mutex::new(client)), proof }, operation_timeout, pool_size)
}
