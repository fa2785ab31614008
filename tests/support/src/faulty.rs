//! A store that fails one chosen operation and passes every other to a real one, and a
//! `Governor` service over it: for the tests that hold that a failed store operation is
//! a deny (fail closed), never an answer.

use portcullis::store::breached_count::BreachedNoteRequest;
use portcullis::store::network_bucket::NetworkRequest;
use portcullis::store::realm_tally::{RealmTallyStore, TallyBatch, TallyLookbacks, TallyReading};
use portcullis::store::repeat_list::RepeatNoteRequest;
use portcullis::store::send_log::{SendOp, SendRequest, Sent};
use portcullis::store::spray_window::SprayNoteRequest;
use std::sync::Arc;

use async_trait::async_trait;
use portcullis::config::Settings;
use portcullis::defence::client_network::NetworkWatch;
use portcullis::defence::spray::SprayWatch;
use portcullis::rpc::GovernorService;
use portcullis::secret::KeySecret;
use portcullis::store::Store;
use portcullis::store::attempt_count::AttemptCountStore;
use portcullis::store::attempt_count::{Attempt, Counted, Inspection, Shadow};
use portcullis::store::breached_count::BreachedCountStore;
use portcullis::store::candidate_report::{CandidateCounts, CandidateReportStore};
use portcullis::store::devices::DeviceStore;
use portcullis::store::devices::{Confirmation, DeviceConfirmation};
use portcullis::store::error::StoreError;
use portcullis::store::keys::{AccountKey, AttemptKey, CandidateKey, TallyKey};
use portcullis::store::network_bucket::NetworkBucketStore;
use portcullis::store::network_bucket::{NetworkOp, NetworkState};
use portcullis::store::repeat_list::RepeatListStore;
use portcullis::store::send_log::SendLogStore;
use portcullis::store::spray_window::SprayNote;
use portcullis::store::spray_window::SprayWindowStore;
use portcullis::throttle::Policy;
use portcullis::throttle::candidate_report::ReportCounts;

/// The operation a [`FaultyStore`] fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `note_spray` with this note.
    Spray(SprayNote),
    /// `network` with this operation.
    Network(NetworkOp),
    /// `note_repeat`.
    NoteRepeat,
    /// `send` with this operation (a mail flow's send log).
    Send(SendOp),
    /// `count` of a flow's record (a code flow's attempt).
    FlowCount,
    /// `clear` of a flow's record (`ClearFlow`, `Unlock` of a flow).
    FlowClear,
    /// `confirm_device` (`ConfirmDevice`'s one step).
    ConfirmDevice,
    /// `note_breached` (the grace logins of a breached password).
    NoteBreached,
    /// `accept` (a right password's clear and device epoch).
    Accept,
    /// `add_tallies` and `read_tallies` (a realm's status).
    Tally,
}

/// `inner`, except that the operation `fail` names is a [`StoreError`].
pub struct FaultyStore {
    pub inner: Arc<dyn Store>,
    pub fail: Fault,
}

fn injected() -> StoreError {
    StoreError::Protocol("injected fault".into())
}

#[async_trait]
impl AttemptCountStore for FaultyStore {
    async fn is_open(&self, k: &AccountKey, p: &Policy) -> Result<bool, StoreError> {
        self.inner.is_open(k, p).await
    }
    async fn count(&self, attempt: &Attempt<'_>) -> Result<Counted, StoreError> {
        if self.fail == Fault::FlowCount && attempt.key.flow_of().is_some() {
            return Err(injected());
        }
        self.inner.count(attempt).await
    }
    async fn refund(
        &self,
        k: &AccountKey,
        id: Option<&AttemptKey>,
        refunded: (u64, bool),
        candidate: Option<&Shadow>,
    ) -> Result<(), StoreError> {
        self.inner.refund(k, id, refunded, candidate).await
    }
    async fn clear(&self, k: &AccountKey) -> Result<bool, StoreError> {
        if self.fail == Fault::FlowClear && k.flow_of().is_some() {
            return Err(injected());
        }
        self.inner.clear(k).await
    }
    async fn accept(&self, b: &AccountKey, k: &AccountKey, ttl: u64) -> Result<u64, StoreError> {
        if self.fail == Fault::Accept {
            return Err(injected());
        }
        self.inner.accept(b, k, ttl).await
    }
    async fn inspect(&self, k: &AccountKey, p: &Policy) -> Result<Inspection, StoreError> {
        self.inner.inspect(k, p).await
    }
}

