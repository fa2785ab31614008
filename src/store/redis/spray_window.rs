//! Spray counts on Redis: one `lua/spray_window.lua` call on the fingerprint's keys
//! (their own hash tag), with no `WAIT`: a spray count is a signal, not a lockout.

use async_trait::async_trait;

use super::{RedisStore, scripts};
use crate::store::StoreError;
use crate::store::spray_window::{SprayNote, SprayNoteRequest, SprayWindowStore};

#[async_trait]
impl SprayWindowStore for RedisStore {
    async fn note_spray(&self, request: &SprayNoteRequest<'_>) -> Result<u64, StoreError> {
        let SprayNoteRequest { spray, account, note, period_ms, .. } = *request;
        let mut call = scripts::spray_window().prepare_invoke();
        for key in spray.redis_keys() {
            call.key(key);
        }
        let note = match note {
            SprayNote::Check => "check",
            SprayNote::Failure => "failure",
        };
        call.arg(note).arg(account.digest()).arg(period_ms);
        let count: i64 = self.invoke(&call).await?;
        u64::try_from(count)
            .map_err(|_| StoreError::Protocol("spray returned a negative count".into()))
    }
}
