//! Property tests (proptest): normalization is idempotent and never panics on any
//! string; stored-hash parsing never panics on any string; request validation never
//! panics on any message, and a request it refuses never reaches the store.
//!
//! Case counts are bounded so `cargo test` stays fast; `PROPTEST_CASES` raises them for
//! a longer hunt.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use portcullis::auth::Authorization;
use portcullis::config::{Config, Overrides};
use portcullis::defence::spray::SprayWatch;
use portcullis::normalize::{HOSTILE_CHARACTERS, Normalization, normalize};
use portcullis::pb::governor_server::Governor;
use portcullis::pb::{
    Account, AdmitRequest, ClearAttemptsRequest, RecordAttemptRequest, VerifyRequest,
};
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
use portcullis::store::network_bucket::{NetworkRequest, NetworkState};
use portcullis::store::realm_tally::{RealmTallyStore, TallyBatch, TallyLookbacks, TallyReading};
use portcullis::store::repeat_list::RepeatListStore;
use portcullis::store::repeat_list::RepeatNoteRequest;
use portcullis::store::send_log::SendLogStore;
use portcullis::store::spray_window::SprayNoteRequest;
use portcullis::store::spray_window::SprayWindowStore;
use portcullis::throttle::candidate_report::ReportCounts;
use portcullis::throttle::{self, Policy};
use portcullis::verify::hash::{Ceilings, StoredHash};
use proptest::prelude::*;
use tonic::{Code, Request};

fn config(cases: u32) -> ProptestConfig {
    // No regression files written into the source tree; failures print their input.
    ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() }
}

fn hostile_string() -> impl Strategy<Value = String> {
    let ch = prop_oneof![3 => proptest::sample::select(HOSTILE_CHARACTERS), 1 => any::<char>()];
    proptest::collection::vec(ch, 0..24).prop_map(|v| v.into_iter().collect())
}

const MODES: [Normalization; 3] =
    [Normalization::Email, Normalization::Exact, Normalization::AsciiLowercase];

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn normalization_is_idempotent_and_total(s in hostile_string()) {
        for mode in MODES {
            if let Ok(once) = normalize(mode, &s) {
                let twice = normalize(mode, once.as_str());
                prop_assert_eq!(twice.as_ref(), Ok(&once), "{:?} on {:?}", mode, s);
            }
        }
    }

    #[test]
    fn normalization_never_panics_on_any_string(s in any::<String>()) {
        for mode in MODES {
            if let Ok(once) = normalize(mode, &s) {
                prop_assert_eq!(normalize(mode, once.as_str()), Ok(once));
            }
        }
    }

    #[test]
    fn stored_hash_parsing_never_panics(s in any::<String>(), tail in "[$a-zA-Z0-9+/=,.-]{0,120}") {
        let ceilings = Ceilings {
            bcrypt_cost: 14,
            argon2_memory_kib: 131_072,
            argon2_iterations: 16,
            argon2_parallelism: 8,
            pbkdf2_iterations: 2_000_000,
            scrypt_memory_kib: 132_096,
            scrypt_parallelism: 16,
        };
        let _ = StoredHash::parse(&s, &ceilings);
        // Prefixes that reach the format-specific parsers, with arbitrary tails.
        for prefix in ["$2b$", "$2a$10$", "$2y$05$", "$2x$", "$argon2id$", "$argon2i$v=19$",
                       "$argon2d$v=19$m=64,t=1,p=1$", "$argon2id$v=19$m=19456,t=2,p=1$",
                       "argon2$argon2id$", "bcrypt$", "bcrypt_sha256$$2b$12$",
                       "pbkdf2_sha256$", "pbkdf2_sha256$1000$salt$", "pbkdf2_sha1$10$",
                       "scrypt$", "scrypt$16384$salt$8$", "pbkdf2:sha256:1000$", "pbkdf2:",
                       "scrypt:16384:8:1$salt$", "$pbkdf2$", "$pbkdf2-sha256$29000$",
                       "$pbkdf2-sha512$i=1000,l=", "$scrypt$ln=", "$scrypt$ln=14,r=8,p=1$"] {
            let _ = StoredHash::parse(&format!("{prefix}{tail}"), &ceilings);
            let _ = StoredHash::parse(&format!("{prefix}{s}"), &ceilings);
        }
    }
}

/// A store that counts how often it is asked and always fails: a request that passes
/// validation ends as UNAVAILABLE, one that does not never gets here.
#[derive(Default)]
struct CountingStore {
    calls: AtomicU64,
}