#[async_trait]
impl DeviceStore for FaultyStore {
    async fn revoke_devices(&self, k: &AccountKey, ttl_ms: u64) -> Result<u64, StoreError> {
        self.inner.revoke_devices(k, ttl_ms).await
    }
    async fn confirm_device(&self, c: &DeviceConfirmation<'_>) -> Result<Confirmation, StoreError> {
        if self.fail == Fault::ConfirmDevice {
            return Err(injected());
        }
        self.inner.confirm_device(c).await
    }
}

#[async_trait]
impl SprayWindowStore for FaultyStore {
    async fn note_spray(&self, request: &SprayNoteRequest<'_>) -> Result<u64, StoreError> {
        if self.fail == Fault::Spray(request.note) {
            return Err(injected());
        }
        self.inner.note_spray(request).await
    }
}

#[async_trait]
impl NetworkBucketStore for FaultyStore {
    async fn network(&self, request: &NetworkRequest<'_>) -> Result<NetworkState, StoreError> {
        if self.fail == Fault::Network(request.op) {
            return Err(injected());
        }
        self.inner.network(request).await
    }
}

#[async_trait]
impl RepeatListStore for FaultyStore {
    async fn note_repeat(&self, request: &RepeatNoteRequest<'_>) -> Result<(), StoreError> {
        if self.fail == Fault::NoteRepeat {
            return Err(injected());
        }
        self.inner.note_repeat(request).await
    }
}

#[async_trait]
impl SendLogStore for FaultyStore {
    async fn send(&self, request: &SendRequest<'_>) -> Result<Sent, StoreError> {
        if self.fail == Fault::Send(request.op) {
            return Err(injected());
        }
        self.inner.send(request).await
    }
}

#[async_trait]
impl BreachedCountStore for FaultyStore {
    async fn note_breached(&self, note: &BreachedNoteRequest<'_>) -> Result<u64, StoreError> {
        if self.fail == Fault::NoteBreached {
            return Err(injected());
        }
        self.inner.note_breached(note).await
    }
}

#[async_trait]
impl RealmTallyStore for FaultyStore {
    async fn add_tallies(&self, batch: &TallyBatch<'_>) -> Result<(), StoreError> {
        if self.fail == Fault::Tally {
            return Err(injected());
        }
        self.inner.add_tallies(batch).await
    }
    async fn read_tallies(
        &self,
        key: &TallyKey,
        lookbacks: &TallyLookbacks,
    ) -> Result<TallyReading, StoreError> {
        if self.fail == Fault::Tally {
            return Err(injected());
        }
        self.inner.read_tallies(key, lookbacks).await
    }
}

#[async_trait]
impl CandidateReportStore for FaultyStore {
    async fn add_to_report(
        &self,
        key: &CandidateKey,
        counts: &ReportCounts,
    ) -> Result<(), StoreError> {
        if self.fail == Fault::Tally {
            return Err(injected());
        }
        self.inner.add_to_report(key, counts).await
    }
    async fn read_report(&self, key: &CandidateKey) -> Result<CandidateCounts, StoreError> {
        if self.fail == Fault::Tally {
            return Err(injected());
        }
        self.inner.read_report(key).await
    }
}

#[async_trait]
impl Store for FaultyStore {
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }
}

/// A `Governor` service over `store` with `settings`' realms and CPU budget and the
/// test key secret, called directly (no listener).
pub fn governor_over(store: Arc<dyn Store>, settings: Settings) -> GovernorService {
    let secret = KeySecret::new(crate::SECRET.as_bytes().to_vec());
    let targets = settings.realms.iter().map(|r| (r.name.as_str(), &r.hash_target));
    let verifier = Arc::new(portcullis::verify::Verifier::new(settings.verify, targets).unwrap());
    let logins = portcullis::login::Logins::new(
        store.clone(),
        verifier,
        &secret,
        SprayWatch::new(),
        NetworkWatch::new(),
    );
    GovernorService::new(Arc::new(settings.realms), store, secret, Arc::new(logins))
}
