//! Client networks' token buckets on Redis: one `lua/network_bucket.lua` call per
//! operation on the bucket's own key (one hash tag: one node on a cluster).

use async_trait::async_trait;

use super::RedisStore;
use super::scripts::network_bucket;
use crate::store::error::StoreError;
use crate::store::keys::HeldKey;
use crate::store::network_bucket::{NetworkBucketStore, NetworkOp, NetworkRequest, NetworkState};

#[async_trait]
impl NetworkBucketStore for RedisStore {
    /// A take waits for `store.wait_replicas` as a counted attempt does (it bounds
    /// guesses); the other operations do not.
    async fn network(&self, request: &NetworkRequest<'_>) -> Result<NetworkState, StoreError> {
        let NetworkRequest { key, op, policy, held, candidate } = *request;
        let keys = network_bucket::Keys {
            bucket: key.as_key(),
            held: held.map(|h| h.as_str().to_owned()),
            shadow: candidate.map(|_| key.candidate_bucket()),
            shadow_held: held.filter(|_| candidate.is_some()).map(HeldKey::candidate),
        };
        let args = network_bucket::Args {
            op: op.as_str(),
            capacity: policy.capacity,
            interval_ms: policy.interval_ms,
            candidate: candidate
                .map_or_else(String::new, |c| format!("{},{}", c.capacity, c.interval_ms)),
        };
        let call = network_bucket::call(&keys, &args);
        let reply: Vec<i64> = match op {
            NetworkOp::Take => self.invoke_counted(&call).await?,
            _ => self.invoke(&call).await?,
        };
        let network_bucket::Reply { taken, tokens, full_in_ms, shadow } =
            network_bucket::Reply::parse(&reply)?;
        let taken = match taken {
            1 => op == NetworkOp::Take,
            0 => false,
            other => return Err(StoreError::Protocol(format!("network taken={other}"))),
        };
        let shadow = match (shadow, candidate) {
            (-1, None) => None,
            (0, Some(_)) => Some(false),
            (1, Some(_)) => Some(true),
            (other, _) => return Err(StoreError::Protocol(format!("network shadow={other}"))),
        };
        let tokens = u32::try_from(tokens)
            .ok()
            .filter(|&t| t <= policy.capacity)
            .ok_or_else(|| StoreError::Protocol("network returned tokens out of range".into()))?;
        let full_in_ms = u64::try_from(full_in_ms)
            .map_err(|_| StoreError::Protocol("network returned a negative time".into()))?;
        Ok(NetworkState { taken, tokens, full_in_ms, shadow })
    }
}
