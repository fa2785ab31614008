//! One Redis at one URL (`store.redis_url`), or a proxy in front of one: deadpool-redis's
//! own manager creates the connections (`redis://` or `rediss://`, ACL user and password
//! from the URL or [`Credentials`], CA and client certificate from [`RedisTls`]), [`Lean`]
//! keeps them without per-checkout round trips.

use std::sync::Arc;
use std::time::Duration;

use deadpool::Runtime;
use redis::AsyncConnectionConfig;

use super::error::command;
use super::key_check::KeyProof;
use super::pool::{Lean, LeanPool};
use super::settings::{Credentials, RedisTls, connection_info};
use crate::store::error::StoreError;

/// The pool of a standalone Redis at `url`: at most `pool_size` multiplexed
/// connections, each created within `operation_timeout`.
pub(super) fn pool(
    url: &str,
    credentials: &Credentials,
    tls: &RedisTls,
    operation_timeout: Duration,
    pool_size: usize,
    proof: Arc<KeyProof>,
) -> Result<LeanPool<deadpool_redis::Manager>, StoreError> {
    let connection = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(operation_timeout))
        .set_response_timeout(Some(operation_timeout));
    let mut info = connection_info(url, credentials).map_err(command)?;
    if let Some(certificates) = tls.certificates() {
        // Refuses a `redis://` URL: configured certificates never go unused.
        info = redis::Client::build_with_tls(info, certificates)
            .map_err(command)?
            .get_connection_info()
            .clone();
    }
    let manager = deadpool_redis::Manager::new_with_config(info, connection).map_err(command)?;
    build(Lean { manager, proof }, operation_timeout, pool_size)
}

/// A lean pool over `manager` with every deadpool timeout at the operation deadline.
pub(super) fn build<M>(
    manager: Lean<M>,
    operation_timeout: Duration,
    pool_size: usize,
) -> Result<LeanPool<M>, StoreError>
where
    Lean<M>: deadpool::managed::Manager,
{
    LeanPool::builder(manager)
        .max_size(pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(operation_timeout))
        .create_timeout(Some(operation_timeout))
        .recycle_timeout(Some(operation_timeout))
        .build()
        .map_err(|e| StoreError::Pool(Box::new(e)))
}
