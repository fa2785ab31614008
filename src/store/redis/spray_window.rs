//! Spray counts on Redis: one `lua/spray_window.lua` call on the fingerprint's keys
//! (their own hash tag), with no `WAIT`: a spray count is a signal, not a lockout.

use async_trait::async_trait;

use super::RedisStore;
use super::scripts::spray_window;
use crate::store::error::StoreError;
use crate::store::spray_window::{SprayNote, SprayNoteRequest, SprayWindowStore};

#[async_trait]
impl SprayWindowStore for RedisStore {
    async fn note_spray(&self, request: &SprayNoteRequest<'_>) -> Result<u64, StoreError> {
        let SprayNoteRequest { spray, account, note, period_ms, .. } = *request;
        let [failed_even, failed_odd, periods] = spray.redis_keys();
        let keys = spray_window::Keys { failed_even, failed_odd, periods };
        let note = match note {
            SprayNote::Check => "check",
            SprayNote::Failure => "failure",
        };
        let args = spray_window::Args { note, member: account.digest().to_owned(), period_ms };
        let call = spray_window::call(&keys, &args);
        let count = spray_window::Reply::parse(&[self.invoke(&call).await?])?.count;
        u64::try_from(count)
            .map_err(|_| StoreError::Protocol("spray returned a negative count".into()))
    }
}
