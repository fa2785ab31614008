//! A Sentinel-monitored master (`store.redis_sentinel`) through deadpool-redis's
//! `sentinel` manager: each new connection asks the Sentinels which node is the master
//! of `master_name` (and redis-rs checks that node's `ROLE`). After a failover the old
//! master answers READONLY or not at all; that connection is retired
//! ([`super::retires_connection`]) and its replacement finds the promoted node. Scripts
//! missing there are loaded on `NOSCRIPT`.

use std::time::Duration;

use deadpool_redis::sentinel::{SentinelNodeConnectionInfo, SentinelServerType, TlsMode};

use super::pool::{Lean, LeanPool};
use super::settings::Credentials;
use super::standalone::build;
use crate::store::StoreError;

/// The pool of the master named `master_name` by the Sentinels at `nodes`.
pub(super) fn pool(
    master_name: &str,
    nodes: &[String],
    credentials: &Credentials,
    operation_timeout: Duration,
    pool_size: usize,
) -> Result<LeanPool<deadpool_redis::sentinel::Manager>, StoreError> {
    // The data nodes use TLS when the Sentinels do; the Sentinels' own credentials are
    // in their URLs, the data nodes' in `credentials`.
    let tls = nodes.iter().any(|url| url.starts_with("rediss://"));
    let node_info = SentinelNodeConnectionInfo {
        tls_mode: tls.then_some(TlsMode::Secure),
        redis_connection_info: Some(deadpool_redis::RedisConnectionInfo {
            username: credentials.username.clone(),
            password: credentials.password.clone(),
            ..Default::default()
        }),
    };
    let manager = deadpool_redis::sentinel::Manager::new(
        nodes.to_vec(),
        master_name.to_owned(),
        Some(node_info),
        SentinelServerType::Master,
    )
    .map_err(StoreError::Command)?;
    build(Lean(manager), operation_timeout, pool_size)
}
