//! Client networks' token buckets in the embedded store (`lua/network_bucket.lua` on
//! Redis): [`crate::throttle::network_bucket`]'s rules on the entry's TAT, with the
//! count of tokens one account's `RecordAttempt`s hold.

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::Entry;
use super::tables::Tables;
use crate::store::error::StoreError;
use crate::store::keys::HeldKey;
use crate::store::network_bucket::{NetworkBucketStore, NetworkOp, NetworkRequest, NetworkState};
use crate::throttle::network_bucket::{BucketPolicy, Spent};

#[async_trait]
impl NetworkBucketStore for EmbeddedStore {
    async fn network(&self, request: &NetworkRequest<'_>) -> Result<NetworkState, StoreError> {
        let NetworkRequest { key, op, policy, held, candidate } = *request;
        let shadow = candidate.map(|c| Shadow {
            bucket: key.candidate_bucket(),
            held: held.map(HeldKey::candidate),
            policy: *c,
        });
        // The same requests `network_bucket.lua` refuses, refused here.
        let misused = match op {
            NetworkOp::GiveShadow => shadow.is_none() || held.is_some(),
            NetworkOp::GiveOwn { .. } => held.is_none(),
            _ => false,
        };
        if misused {
            return Err(StoreError::Protocol(format!("{} without its keys", op.as_str())));
        }
        let (key, policy, held) = (key.as_key(), *policy, held.map(|h| h.as_str().to_owned()));
        self.submit(op != NetworkOp::Peek, move |t| {
            // The candidate's part is read (and checked) before anything is written, as
            // `network_bucket.lua` does: a corrupt one changes nothing.
            let shadow = match shadow {
                Some(s) => {
                    network(t, &s.bucket, NetworkOp::Peek, &s.policy)?;
                    Some((held_count(t, s.held.as_deref())?, s))
                }
                None => None,
            };
            let enforced = match op {
                NetworkOp::GiveShadow => NetworkOp::Peek,
                NetworkOp::GiveOwn { .. } => NetworkOp::GiveBack,
                other => other,
            };
            let mut state = network_held(t, &key, enforced, &policy, held.as_deref())?;
            if let Some((counts, s)) = shadow {
                state.shadow = Some(shadow_step(t, &s, counts, op, state)?);
            }
            Ok(state)
        })
        .await
    }
}

/// The network's candidate bucket and the candidate's part of the held count.
struct Shadow {
    bucket: String,
    held: Option<String>,
    policy: BucketPolicy,
}

/// The count and refused count held at `held` (both 0 when absent or `None`).
fn held_count(t: &Tables<'_, '_>, held: Option<&str>) -> Result<(u64, u64), StoreError> {
    let Some(held) = held else { return Ok((0, 0)) };
    match t.get(held)? {
        Some(Entry::Held { count, refused, .. }) => Ok((count, refused)),
        None => Ok((0, 0)),
        Some(_) => Err(StoreError::Protocol("a held key holds another entry".into())),
    }
}

/// `network_bucket.lua`'s candidate part: `op` on the candidate's bucket, after the
/// enforced bucket's operation answered `enforced`; `(count, refused)` the candidate's
/// held counts as read. A give with a held count meets an attempt the candidate refused
/// first (answering `true`), else gives back one of the candidate's held tokens. A take
/// answers whether the candidate's bucket took a token.
fn shadow_step(
    t: &mut Tables<'_, '_>,
    s: &Shadow,
    (mut count, mut refused): (u64, u64),
    requested: NetworkOp,
    enforced: NetworkState,
) -> Result<bool, StoreError> {
    let mut met_refused = false;
    let op = match requested {
        NetworkOp::GiveShadow => NetworkOp::GiveBack,
        // This attempt's own part: its candidate token back, or its refusal forgotten.
        NetworkOp::GiveOwn { candidate_took } if s.held.is_some() => {
            if candidate_took && count > 0 {
                count -= 1;
                NetworkOp::GiveBack
            } else {
                if !candidate_took && refused > 0 {
                    refused -= 1;
                }
                NetworkOp::Peek
            }
        }
        NetworkOp::GiveBack if s.held.is_some() => {
            if refused > 0 {
                (refused, met_refused) = (refused - 1, true);
                NetworkOp::Peek
            } else if count > 0 {
                count -= 1;
                NetworkOp::GiveBack
            } else {
                NetworkOp::Peek
            }
        }
        other => other,
    };
    let state = network(t, &s.bucket, op, &s.policy)?;
    if op == NetworkOp::Take {
        if state.taken {
            count += 1;
        } else if enforced.taken {
            refused += 1;
        }
    }
    if let Some(held) = &s.held
        && matches!(requested, NetworkOp::Take | NetworkOp::GiveBack | NetworkOp::GiveOwn { .. })
    {
        // Kept while either bucket owes: the later of the two.
        let owed_ms = state.full_in_ms.max(enforced.full_in_ms);
        if (count > 0 || refused > 0) && owed_ms > 0 {
            t.put(held, Entry::Held { count, refused, expires_ms: t.now + owed_ms })?;
        } else {
            t.remove(held)?;
        }
    }
    Ok(if op == NetworkOp::Take { state.taken } else { met_refused })
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
    let (count, _) = held_count(t, Some(held))?;
    let op = if op == NetworkOp::GiveBack && count == 0 { NetworkOp::Peek } else { op };
    let state = network(t, key, op, policy)?;
    let count = match op {
        NetworkOp::Take if state.taken => count + 1,
        NetworkOp::GiveBack => count - 1,
        _ => return Ok(state),
    };
    if count > 0 && state.full_in_ms > 0 {
        t.put(held, Entry::Held { count, refused: 0, expires_ms: t.now + state.full_in_ms })?;
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
        NetworkOp::Peek | NetworkOp::GiveShadow => Spent { taken: false, tat_ms: tat },
        // (Mapped to `GiveBack` before it reaches a bucket.)
        NetworkOp::GiveOwn { .. } => policy.give_back(tat, now),
        NetworkOp::Release => Spent { taken: false, tat_ms: None },
    };
    let writes = match op {
        NetworkOp::Take => spent.taken,
        NetworkOp::Peek | NetworkOp::GiveShadow => false,
        NetworkOp::GiveBack | NetworkOp::GiveOwn { .. } | NetworkOp::Release => true,
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
        shadow: None,
    })
}