impl CountingStore {
    fn fail(&self) -> StoreError {
        self.calls.fetch_add(1, Ordering::SeqCst);
        StoreError::Protocol("test store".into())
    }
}

#[async_trait]
impl AttemptCountStore for CountingStore {
    async fn is_open(&self, _: &AccountKey, _: &Policy) -> Result<bool, StoreError> {
        Err(self.fail())
    }
    async fn count(&self, _: &Attempt<'_>) -> Result<Counted, StoreError> {
        Err(self.fail())
    }
    async fn refund(
        &self,
        _: &AccountKey,
        _: Option<&AttemptKey>,
        _: (u64, bool),
        _: Option<&Shadow>,
    ) -> Result<(), StoreError> {
        Err(self.fail())
    }
    async fn clear(&self, _: &AccountKey) -> Result<bool, StoreError> {
        Err(self.fail())
    }
    async fn accept(&self, _: &AccountKey, _: &AccountKey, _: u64) -> Result<u64, StoreError> {
        Err(self.fail())
    }
    async fn inspect(&self, _: &AccountKey, _: &Policy) -> Result<Inspection, StoreError> {
        Err(self.fail())
    }
}

#[async_trait]
impl DeviceStore for CountingStore {
    async fn revoke_devices(&self, _: &AccountKey, _: u64) -> Result<u64, StoreError> {
        Err(self.fail())
    }
    async fn confirm_device(&self, _: &DeviceConfirmation<'_>) -> Result<Confirmation, StoreError> {
        Err(self.fail())
    }
}

#[async_trait]
impl SprayWindowStore for CountingStore {
    async fn note_spray(&self, _: &SprayNoteRequest<'_>) -> Result<u64, StoreError> {
        Err(self.fail())
    }
}

#[async_trait]
impl NetworkBucketStore for CountingStore {
    async fn network(&self, _: &NetworkRequest<'_>) -> Result<NetworkState, StoreError> {
        Err(self.fail())
    }
}

#[async_trait]
impl RepeatListStore for CountingStore {
    async fn note_repeat(&self, _: &RepeatNoteRequest<'_>) -> Result<(), StoreError> {
        Err(self.fail())
    }
}

#[async_trait]
impl SendLogStore for CountingStore {
    async fn send(
        &self,
        _: &portcullis::store::send_log::SendRequest<'_>,
    ) -> Result<portcullis::store::send_log::Sent, StoreError> {
        Err(self.fail())
    }
}

#[async_trait]
impl BreachedCountStore for CountingStore {
    async fn note_breached(
        &self,
        _: &portcullis::store::breached_count::BreachedNoteRequest<'_>,
    ) -> Result<u64, StoreError> {
        Err(self.fail())
    }
}

#[async_trait]
impl RealmTallyStore for CountingStore {
    async fn add_tallies(&self, _: &TallyBatch<'_>) -> Result<(), StoreError> {
        Err(self.fail())
    }
    async fn read_tallies(
        &self,
        _: &TallyKey,
        _: &TallyLookbacks,
    ) -> Result<TallyReading, StoreError> {
        Err(self.fail())
    }
}

#[async_trait]
impl CandidateReportStore for CountingStore {
    async fn add_to_report(&self, _: &CandidateKey, _: &ReportCounts) -> Result<(), StoreError> {
        Err(self.fail())
    }
    async fn read_report(&self, _: &CandidateKey) -> Result<CandidateCounts, StoreError> {
        Err(self.fail())
    }
}

#[async_trait]
impl Store for CountingStore {
    async fn ping(&self) -> Result<(), StoreError> {
        Err(self.fail())
    }
}

fn service(store: Arc<CountingStore>) -> GovernorService {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(
        &path,
        "[realms.default]\nhash = { algorithm = \"bcrypt\", bcrypt_cost = 4 }\n[realms.exact]\nnormalization = \"exact\"\nhash = { algorithm = \"bcrypt\", bcrypt_cost = 4 }\n",
    )
    .unwrap();
    let settings = Config::load(Some(&path), &Overrides::default())
        .unwrap()
        .validate(Some("0123456789abcdef".repeat(2)))
        .unwrap();
    let targets = settings.realms.iter().map(|r| (r.name.as_str(), &r.hash_target));
    let verifier = Arc::new(portcullis::verify::Verifier::new(settings.verify, targets).unwrap());
    let secret = KeySecret::new(vec![7; 32]);
    let logins = portcullis::login::Logins::new(
        store.clone(),
        verifier,
        &secret,
        SprayWatch::new(),
        portcullis::defence::client_network::NetworkWatch::new(),
    );
    GovernorService::new(Arc::new(settings.realms), store, secret, Arc::new(logins))
}

