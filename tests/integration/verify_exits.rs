//! Every way out of a `Verify`, and what it gave back (src/login/job.rs, `Held::settle`):
//! the network's token goes back unless a comparison ran and failed; the account's count
//! goes back only when this call added it and was stopped before a comparison by
//! something that is no guess at the account (its network, the CPU budget); nothing
//! else is forgotten, but a CPU refusal of a recheck forgets its attempt_id. Each test
//! reads the account's failures (`Admin/Inspect`) and its network's tokens
//! (`Admin/InspectNetwork`) after the call. The calls that stop before the count, or
//! whose count's round trip fails, settle nothing.

use std::sync::Arc;
use std::time::Duration;

use portcullis::pb::admin_server::Admin;
use portcullis::pb::governor_server::Governor;
use portcullis::pb::{Verdict, VerifyRequest, VerifyResponse};
use portcullis::store::embedded::{EmbeddedStore, SystemClock};
use portcullis::store::network_bucket::NetworkOp;
use portcullis::store::spray_window::SprayNote;
use portcullis::verify::budget::Lane;
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::*;
use tonic::Code;

const RIGHT: &[u8] = b"correct horse battery staple";
const GUESS: &[u8] = b"Winter2026!";
const OLD: &[u8] = b"last year's password";
/// The client under test, and its network's bucket (`exits`: 10 tokens).
const NET: &str = "203.0.113.7";
const CAPACITY: u32 = 10;

/// One comparison at a time and one untrusted waiter, so a test can hold the CPU budget
/// full; waits end after 300 ms. `exits`: 10 tokens a network, `10.0.0.0/8` trusted,
/// the lowest spray threshold in `reject`. `one`: a network of one token.
const REALMS: &str = r#"
[verify]
max_concurrent = 1
max_waiters = 1
max_wait = "300ms"
[realms.exits]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
network_capacity = 10
trusted_networks = ["10.0.0.0/8"]
spray_threshold = 10
spray_action = "reject"
[realms.one]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
network_capacity = 1
"#;

fn hash() -> String {
    StoredHash::generate(RIGHT, &HashParams::Bcrypt { cost: 4 }).unwrap().as_str().to_owned()
}

fn request(
    identifier: &str,
    password: &[u8],
    stored_hash: &str,
    attempt_id: &str,
) -> VerifyRequest {
    VerifyRequest {
        account: account("exits", identifier),
        password: password.to_vec(),
        stored_hash: stored_hash.into(),
        client_key: NET.into(),
        attempt_id: attempt_id.into(),
        device_token: String::new(),
    }
}

/// The account's failures and `NET`'s tokens in `exits`, as the operator reads them.
async fn held(ops: &mut Caller, identifier: &str) -> (u32, u32) {
    let failures = ops.inspect("exits", identifier).await.unwrap().failures;
    (failures, ops.inspect_network("exits", NET).await.unwrap().tokens)
}

/// A daemon on the embedded store with [`REALMS`], and an operator's client.
async fn daemon(dir: &tempfile::TempDir) -> (Daemon, Client, Caller) {
    let d = Daemon::on(None, dir.path(), REALMS).await;
    let (c, ops) = (d.client().await, caller(d.addr, None, None).await.unwrap());
    (d, c, ops)
}

/// Holds the daemon's only comparison slot with a comparison that ends when the
/// returned sender is dropped.
async fn hold_the_cpu(d: &Daemon) -> std::sync::mpsc::Sender<()> {
    let ticket = d.verifier.budget().reserve("blocker", Lane::Untrusted).unwrap();
    let (release, wait) = std::sync::mpsc::channel::<()>();
    tokio::spawn(ticket.run(None, move || {
        let _ = wait.recv();
    }));
    while d.budget().running == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    release
}

