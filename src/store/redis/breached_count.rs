//! Grace logins on Redis: one `lua/breached_count.lua` call on the account's count (in
//! its hash tag), waiting for `store.wait_replicas` (it decides when a change is
//! required).

use async_trait::async_trait;

use super::{RedisStore, scripts};
use crate::store::StoreError;
use crate::store::breached_count::{BreachedCountStore, BreachedNoteRequest};

#[async_trait]
impl BreachedCountStore for RedisStore {
    async fn note_breached(&self, note: &BreachedNoteRequest<'_>) -> Result<u64, StoreError> {
        let mut call = scripts::breached_count().key(note.account.breached_count());
        call.arg(format!("{:016x}", note.credential)).arg(note.ttl_ms);
        let count: i64 = self.invoke_counted(&call).await?;
        u64::try_from(count)
            .ok()
            .filter(|&c| c >= 1)
            .ok_or_else(|| StoreError::Protocol(format!("breached returned {count}")))
    }
}
