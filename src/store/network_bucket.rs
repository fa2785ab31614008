//! The throttle per client network's store side (docs/throttle.md, "Per client
//! network"; the rules are [`crate::throttle::network_bucket`]): one token bucket per
//! realm and client network, one atomic operation each (`lua/network_bucket.lua`,
//! `embedded/network_bucket.rs`).

use async_trait::async_trait;

use super::error::StoreError;
use super::keys::{HeldKey, NetworkKey};
use crate::throttle::network_bucket::BucketPolicy;

/// One operation on a client network's token bucket ([`NetworkBucketStore::network`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkOp {
    /// Takes one token, if there is one (before a comparison that may fail).
    Take,
    /// Gives one token back (the attempt it was taken for compared nothing or matched).
    /// With a candidate and a held count, the candidate's bucket gets back what the
    /// account's attempts hold of it.
    GiveBack,
    /// Gives one token back to the candidate's bucket only, without a held count: the
    /// enforced bucket took none for the attempt, the candidate's did.
    GiveShadow,
    /// With a held count, gives back the token the attempt just taken holds, as
    /// [`NetworkOp::GiveBack`]; the candidate's part is the attempt's own: its token when
    /// the candidate's bucket took one (`candidate_took`), else its refusal forgotten,
    /// never another attempt's (`RecordAttempt`'s give-back of an attempt that compared
    /// nothing; a verified password's is [`NetworkOp::GiveBack`]).
    GiveOwn {
        /// The candidate's bucket took a token for the attempt.
        candidate_took: bool,
    },
    /// Reads the bucket; writes nothing (`Admin/InspectNetwork`).
    Peek,
    /// Fills the bucket (`Admin/ReleaseNetwork`).
    Release,
}

impl NetworkOp {
    /// The name the store's script takes, and the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkOp::Take => "take",
            NetworkOp::GiveBack => "give",
            NetworkOp::GiveShadow => "give_shadow",
            NetworkOp::GiveOwn { candidate_took: true } => "give_took",
            NetworkOp::GiveOwn { candidate_took: false } => "give_refused",
            NetworkOp::Peek => "peek",
            NetworkOp::Release => "release",
        }
    }
}

/// A network bucket after one [`NetworkOp`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetworkState {
    /// [`NetworkOp::Take`] took a token; `false` for every other operation.
    pub taken: bool,
    /// Tokens left after the operation (0 ..= capacity).
    pub tokens: u32,
    /// Milliseconds until the bucket is full again (0: full).
    pub full_in_ms: u64,
    /// What the candidate's bucket did ([`NetworkRequest::candidate`]; `None` without
    /// one): for a [`NetworkOp::Take`], whether it took a token; for a
    /// [`NetworkOp::GiveBack`] with a held count, whether the give met an attempt the
    /// enforced bucket took and the candidate's refused (its cue for a real user the
    /// candidate would have shut out, when the give is for a verified password);
    /// `Some(false)` for every other operation.
    pub shadow: Option<bool>,
}

/// One operation on a client network's token bucket ([`NetworkBucketStore::network`]).
#[derive(Debug, Clone, Copy)]
pub struct NetworkRequest<'a> {
    /// The bucket's key (realm and client network).
    pub key: &'a NetworkKey,
    /// What to do with it.
    pub op: NetworkOp,
    /// The realm's bucket: capacity and refill.
    pub policy: &'a BucketPolicy,
    /// `RecordAttempt`'s tokens: a [`NetworkOp::Take`] that takes one adds it to this
    /// count, and a [`NetworkOp::GiveBack`] gives one back only when the count holds one
    /// (and takes it off), so `ClearAttempts` gives back only what an attempt took.
    /// `None`: the caller knows it holds the token (`Verify`, the flows, operators).
    pub held: Option<&'a HeldKey>,
    /// The realm's candidate bucket (docs/throttle.md, "Trying a policy in shadow"): the
    /// operation runs again on the network's candidate bucket (and the held count's
    /// candidate part), in the same store step; never changes what the enforced bucket
    /// answers. `None`: no candidate for the network.
    pub candidate: Option<&'a BucketPolicy>,
}

/// Client networks' token buckets on a store.
#[async_trait]
pub trait NetworkBucketStore: Send + Sync {
    /// The throttle per client network (docs/throttle.md, "Per client network"): one
    /// [`NetworkOp`] on `key`'s token bucket, shaped by `policy`, atomically on the
    /// store's clock ([`crate::throttle::network_bucket`]'s rules).
    async fn network(&self, request: &NetworkRequest<'_>) -> Result<NetworkState, StoreError>;
}