/// Revokes every device token of `identifier` in `exits`.
async fn revoke(ops: &mut Caller, identifier: &str) {
    let req = portcullis::pb::RevokeDevicesRequest {
        account: account("exits", identifier),
        note: String::new(),
    };
    ops.admin.revoke_devices(req).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_comparison_keeps_its_token_and_its_count() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let r = c.verify("exits", "a@example.com", GUESS, &hash(), NET).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    assert_eq!(held(&mut ops, "a@example.com").await, (1, CAPACITY - 1));
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accept_gives_its_token_back_and_clears() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let hash = hash();
    c.verify("exits", "a@example.com", GUESS, &hash, NET).await.unwrap();
    let r = c.verify("exits", "a@example.com", RIGHT, &hash, NET).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Accept);
    assert_eq!(held(&mut ops, "a@example.com").await, (0, CAPACITY - 1));
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_door_gives_its_token_back_and_stays_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let hash = hash();
    for n in 0..5 {
        let guess = format!("guess {n}");
        c.verify("exits", "a@example.com", guess.as_bytes(), &hash, "10.0.0.1").await.unwrap();
    }
    let before = ops.inspect("exits", "a@example.com").await.unwrap().failures;
    let compared = d.budget().comparisons;
    let r = c.verify("exits", "a@example.com", RIGHT, &hash, NET).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    assert_eq!(d.budget().comparisons, compared, "compared behind a closed door");
    assert_eq!(held(&mut ops, "a@example.com").await, (before + 1, CAPACITY));
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_gives_its_token_back_and_refunds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let hash = hash();
    for _ in 0..2 {
        let r = c.0.verify(request("a@example.com", GUESS, &hash, "id-1")).await.unwrap();
        assert_eq!(verdict(&r.into_inner()), Verdict::Reject);
        assert_eq!(held(&mut ops, "a@example.com").await, (1, CAPACITY - 1));
    }
    assert_eq!(d.budget().comparisons, 1, "a replay was compared");
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sprayed_password_refused_unhashed_gives_its_token_back_and_stays_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let hash = hash();
    // Ten accounts fail with one password from trusted addresses: sprayed.
    for n in 0..10 {
        let id = format!("s{n}@example.com");
        c.verify("exits", &id, GUESS, &hash, &format!("10.0.0.{n}")).await.unwrap();
    }
    let compared = d.budget().comparisons;
    let r = c.verify("exits", "a@example.com", GUESS, &hash, NET).await.unwrap();
    assert!(r.spray_suspected && verdict(&r) == Verdict::Reject, "{r:?}");
    assert_eq!(d.budget().comparisons, compared, "a sprayed password was compared");
    assert_eq!(held(&mut ops, "a@example.com").await, (1, CAPACITY));
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forgiven_repeat_gives_its_token_back_and_a_failed_recheck_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let hash = hash();
    c.verify("exits", "a@example.com", OLD, &hash, NET).await.unwrap();
    assert_eq!(held(&mut ops, "a@example.com").await, (1, CAPACITY - 1));
    // Forgiven unseen: not counted, not compared, its token back.
    let r = c.verify("exits", "a@example.com", OLD, &hash, NET).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    assert_eq!(d.budget().comparisons, 1);
    assert_eq!(held(&mut ops, "a@example.com").await, (1, CAPACITY - 1));
    // The recheck: not counted, compared, and a failure of its network.
    let r = c.verify("exits", "a@example.com", OLD, &hash, NET).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    assert_eq!(d.budget().comparisons, 2);
    assert_eq!(held(&mut ops, "a@example.com").await, (1, CAPACITY - 2));
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_network_in_a_reject_realm_gives_the_count_back() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let hash = hash();
    c.verify("one", "first@example.com", GUESS, &hash, NET).await.unwrap();
    let r = c.verify("one", "a@example.com", b"another guess", &hash, NET).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    assert_eq!(d.budget().comparisons, 1, "a throttled network was compared");
    assert_eq!(ops.inspect("one", "a@example.com").await.unwrap().failures, 0);
    assert_eq!(ops.inspect_network("one", NET).await.unwrap().tokens, 0);
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_refusal_gives_back_the_token_and_the_count() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let release = hold_the_cpu(&d).await;
    let status = c.verify("exits", "a@example.com", GUESS, &hash(), NET).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("wait_timeout"), "{status:?}");
    drop(release);
    assert_eq!(held(&mut ops, "a@example.com").await, (0, CAPACITY));
    d.shutdown().await;
}

