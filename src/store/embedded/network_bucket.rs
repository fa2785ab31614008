//! Client networks' token buckets in the embedded store (`lua/network_bucket.lua` on
//! Redis): [`crate::throttle::network_bucket`]'s rules on the entry's TAT, with the
//! count of tokens one account's `RecordAttempt`s hold.

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::Entry;
use super::tables::Tables;
use crate::store::error::StoreError;
use crate::store::network_bucket::{NetworkBucketStore, NetworkOp, NetworkRequest, NetworkState};
use crate::throttle::network_bucket::{BucketPolicy, Spent};

#[async_trait]
impl NetworkBucketStore for EmbeddedStore {
    async fn network(&self, request: &NetworkRequest<'_>) -> Result<NetworkState, StoreError> {
        let NetworkRequest { key, op, policy, held } = *request;
        let (key, policy, held) = (key.as_key(), *policy, held.map(|h| h.as_str().to_owned()));
        self.submit(op != NetworkOp::Peek, move |t| {
            network_held(t, &key, op, &policy, held.as_deref())
        })
        .await
    }
}

/// The embedded form of `network_bucket.lua` with its held count (`held`, the key of
/// `NetworkRequest::held`): a take that takes a token adds it to the count; a give
/// back gives one only when the count holds one, and takes it off.
fn network_held(
    t: &mut Tables<'_, '_>,
    key: &str,
    op: NetworkOp,
    policy: &BucketPolicy,
    held: Option<&str>,
) -> Result<NetworkState, StoreError> {
    let Some(held) = held else { return network(t, key, op, policy) };
    let count = match t.get(held)? {
        Some(Entry::Held { count, .. }) => count,
        None => 0,
        Some(_) => return Err(StoreError::Protocol("a held key holds another entry".into())),
    };
    let op = if op == NetworkOp::GiveBack && count == 0 { NetworkOp::Peek } else { op };
    let state = network(t, key, op, policy)?;
    let count = match op {
        NetworkOp::Take if state.taken => count + 1,
        NetworkOp::GiveBack => count - 1,
        _ => return Ok(state),
    };
    if count > 0 && state.full_in_ms > 0 {
        t.put(held, Entry::Held { count, expires_ms: t.now + state.full_in_ms })?;
    } else {
        t.remove(held)?;
    }
    Ok(state)
}

/// The embedded form of `network_bucket.lua`: [`BucketPolicy`]'s rules on the entry's TAT;
/// a refused take and a peek write nothing.
pub(super) fn network(
    t: &mut Tables<'_, '_>,
    key: &str,
    op: NetworkOp,
    policy: &BucketPolicy,
) -> Result<NetworkState, StoreError> {
    let now = t.now;
    let tat = match t.get(key)? {
        Some(Entry::Bucket { tat_ms }) => Some(tat_ms),
        None => None,
        Some(_) => {
            return Err(StoreError::Protocol("a network key holds another entry".into()));
        }
    };
    let spent = match op {
        NetworkOp::Take => policy.take(tat, now),
        NetworkOp::GiveBack => policy.give_back(tat, now),
        NetworkOp::Peek => Spent { taken: false, tat_ms: tat },
        NetworkOp::Release => Spent { taken: false, tat_ms: None },
    };
    let writes = match op {
        NetworkOp::Take => spent.taken,
        NetworkOp::Peek => false,
        NetworkOp::GiveBack | NetworkOp::Release => true,
    };
    if writes {
        match spent.tat_ms {
            Some(tat_ms) => t.put(key, Entry::Bucket { tat_ms })?,
            None => t.remove(key)?,
        }
    }
    Ok(NetworkState {
        taken: spent.taken,
        tokens: policy.tokens(spent.tat_ms, now),
        full_in_ms: policy.full_in_ms(spent.tat_ms, now),
    })
}