fn account() -> impl Strategy<Value = Option<Account>> {
    let realm = prop_oneof![Just("default".to_owned()), Just("exact".to_owned()), any::<String>()];
    proptest::option::weighted(
        0.9,
        (realm, hostile_string()).prop_map(|(realm, identifier)| Account { realm, identifier }),
    )
}

fn hash_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("$2b$04$IbTcdjsgUGCtcgd/e8TOs.xs3Rqt9IqOvtdu6ZrtBE/tx1q1TDfm2".to_owned()),
        "\\$argon2id\\$v=19\\$m=[0-9]{1,7},t=[0-9]{1,3},p=[0-9]{1,3}(,keyid=[a-zA-Z0-9]{0,8})?\\$[a-zA-Z0-9+/]{0,30}\\$[a-zA-Z0-9+/]{0,50}",
        any::<String>(),
    ]
}

/// A request as the authorization layer passes it on when no callers are configured
/// (without it the services refuse: fail closed).
fn open<T>(message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(Authorization::Open);
    request
}

/// Runs one request of each RPC built from the same arbitrary parts; each answer is an
/// error (the store always fails), and INVALID_ARGUMENT means the store was not asked.
/// Arbitrary parts of a request: account, attempt id, password, stored hash, client key,
/// clear reason.
type Parts = (Option<Account>, String, Vec<u8>, String, String, i32, String);

async fn check_requests(
    svc: &GovernorService,
    store: &CountingStore,
    (account, attempt_id, password, stored_hash, client_key, reason, device_token): Parts,
) -> Result<(), TestCaseError> {
    let calls = || store.calls.load(Ordering::SeqCst);
    macro_rules! check {
        ($call:expr) => {{
            let before = calls();
            let status = $call.await.expect_err("the store always fails: never an answer");
            match status.code() {
                Code::InvalidArgument => prop_assert_eq!(calls(), before, "{}", status.message()),
                Code::Unavailable | Code::ResourceExhausted => {}
                other => prop_assert!(false, "unexpected {:?}: {}", other, status.message()),
            }
        }};
    }
    check!(svc.admit(open(AdmitRequest { account: account.clone() })));
    check!(svc.record_attempt(open(RecordAttemptRequest {
        account: account.clone(),
        attempt_id: attempt_id.clone(),
        client_key: String::new(),
    })));
    check!(svc.clear_attempts(open(ClearAttemptsRequest {
        account: account.clone(),
        reason,
        client_key: String::new()
    })));
    check!(svc.verify(open(VerifyRequest {
        account,
        password,
        stored_hash,
        client_key,
        attempt_id,
        device_token,
    })));
    Ok(())
}

#[test]
fn request_validation_never_panics_on_any_message() {
    let store = Arc::new(CountingStore::default());
    let svc = service(store.clone());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let strategy = (
        account(),
        prop_oneof![Just(String::new()), "[a-zA-Z0-9-]{1,40}", any::<String>()],
        proptest::collection::vec(any::<u8>(), 0..1100),
        hash_text(),
        prop_oneof![Just(String::new()), "[a-z0-9.:]{1,20}", any::<String>()],
        any::<i32>(),
        prop_oneof![Just(String::new()), "[A-Za-z0-9_-]{1,300}", any::<String>()],
    );
    let mut runner = proptest::test_runner::TestRunner::new(config(192));
    runner.run(&strategy, |parts| rt.block_on(check_requests(&svc, &store, parts))).unwrap();
}

/// One step of an attempt sequence: the store's clock moves by `advance_ms`, then one
/// operation.
#[derive(Debug, Clone, Copy)]
enum Step {
    Attempt,
    Admit,
    /// Refund the attempt counted `back` attempts ago (in its window).
    Refund {
        back: usize,
    },
}

/// A store of one account key, modelled on the throttle's functions: `early` drops the
/// record at [`throttle::attempt_count::expiry_ms`] (lifetime by content), otherwise at the retention
/// after each attempt (the rule before it).
struct Model {
    early: bool,
    record: Option<(throttle::Record, u64)>,
}