/// A recheck added no count: the refusal gives back its token and forgets only its
/// attempt_id, so its retry is compared instead of answered as a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_refusal_of_a_recheck_forgets_only_its_attempt_id() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let hash = hash();
    c.verify("exits", "a@example.com", OLD, &hash, NET).await.unwrap();
    c.verify("exits", "a@example.com", OLD, &hash, NET).await.unwrap();
    assert_eq!(held(&mut ops, "a@example.com").await, (1, CAPACITY - 1));
    let release = hold_the_cpu(&d).await;
    let status = c.0.verify(request("a@example.com", OLD, &hash, "recheck")).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    drop(release);
    assert_eq!(held(&mut ops, "a@example.com").await, (1, CAPACITY - 1));
    let compared = d.budget().comparisons;
    let r = c.0.verify(request("a@example.com", OLD, &hash, "recheck")).await.unwrap();
    assert_eq!(verdict(&r.into_inner()), Verdict::Reject);
    assert_eq!(d.budget().comparisons, compared + 1, "the retry was answered as a replay");
    assert_eq!(held(&mut ops, "a@example.com").await, (1, CAPACITY - 2));
    d.shutdown().await;
}

/// The client's own earlier call still holds its slot past `max_wait`: refused before
/// the count, so nothing was counted or taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_the_clients_turn_settles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let earlier = d.verifier.budget().reserve(NET, Lane::Untrusted).unwrap();
    let status = c.verify("exits", "a@example.com", GUESS, &hash(), NET).await.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    drop(earlier);
    assert_eq!(held(&mut ops, "a@example.com").await, (0, CAPACITY));
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_stored_hash_settles_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let status = c.verify("exits", "a@example.com", GUESS, "$2b$04$short", NET).await;
    assert_eq!(status.unwrap_err().code(), Code::InvalidArgument);
    assert_eq!(held(&mut ops, "a@example.com").await, (0, CAPACITY));
    d.shutdown().await;
}

/// A revoked device token is an untrusted client: its network pays, and it waits with
/// the untrusted. A full untrusted queue refuses it: its token and its count go back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_device_refused_by_the_untrusted_queue_gives_back_both() {
    let dir = tempfile::tempdir().unwrap();
    let (d, mut c, mut ops) = daemon(&dir).await;
    let hash = hash();
    let token = c.verify("exits", "a@example.com", RIGHT, &hash, NET).await.unwrap().device_token;
    revoke(&mut ops, "a@example.com").await;
    let release = hold_the_cpu(&d).await;
    let queued = d.verifier.budget().reserve("queued", Lane::Untrusted).unwrap();
    let r = c.verify_with_device("exits", "a@example.com", GUESS, &hash, NET, &token).await;
    let status = r.unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("queue_full"), "{status:?}");
    drop((queued, release));
    assert_eq!(held(&mut ops, "a@example.com").await, (0, CAPACITY));
    d.shutdown().await;
}

/// A `Governor` and an `Admin` over one embedded store that fails `fail`.
fn over_a_faulty_store(
    dir: &tempfile::TempDir,
    fail: Fault,
) -> (portcullis::rpc::GovernorService, portcullis::rpc::AdminService) {
    let settings = || TestConfig::embedded(&dir.path().join("cfg")).extra(REALMS).settings();
    let inner = EmbeddedStore::open(
        &dir.path().join("data"),
        Duration::from_secs(2),
        Arc::new(SystemClock),
    )
    .unwrap();
    let store = Arc::new(FaultyStore { inner: Arc::new(inner), fail });
    let secret = portcullis::secret::KeySecret::new(SECRET.as_bytes().to_vec());
    let realms = Arc::new(settings().realms);
    let spray = portcullis::defence::spray::SprayWatch::new();
    let running = portcullis::telemetry::running_config::RunningConfig::new(settings().report);
    let admin = portcullis::rpc::AdminService::new(realms, store.clone(), secret, spray, running);
    (governor_over(store, settings()), admin)
}

