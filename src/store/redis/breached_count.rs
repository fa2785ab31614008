//! Grace logins on Redis: one `lua/breached_count.lua` call on the account's count (in
//! its hash tag), waiting for `store.wait_replicas` (it decides when a change is
//! required).

use async_trait::async_trait;

use super::RedisStore;
use super::scripts::breached_count;
use crate::store::breached_count::{BreachedCountStore, BreachedNoteRequest};
use crate::store::error::StoreError;

#[async_trait]
impl BreachedCountStore for RedisStore {
    async fn note_breached(&self, note: &BreachedNoteRequest<'_>) -> Result<u64, StoreError> {
        let keys = breached_count::Keys { count: note.account.breached_count() };
        let args = breached_count::Args {
            credential: format!("{:016x}", note.credential),
            ttl_ms: note.ttl_ms,
        };
        let call = breached_count::call(&keys, &args);
        let count = breached_count::Reply::parse(&[self.invoke_counted(&call).await?])?.count;
        u64::try_from(count)
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| StoreError::Protocol(format!("breached returned {count}")))
    }
}