impl Model {
    fn live(&self, now: u64) -> Option<throttle::Record> {
        self.record.filter(|(_, expires)| *expires > now).map(|(r, _)| r)
    }

    fn attempt(&mut self, p: &Policy, now: u64) -> throttle::AttemptOutcome {
        let out = throttle::attempt_count::attempt(p, self.live(now), now);
        let expires = if self.early {
            throttle::attempt_count::expiry_ms(p, &out.record, now)
        } else if p.at_ceiling(out.record.consecutive) {
            // At the ceiling both keep the record until it is cleared.
            throttle::KEPT_UNTIL_CLEARED_MS
        } else {
            now + p.retention_ms()
        };
        self.record = Some((out.record, expires));
        out
    }

    fn refund(&mut self, window_start_ms: u64, allowed: bool, now: u64) {
        if let Some(r) = throttle::attempt_count::refund(self.live(now), window_start_ms, allowed) {
            let expires = self.record.map_or(0, |(_, e)| e);
            self.record = Some((r, expires));
        }
    }
}

fn policy_strategy() -> impl Strategy<Value = Policy> {
    (1u32..=6, 1u64..=4, 0u32..=3, 1u64..=3, any::<bool>(), 1u32..=40, 0u64..=100).prop_map(
        |(max_failures, first_s, doublings, extra_s, second_factor_required, ceiling, lock)| {
            let first_window = std::time::Duration::from_secs(first_s);
            let max_window = first_window * 2u32.pow(doublings);
            let retention = max_window + std::time::Duration::from_secs(extra_s);
            // 1 s – below the retention, in whole milliseconds.
            let lockout_ms = 1000 + (retention.as_millis() as u64 - 1001) * lock / 100;
            Policy {
                max_failures,
                first_window,
                max_window,
                retention,
                max_consecutive_failures: ceiling,
                lockout_duration: std::time::Duration::from_millis(lockout_ms),
                second_factor_required,
            }
        },
    )
}

fn step_strategy() -> impl Strategy<Value = (u64, Step)> {
    let advance = prop_oneof![
        4 => 0u64..200,
        3 => 200u64..5_000,
        2 => 5_000u64..40_000,
        1 => 40_000u64..200_000,
    ];
    let step = prop_oneof![
        6 => Just(Step::Attempt),
        2 => Just(Step::Admit),
        1 => (0usize..3).prop_map(|back| Step::Refund { back }),
    ];
    (advance, step)
}

proptest! {
    #![proptest_config(config(2048))]

    /// Lifetime by content (docs/throttle.md, "How long a record lives"): a record
    /// dropped as soon as it holds nothing worth remembering and one kept for the whole
    /// retention answer every attempt, admission and refund alike, over any sequence of
    /// attempts and clock steps, windows that end exhausted or not, escalation and
    /// realms with a second factor.
    #[test]
    fn a_record_expired_early_answers_as_one_kept(
        policy in policy_strategy(),
        steps in proptest::collection::vec(step_strategy(), 1..120),
    ) {
        let (mut kept, mut early) = (Model { early: false, record: None }, Model { early: true, record: None });
        let mut now = 1_800_000_000_000u64;
        let mut counted_in: Vec<(u64, bool)> = Vec::new();
        for (i, (advance, step)) in steps.into_iter().enumerate() {
            now += advance;
            match step {
                Step::Attempt => {
                    let (a, b) = (kept.attempt(&policy, now), early.attempt(&policy, now));
                    prop_assert_eq!(a.allowed, b.allowed, "step {}: allowed", i);
                    prop_assert_eq!(a.locked_now(&policy), b.locked_now(&policy), "step {}", i);
                    prop_assert_eq!(a.record.window_start_ms, b.record.window_start_ms, "step {}", i);
                    prop_assert_eq!(a.record.step, b.record.step, "step {}: step", i);
                    counted_in.push((a.record.window_start_ms, a.allowed));
                }
                Step::Admit => {
                    let a = throttle::attempt_count::is_open(&policy, kept.live(now).as_ref(), now);
                    let b = throttle::attempt_count::is_open(&policy, early.live(now).as_ref(), now);
                    prop_assert_eq!(a, b, "step {}: admit", i);
                }
                Step::Refund { back } => {
                    if let Some(&(ws, allowed)) = counted_in.iter().rev().nth(back) {
                        kept.refund(ws, allowed, now);
                        early.refund(ws, allowed, now);
                    }
                }
            }
        }
    }
}
