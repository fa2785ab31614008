//! A Redis Cluster (`store.redis_cluster_nodes`) through deadpool-redis's `cluster`
//! manager and redis-rs's async cluster client: it discovers the slot map from any seed
//! node, follows MOVED and ASK (slot migration), retries TRYAGAIN and CLUSTERDOWN, and
//! refreshes the map after a failover. Nothing here shards: every key one script
//! touches carries the account key's hash tag (`store::keys`), so each script is
//! single-slot and runs on the node that owns it; `SCRIPT LOAD` after `NOSCRIPT` goes to
//! every node, a promoted replica included.

use std::time::Duration;

use super::pool::{Lean, LeanPool};
use super::settings::{Credentials, connection_info};
use super::standalone::build;
use crate::store::StoreError;

/// The pool of a cluster found from `nodes`: at most `pool_size` cluster connections
/// (each reaches every node).
pub(super) fn pool(
    nodes: &[String],
    credentials: &Credentials,
    operation_timeout: Duration,
    pool_size: usize,
) -> Result<LeanPool<deadpool_redis::cluster::Manager>, StoreError> {
    let nodes = nodes
        .iter()
        .map(|url| connection_info(url, credentials))
        .collect::<Result<Vec<_>, _>>()
        .map_err(StoreError::Command)?;
    // Reads go to masters too: a replica may lag behind the count it is asked about.
    let manager =
        deadpool_redis::cluster::Manager::new(nodes, false).map_err(StoreError::Command)?;
    build(Lean(manager), operation_timeout, pool_size)
}
