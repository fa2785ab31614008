//! The flows around the login (`RecordFlowAttempt`, `ClearFlow`; the Admin service's
//! `flow` field): concurrent attempts at a one-time code allow exactly its
//! `max_failures` on the embedded store, on Redis and on a Redis Cluster; daemons on one
//! Redis share one budget per flow; rotating client addresses never passes an account's
//! mail cap; a second-factor record lives for its window and no longer. In `flows/`:
//! answers that tell nothing and refuse bad input (`answers`), attempt ids and the
//! records that never clear each other (`separation`), a failed store operation as a
//! deny (`store_errors`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis::normalize::{Normalization, normalize};
use portcullis::pb::{
    ClearFlowRequest, Decision, Flow, InspectRequest, InspectResponse, RecordFlowAttemptRequest,
    RecordFlowAttemptResponse, UnlockReason, UnlockRequest,
};
use portcullis::secret::KeySecret;
use portcullis::store::keys::AccountKey;
use portcullis_test_support::*;

mod answers;
mod separation;
mod store_errors;

/// The realms of these tests besides [`REALMS_TOML`]'s: `quick` (mails a second apart,
/// five a day; bcrypt cost 4), `budget2` (a client network may cause two reset mails an
/// hour) and `otp` (three codes in two minutes).
const FLOW_REALMS: &str = r#"
[realms.quick]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
[realms.quick.flows.password_reset]
min_interval = "1s"
[realms.quick.flows.verification_resend]
min_interval = "1s"
[realms.budget2]
[realms.budget2.flows.password_reset]
network_budget = 2
[realms.otp]
max_consecutive_failures = 7
[realms.otp.flows.second_factor]
max_failures = 3
window = "2m"
"#;

/// Every flow with what a fresh account allows of it at once: five codes, one mail.
const BUDGETS: [(Flow, usize); 4] = [
    (Flow::SecondFactor, 5),
    (Flow::RecoveryCode, 5),
    (Flow::PasswordReset, 1),
    (Flow::VerificationResend, 1),
];

/// A client address of its own for each `n` (198.18.0.0/15, for benchmarks).
fn ip(n: usize) -> String {
    format!("198.18.{}.{}", n / 256 % 256, n % 256)
}

fn request(
    realm: &str,
    identifier: &str,
    flow: Flow,
    client_key: &str,
    attempt_id: &str,
) -> RecordFlowAttemptRequest {
    RecordFlowAttemptRequest {
        account: account(realm, identifier),
        flow: flow as i32,
        client_key: client_key.into(),
        attempt_id: attempt_id.into(),
    }
}

/// One `RecordFlowAttempt`: its whole answer.
async fn try_flow(
    c: &mut Client,
    realm: &str,
    identifier: &str,
    flow: Flow,
    client_key: &str,
    attempt_id: &str,
) -> Result<RecordFlowAttemptResponse, tonic::Status> {
    let req = request(realm, identifier, flow, client_key, attempt_id);
    Ok(c.0.record_flow_attempt(req).await?.into_inner())
}

fn decision(r: &RecordFlowAttemptResponse) -> Decision {
    Decision::try_from(r.decision).expect("the daemon sent a known decision")
}

/// One `RecordFlowAttempt` without an attempt id, which must be answered.
async fn flow_from(
    c: &mut Client,
    realm: &str,
    identifier: &str,
    flow: Flow,
    client_key: &str,
) -> Decision {
    decision(&try_flow(c, realm, identifier, flow, client_key, "").await.unwrap())
}

async fn clear_flow(
    c: &mut Client,
    realm: &str,
    identifier: &str,
    flow: Flow,
) -> Result<(), tonic::Status> {
    let req = ClearFlowRequest { account: account(realm, identifier), flow: flow as i32 };
    c.0.clear_flow(req).await.map(drop)
}

/// `Admin/Inspect` of one flow's record (`Flow::Unspecified`: the login's).
async fn inspect_flow(
    ops: &mut Caller,
    realm: &str,
    identifier: &str,
    flow: Flow,
) -> InspectResponse {
    let req = InspectRequest { account: account(realm, identifier), flow: flow as i32 };
    ops.admin.inspect(req).await.unwrap().into_inner()
}

/// `Admin/Unlock` of one flow's record.
async fn unlock_flow(ops: &mut Caller, realm: &str, identifier: &str, flow: Flow) {
    let req = UnlockRequest {
        account: account(realm, identifier),
        reason: UnlockReason::OwnerVerified as i32,
        flow: flow as i32,
        note: String::new(),
    };
    ops.admin.unlock(req).await.unwrap();
}

/// The store key of one flow's record of (realm, identifier), as the daemon derives it.
fn flow_record_key(realm: &str, identifier: &str, flow: Flow) -> String {
    let secret = KeySecret::new(SECRET.as_bytes().to_vec());
    let identifier = normalize(Normalization::Email, identifier).unwrap();
    // The domain's flows are in wire order, from FLOW_SECOND_FACTOR = 1.
    let flow = portcullis::throttle::flow::Flow::ALL[flow as usize - 1];
    AccountKey::new(&secret, realm, &identifier).flow(flow).record()
}

