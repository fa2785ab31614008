//! Refused-password lists on Redis (docs/throttle.md, "Repeated passwords"): the
//! fingerprint's text, and `lua/repeat_list.lua`'s note after a failed comparison, on
//! the bucket's hash tag. The check itself is part of `record_attempt.lua`, in the same
//! script as the count.

use async_trait::async_trait;

use super::RedisStore;
use super::scripts::repeat_list;
use crate::store::error::StoreError;
use crate::store::repeat_list::{RepeatListStore, RepeatNoteRequest};

/// A repeat fingerprint as the scripts take it: lowercase hex, at least 4 digits.
pub(super) fn hex(fingerprint: u64) -> String {
    format!("{fingerprint:04x}")
}

#[async_trait]
impl RepeatListStore for RedisStore {
    async fn note_repeat(&self, request: &RepeatNoteRequest<'_>) -> Result<(), StoreError> {
        let RepeatNoteRequest { bucket, list, fingerprint, max_len } = *request;
        let keys = repeat_list::Keys { record: bucket.record(), list: list.as_str().to_owned() };
        let args = repeat_list::Args { fingerprint: hex(fingerprint), max_len };
        let noted = self.invoke(&repeat_list::call(&keys, &args)).await?;
        repeat_list::Reply::parse(&[noted]).map(drop)
    }
}
