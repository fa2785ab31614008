//! The Redis side of repeated passwords (docs/throttle.md, "Repeated passwords"): the
//! fingerprint's text, and `repeat_list.lua`'s note after a failed comparison. The check
//! itself is part of `record_attempt.lua`, in the same script as the count.

use super::{RedisStore, scripts};
use crate::store::StoreError;
use crate::store::keys::{AccountKey, RepeatKey};

/// A repeat fingerprint as the scripts take it: lowercase hex, at least 4 digits.
pub(super) fn hex(fingerprint: u64) -> String {
    format!("{fingerprint:04x}")
}

impl RedisStore {
    /// [`crate::store::Store::note_repeat`] on Redis: one `repeat_list.lua` call on the
    /// bucket's hash tag.
    pub(super) async fn note_repeat_op(
        &self,
        bucket: &AccountKey,
        list: &RepeatKey,
        fingerprint: u64,
        max_len: u32,
    ) -> Result<(), StoreError> {
        let mut call = scripts::repeat().key(bucket.record());
        call.key(list.as_str()).arg(hex(fingerprint)).arg(max_len);
        let _noted: i64 = self.invoke(&call).await?;
        Ok(())
    }
}