/// `n` attempts at `flow` on one account at once (each from its own address, with its own
/// attempt id), spread over `clients`: how many were allowed.
async fn at_once(clients: &[Client], identifier: &str, flow: Flow, n: usize) -> usize {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let calls: Vec<_> = (0..n)
        .map(|i| {
            let (mut c, barrier) = (clients[i % clients.len()].clone(), barrier.clone());
            let identifier = identifier.to_owned();
            tokio::spawn(async move {
                barrier.wait().await;
                let id = format!("{}-{i}", flow.as_str_name());
                let r = try_flow(&mut c, "default", &identifier, flow, &ip(i), &id).await;
                decision(&r.unwrap())
            })
        })
        .collect();
    let mut allowed = 0;
    for call in calls {
        allowed += usize::from(call.await.unwrap() == Decision::Allow);
    }
    allowed
}

/// 50 attempts at once at each flow of one account allow exactly its budget, and every
/// attempt is counted once (for a mail flow, only the mail that was sent).
async fn fifty_at_once_allow_exactly_the_budget(d: &Daemon) {
    let clients = [d.client().await];
    let mut ops = caller(d.addr, None, None).await.unwrap();
    for (flow, budget) in BUDGETS {
        assert_eq!(at_once(&clients, "race@example.com", flow, 50).await, budget, "{flow:?}");
        let seen = inspect_flow(&mut ops, "default", "race@example.com", flow).await;
        let counted = if budget == 1 { 1 } else { 50 };
        assert_eq!(seen.failures, counted, "{flow:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_second_factor_attempts_allow_exactly_five_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(None, dir.path(), FLOW_REALMS).await;
    fifty_at_once_allow_exactly_the_budget(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_second_factor_attempts_allow_exactly_five_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(Some(&redis), dir.path(), FLOW_REALMS).await;
    fifty_at_once_allow_exactly_the_budget(&d).await;
    let key = flow_record_key("default", "race@example.com", Flow::SecondFactor);
    assert_eq!(read_record(&mut redis.conn(), &key).map(|r| (r.0, r.2)), Some((50, 0)));
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_second_factor_attempts_allow_exactly_five_on_a_three_master_cluster() {
    let cluster = RedisCluster::start(3, 0);
    let store = format!("redis_cluster_nodes = {}", cluster.nodes_toml());
    let d = Daemon::start(TestConfig::store(&store).extra(FLOW_REALMS).settings()).await;
    fifty_at_once_allow_exactly_the_budget(&d).await;
    let key = flow_record_key("default", "race@example.com", Flow::SecondFactor);
    assert_eq!(cluster.read_record(&key).map(|r| (r.0, r.2)), Some((50, 0)));
    d.shutdown().await;
}

/// Three daemons on one Redis, 30 attempts at once at each flow of one account spread
/// over them: the fleet allows what one daemon would, no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_daemons_on_one_redis_share_one_flow_budget_exactly() {
    let redis = RedisServer::start();
    let mut daemons = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..3 {
        let d = Daemon::start(TestConfig::redis(&redis.url()).extra(FLOW_REALMS).settings()).await;
        clients.push(d.client().await);
        daemons.push(d);
    }
    for (flow, budget) in BUDGETS {
        let allowed = at_once(&clients, "fleet@example.com", flow, 30).await;
        assert_eq!(allowed, budget, "{flow:?} across three daemons");
    }
    let key = flow_record_key("default", "fleet@example.com", Flow::SecondFactor);
    assert_eq!(read_record(&mut redis.conn(), &key).unwrap().0, 30, "each attempt counted once");
    for d in daemons {
        d.shutdown().await;
    }
}

/// A reset request's answer, an `UNAVAILABLE` read as the deny it is (a store slowed
/// past its timeout by a loaded machine: the gateway sends no mail).
async fn reset_from(c: &mut Client, realm: &str, identifier: &str, client_key: &str) -> Decision {
    match try_flow(c, realm, identifier, Flow::PasswordReset, client_key, "").await {
        Ok(answer) => decision(&answer),
        Err(status) if status.code() == tonic::Code::Unavailable => Decision::Deny,
        Err(status) => panic!("{status:?}"),
    }
}

/// An attacker who asks for reset mails to one account from a new address each time
/// (1,000 of them, more than a second apart in all) gets the account's daily cap and not
/// one mail more: the cap is the account's, whichever networks ask.
async fn rotating_addresses_never_pass_the_daily_cap(d: &Daemon) {
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let victim = "victim@example.com";
    let sent = async |ops: &mut Caller| {
        inspect_flow(ops, "quick", victim, Flow::PasswordReset).await.failures
    };
    let mut tick = tokio::time::interval(Duration::from_millis(4));
    let (mut allowed, mut asked) = (0, 0);
    // Five mails a second apart take about four seconds (a deny that was a store's
    // timeout may have been noted: the log is the judge)...
    let deadline = Instant::now() + Duration::from_secs(20);
    while allowed < 5 && (asked % 50 != 0 || sent(&mut ops).await < 5) {
        assert!(Instant::now() < deadline, "only {allowed} mails in 20 s");
        tick.tick().await;
        let answer = reset_from(&mut c, "quick", victim, &ip(asked)).await;
        allowed += usize::from(answer == Decision::Allow);
        asked += 1;
    }
    // ...and after the fifth, for longer than the interval and up to 1,000 addresses,
    // none.
    let capped = Instant::now();
    while asked < 1000 || capped.elapsed() < Duration::from_millis(1500) {
        tick.tick().await;
        let answer = reset_from(&mut c, "quick", victim, &ip(asked)).await;
        assert_eq!(answer, Decision::Deny, "a sixth mail in 24 h, from address {asked}");
        asked += 1;
    }
    let seen = inspect_flow(&mut ops, "quick", victim, Flow::PasswordReset).await;
    assert_eq!(seen.failures, 5, "{seen:?}");
    assert!(seen.seconds_until_open > 86_000, "held back by the cap, not the interval: {seen:?}");
    // No address's budget was what stopped the mails: the last one still mails another
    // account.
    let last = ip(asked - 1);
    assert_eq!(reset_from(&mut c, "quick", "other@example.com", &last).await, Decision::Allow);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_a_thousand_client_addresses_never_passes_an_accounts_reset_cap_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(None, dir.path(), FLOW_REALMS).await;
    rotating_addresses_never_pass_the_daily_cap(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotating_a_thousand_client_addresses_never_passes_an_accounts_reset_cap_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(Some(&redis), dir.path(), FLOW_REALMS).await;
    rotating_addresses_never_pass_the_daily_cap(&d).await;
    d.shutdown().await;
}

fn pttl(redis: &RedisServer, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(&mut redis.conn()).unwrap()
}

/// At most `want` ms and within 3 s of it (the time the test took).
fn near(ttl: i64, want: i64) -> bool {
    ttl <= want && ttl > want - 3_000
}

/// A one-time code's record never escalates and keeps its consecutive failures across
/// windows (docs/flows.md; docs/throttle.md, "The ceiling"): kept a day after each try,
/// the door shut for the window, and at the realm's ceiling shut for good (no expiry)
/// until a right code (`ClearFlow`). A recovery code's record is kept for its retention.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_factor_record_keeps_its_count_across_windows_up_to_the_ceiling() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(Some(&redis), dir.path(), FLOW_REALMS).await;
    let mut c = d.client().await;
    let id = "ttl@example.com";
    let key = flow_record_key("default", id, Flow::SecondFactor);
    assert_eq!(flow_from(&mut c, "default", id, Flow::SecondFactor, "").await, Decision::Allow);
    let day = 24 * 3_600_000;
    assert!(near(pttl(&redis, &key), day), "one failure: PTTL {}", pttl(&redis, &key));
    for n in 2..=20 {
        let answer = flow_from(&mut c, "default", id, Flow::SecondFactor, "").await;
        assert_eq!(answer == Decision::Allow, n <= 5, "attempt {n}");
    }
    assert_eq!(read_record(&mut redis.conn(), &key).map(|r| (r.0, r.2)), Some((20, 0)));
    // A completed password reset clears the code flows' records too (the owner proved
    // the mailbox; a code step shut at its ceiling opens again).
    let reset = portcullis::pb::ClearReason::PasswordResetCompleted as i32;
    c.clear("default", id, reset).await.unwrap();
    assert_eq!(read_record(&mut redis.conn(), &key), None, "a completed reset kept the codes");
    assert_eq!(flow_from(&mut c, "default", id, Flow::SecondFactor, "").await, Decision::Allow);
    // The otp realm: three codes a 2-minute window, seven in all until a right code.
    let otp = flow_record_key("otp", id, Flow::SecondFactor);
    let mut conn = redis.conn();
    let mut allowed = Vec::new();
    for window in 0..4 {
        let mut this = 0;
        for _ in 0..4 {
            this += usize::from(
                flow_from(&mut c, "otp", id, Flow::SecondFactor, "").await == Decision::Allow,
            );
        }
        allowed.push(this);
        assert_eq!(read_record(&mut conn, &otp).unwrap().2, 0, "never escalates");
        if window < 3 {
            age_record(&mut conn, &otp, 2 * 60_000);
        }
    }
    assert_eq!(allowed, [3, 3, 1, 0], "the seventh is the last");
    assert_eq!(pttl(&redis, &otp), -1, "a record at its ceiling must not expire");
    clear_flow(&mut c, "otp", id, Flow::SecondFactor).await.unwrap();
    assert_eq!(flow_from(&mut c, "otp", id, Flow::SecondFactor, "").await, Decision::Allow);
    // A recovery code escalates: its exhausted record is kept for the retention (7 days).
    let rc = flow_record_key("default", id, Flow::RecoveryCode);
    for _ in 0..6 {
        flow_from(&mut c, "default", id, Flow::RecoveryCode, "").await;
    }
    assert!(near(pttl(&redis, &rc), 7 * 24 * 3_600_000), "PTTL {}", pttl(&redis, &rc));
    d.shutdown().await;
}
