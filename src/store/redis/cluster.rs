//! A Redis Cluster (`store.redis_cluster_nodes`) through redis-rs's async cluster
//! client, pooled by deadpool (a manager of our own, as deadpool-redis's `cluster`
//! manager builds its client from URLs alone and so cannot take the TLS certificates of
//! `store.redis_tls_*`): the client discovers the slot map from any seed
//! node, follows MOVED and ASK (slot migration), retries TRYAGAIN and CLUSTERDOWN, and
//! refreshes the map after a failover. Nothing here shards: every key one script
//! touches carries the account key's hash tag (`store::keys`), so each script is
//! single-slot and runs on the node that owns it; `SCRIPT LOAD` after `NOSCRIPT` goes to
//! every node, a promoted replica included.

use std::sync::Arc;
use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleResult};
use redis::RedisError;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;

use super::error::command;
use super::key_check::KeyProof;
use super::pool::{Lean, LeanPool};
use super::settings::{Credentials, RedisTls, connection_info};
use super::standalone::build;
use crate::store::error::StoreError;

/// Creates cluster connections (each reaches every node) from one [`ClusterClient`].
/// deadpool-redis's cluster manager takes no TLS certificates, hence this one; [`Lean`]
/// replaces its `recycle`.
pub(super) struct Manager(ClusterClient);

impl managed::Manager for Manager {
    type Type = ClusterConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<ClusterConnection, RedisError> {
        self.0.get_async_connection().await
    }

    async fn recycle(&self, _: &mut ClusterConnection, _: &Metrics) -> RecycleResult<RedisError> {
        Ok(())
    }
}

/// The pool of a cluster found from `nodes`: at most `pool_size` cluster connections.
/// With `rediss://` seeds every node is reached over TLS, verified against `tls`.
pub(super) fn pool(
    nodes: &[String],
    credentials: &Credentials,
    tls: &RedisTls,
    operation_timeout: Duration,
    pool_size: usize,
    proof: Arc<KeyProof>,
) -> Result<LeanPool<Manager>, StoreError> {
    let urls = nodes;
    let nodes = urls
        .iter()
        .map(|url| connection_info(url, credentials))
        .collect::<Result<Vec<_>, _>>()
        .map_err(command)?;
    // Reads go to masters (the builder's default): a replica may lag behind the count it
    // is asked about.
    let mut builder = ClusterClientBuilder::new(nodes);
    if let Some(certificates) = tls.certificates() {
        // Certificates never go unused on a plain connection (config.rs refuses this too).
        if urls.iter().any(|url| !url.starts_with("rediss://")) {
            return Err(command(RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "TLS certificates are set but a cluster node URL is not rediss://",
            ))));
        }
        builder = builder.certs(certificates);
    }
    let client = builder.build().map_err(command)?;
    build(Lean { manager: Manager(client), proof }, operation_timeout, pool_size)
}
