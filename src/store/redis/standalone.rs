//! One Redis at one URL (`store.redis_url`), or a proxy in front of one: deadpool-redis's
//! own manager creates the connections (`redis://` or `rediss://`, ACL user and password
//! in the URL), [`super::pool::Lean`] keeps them without per-checkout round trips.

use std::time::Duration;

use deadpool::Runtime;
use redis::AsyncConnectionConfig;

use super::pool::{Lean, LeanPool};
use crate::store::StoreError;

/// The pool of a standalone Redis at `url`: at most `pool_size` multiplexed
/// connections, each created within `operation_timeout`.
pub(super) fn pool(
    url: &str,
    operation_timeout: Duration,
    pool_size: usize,
) -> Result<LeanPool<deadpool_redis::Manager>, StoreError> {
    let connection = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(operation_timeout))
        .set_response_timeout(Some(operation_timeout));
    let manager =
        deadpool_redis::Manager::new_with_config(url, connection).map_err(StoreError::Command)?;
    LeanPool::builder(Lean(manager))
        .max_size(pool_size)
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(operation_timeout))
        .create_timeout(Some(operation_timeout))
        .recycle_timeout(Some(operation_timeout))
        .build()
        .map_err(|e| StoreError::Pool(Box::new(e)))
}