fn open<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.extensions_mut().insert(portcullis::auth::Authorization::Open);
    request
}

/// [`held`] through the services themselves.
async fn held_in(admin: &portcullis::rpc::AdminService, identifier: &str) -> (u32, u32) {
    let req = portcullis::pb::InspectRequest {
        account: account("exits", identifier),
        ..Default::default()
    };
    let failures = admin.inspect(open(req)).await.unwrap().into_inner().failures;
    let req =
        portcullis::pb::InspectNetworkRequest { realm: "exits".into(), client_key: NET.into() };
    (failures, admin.inspect_network(open(req)).await.unwrap().into_inner().tokens)
}

async fn verify_in(
    governor: &portcullis::rpc::GovernorService,
    req: VerifyRequest,
) -> Result<VerifyResponse, tonic::Status> {
    governor.verify(open(req)).await.map(tonic::Response::into_inner)
}

/// A count's round trip that fails keeps what it took (the safe side): a spray check
/// that fails leaves the count and the token spent; a take that fails leaves the count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_count_round_trip_keeps_what_it_took() {
    for (fail, after) in [
        (Fault::Spray(SprayNote::Check), (1, CAPACITY - 1)),
        (Fault::Network(NetworkOp::Take), (1, CAPACITY)),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let (governor, admin) = over_a_faulty_store(&dir, fail);
        let status = verify_in(&governor, request("a@example.com", GUESS, &hash(), "")).await;
        assert_eq!(status.unwrap_err().code(), Code::Unavailable, "{fail:?}");
        assert_eq!(held_in(&admin, "a@example.com").await, after, "{fail:?}");
    }
}

/// A revoked device's network that cannot be reached stops the call before any
/// comparison: its count goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_devices_unreachable_network_gives_the_count_back() {
    let dir = tempfile::tempdir().unwrap();
    let (governor, admin) = over_a_faulty_store(&dir, Fault::Network(NetworkOp::Take));
    let hash = hash();
    // From a trusted network, which takes no token: the device's token.
    let mut login = request("a@example.com", RIGHT, &hash, "");
    login.client_key = "10.0.0.1".into();
    let token = verify_in(&governor, login).await.unwrap().device_token;
    let req = portcullis::pb::RevokeDevicesRequest {
        account: account("exits", "a@example.com"),
        note: String::new(),
    };
    admin.revoke_devices(open(req)).await.unwrap();
    let mut guess = request("a@example.com", GUESS, &hash, "");
    guess.device_token = token;
    let status = verify_in(&governor, guess).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(held_in(&admin, "a@example.com").await, (0, CAPACITY));
}

/// A give-back that fails is a deny, and the token stays spent (the safe side).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_give_back_is_a_deny_and_keeps_the_token_spent() {
    let dir = tempfile::tempdir().unwrap();
    let (governor, admin) = over_a_faulty_store(&dir, Fault::Network(NetworkOp::GiveBack));
    let hash = hash();
    let r = verify_in(&governor, request("a@example.com", GUESS, &hash, "id-1")).await.unwrap();
    assert_eq!(verdict(&r), Verdict::Reject);
    let status = verify_in(&governor, request("a@example.com", GUESS, &hash, "id-1")).await;
    assert_eq!(status.unwrap_err().code(), Code::Unavailable);
    assert_eq!(held_in(&admin, "a@example.com").await, (1, CAPACITY - 2));
}
