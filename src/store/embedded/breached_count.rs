//! Grace logins in the embedded store (`lua/breached_count.lua` on Redis): the count
//! of one breached credential's accepts ([`crate::throttle::breached_count::note`]).

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::Entry;
use super::tables::Tables;
use crate::store::breached_count::{BreachedCountStore, BreachedNoteRequest};
use crate::store::error::StoreError;

#[async_trait]
impl BreachedCountStore for EmbeddedStore {
    async fn note_breached(&self, note: &BreachedNoteRequest<'_>) -> Result<u64, StoreError> {
        let (key, credential, ttl_ms) =
            (note.account.breached_count(), note.credential, note.ttl_ms);
        self.submit(true, move |t| breached(t, &key, credential, ttl_ms)).await
    }
}

/// The embedded form of `breached_count.lua` ([`crate::throttle::breached_count::note`]).
fn breached(
    t: &mut Tables<'_, '_>,
    key: &str,
    credential: u64,
    ttl_ms: u64,
) -> Result<u64, StoreError> {
    let held = match t.get(key)? {
        Some(Entry::Breached { credential, count, .. }) => Some((credential, count)),
        None => None,
        Some(_) => {
            return Err(StoreError::Protocol("a breached count holds another entry".into()));
        }
    };
    let count = crate::throttle::breached_count::note(held, credential);
    let expires_ms = t.now.saturating_add(ttl_ms);
    t.put(key, Entry::Breached { credential, count, expires_ms })?;
    Ok(count)
}
