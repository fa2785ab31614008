//! A candidate policy in shadow (`[realms.NAME.candidate]`, `Admin/CandidateReport`,
//! `portcullis candidate-report`; docs/throttle.md, "Trying a policy in shadow"): a
//! replayed login log of right and wrong passwords of many accounts, some from one
//! network, run against the enforced policy (five failures a window) and a tighter
//! candidate (three): the report's numbers equal a count by hand from the log, on the
//! embedded store through `Verify`, and on Redis through `RecordAttempt` and
//! `ClearAttempts` across two daemons. The candidate never changes an answer.

use std::process::Command;
use std::time::Duration;

use portcullis::pb::{
    CandidateReportRequest, CandidateReportResponse, Decision, DoorState, InspectRequest, Verdict,
};
use portcullis_test_support::*;

/// The enforced policy is the defaults (five a window, step-up from three); the
/// candidate allows three a window (and so, by default, steps up from one). Every
/// attempt counts (no repeat list), and comparisons are cheap.
const REALMS: &str = r#"
[realms.shadowed]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
repeat_list_length = 0
[realms.shadowed.candidate]
max_failures = 3
"#;

const RIGHT: &str = "right-password-2026";

/// The log: each account's attempts (true: the right password), replayed one attempt
/// of each account in turn; six more accounts fail once each from one network.
fn log() -> Vec<(String, bool, &'static str)> {
    let (w, r) = (false, true);
    let accounts: Vec<(&str, Vec<bool>)> = vec![
        ("alice@example.com", vec![w, w, w, w, r]),
        ("bob@example.com", vec![w, w, w, w, w, w, w]),
        ("carol@example.com", vec![w, w, r]),
        ("dave@example.com", vec![w, w, w, r, w, w, w, w]),
        // A first-try login: through Verify an accept, which carries no step-up.
        ("erin@example.com", vec![r]),
    ];
    let mut out = Vec::new();
    for turn in 0..8 {
        for (who, attempts) in &accounts {
            if let Some(&right) = attempts.get(turn) {
                out.push(((*who).to_owned(), right, "198.51.100.7"));
            }
        }
    }
    for n in 0..6 {
        out.push((format!("shared{n}@example.com"), false, "203.0.113.50"));
    }
    out
}

/// The report by hand: per account, the attempt's number in its window; the enforced
/// policy allows the first five, the candidate the first three; a right password the
/// enforced policy allowed starts the account over; step-up from three (enforced) and
/// from one (the candidate), on every answer `RecordAttempt` gives, and on every answer
/// but an accept through `Verify` (`verify`: an accept clears the window and carries no
/// step-up).
const STEP_UP: (u64, u64) = (3, 1);
fn by_hand(log: &[(String, bool, &str)], verify: bool) -> [u64; 5] {
    let mut n = std::collections::HashMap::<&str, u64>::new();
    let [mut refuse, mut allow, mut locked_out, mut added, mut dropped] = [0; 5];
    for (who, right, _) in log {
        let k = n.entry(who.as_str()).or_default();
        *k += 1;
        let (enforced, candidate) = (*k <= 5, *k <= 3);
        if enforced && !candidate {
            refuse += 1;
            locked_out += u64::from(*right);
        }
        allow += u64::from(!enforced && candidate);
        let (enforced_step, candidate_step) = (*k >= STEP_UP.0, *k >= STEP_UP.1);
        let carried = !(verify && *right && enforced);
        added += u64::from(carried && candidate_step && !enforced_step);
        dropped += u64::from(carried && enforced_step && !candidate_step);
        if *right && enforced {
            *k = 0;
        }
    }
    [refuse, allow, locked_out, added, dropped]
}

fn numbers(r: &CandidateReportResponse) -> [u64; 5] {
    [r.would_refuse, r.would_allow, r.users_locked_out, r.step_up_added, r.step_up_dropped]
}

async fn report(daemon: &DaemonProcess, realm: &str) -> CandidateReportResponse {
    let mut c = caller(daemon.addr, None, None).await.unwrap();
    let request = CandidateReportRequest { realm: realm.into() };
    c.admin.candidate_report(request).await.unwrap().into_inner()
}

/// The report once it holds `want`, or after 20 s.
async fn report_when(daemon: &DaemonProcess, want: [u64; 5]) -> CandidateReportResponse {
    candidate_report_when(daemon.addr, "shadowed", |r| numbers(r) == want).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_log_reports_by_hand_through_verify_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let daemon =
        DaemonProcess::spawn(&TestConfig::embedded(&dir.path().join("d")).extra(REALMS).toml());
    let hash = bcrypt::hash(RIGHT, 4).unwrap();
    let mut c = daemon.client().await;
    let log = log();
    for (i, (who, right, network)) in log.iter().enumerate() {
        let password = if *right { RIGHT.to_owned() } else { format!("wrong-{i}") };
        let r = c.verify("shadowed", who, password.as_bytes(), &hash, network).await.unwrap();
        // The enforced policy decides: a right password within five is accepted.
        let accepted = r.verdict == Verdict::Accept as i32;
        assert_eq!(accepted, *right, "{who}'s attempt {i}: {r:?}");
    }
    let want = by_hand(&log, true);
    assert_eq!(want, [6, 0, 2, 16, 0], "the log as counted by hand");
    let r = report_when(&daemon, want).await;
    assert_eq!(numbers(&r), want, "{r:?}");
    assert!(r.loaded && r.candidate_id.len() == 16 && r.since_unix_ms > 0, "{r:?}");
    assert_eq!(r.guesses_stopped, 4, "six refused, two of them right");
    // `portcullis config-dump` shows the candidate as it runs, and the id of its report.
    let out = Command::new(daemon_binary())
        .args(["config-dump", "--addr", &format!("http://{}", daemon.addr)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dump: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shown = &dump["settings"]["realms"]["shadowed"]["candidate"];
    assert_eq!(shown["id"], r.candidate_id.as_str(), "{shown}");
    assert_eq!(
        (shown["max_failures"].as_u64(), shown["first_window"].as_str()),
        (Some(3), Some("15m"))
    );
    // Inspect: dave's four failures since his last login leave the enforced door open
    // and the candidate's shut; bob's seven shut both; carol's login opened both.
    let mut admin = caller(daemon.addr, None, None).await.unwrap().admin;
    let mut doors = Vec::new();
    for who in ["dave@example.com", "bob@example.com", "carol@example.com"] {
        let request = InspectRequest { account: account("shadowed", who), flow: 0 };
        let r = admin.inspect(request).await.unwrap().into_inner();
        doors.push((r.door, r.candidate_door));
    }
    let (open, closed) = (DoorState::Open as i32, DoorState::Closed as i32);
    assert_eq!(doors, [(open, closed), (closed, closed), (open, open)]);
    let request = InspectRequest { account: account("default", "dave@example.com"), flow: 0 };
    let r = admin.inspect(request).await.unwrap().into_inner();
    assert_eq!(r.candidate_door, DoorState::Unspecified as i32, "no candidate in the realm");
    assert!(daemon.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_log_reports_by_hand_across_two_daemons_on_redis() {
    let redis = RedisServer::start();
    let config = TestConfig::redis(&redis.url()).extra(REALMS).toml();
    let daemons = [DaemonProcess::spawn(&config), DaemonProcess::spawn(&config)];
    let mut clients = [daemons[0].client().await, daemons[1].client().await];
    let log = log();
    for (i, (who, right, network)) in log.iter().enumerate() {
        let c = &mut clients[i % 2];
        let decision = c.attempt_from("shadowed", who, network).await.unwrap();
        // The gateway compares the password itself and reports a match to the other
        // daemon.
        if *right && decision.decision == Decision::Allow as i32 {
            let verified = 1;
            clients[(i + 1) % 2].clear_from("shadowed", who, verified, network).await.unwrap();
        }
    }
    let want = by_hand(&log, false);
    assert_eq!(want, [6, 0, 2, 17, 0], "erin's answer carries the count's step-up");
    let r = report_when(&daemons[0], want).await;
    assert_eq!(numbers(&r), want, "{r:?}");
    let other = report(&daemons[1], "shadowed").await;
    assert_eq!(numbers(&other), want, "both daemons read the store");
    assert_eq!((other.candidate_id, other.since_unix_ms), (r.candidate_id, r.since_unix_ms));
    let mut admin = caller(daemons[1].addr, None, None).await.unwrap().admin;
    let request = InspectRequest { account: account("shadowed", "dave@example.com"), flow: 0 };
    let dave = admin.inspect(request).await.unwrap().into_inner();
    let doors = (DoorState::Open as i32, DoorState::Closed as i32);
    assert_eq!((dave.door, dave.candidate_door), doors, "open, and shut under the candidate");

    // `portcullis candidate-report` prints it; a realm without a candidate exits 1.
    let (code, printed) = candidate_report_printed(daemons[1].addr, "shadowed");
    assert_eq!(code, Some(0), "{printed}");
    assert!(printed.contains("login users_locked_out: 2"), "{printed}");
    assert!(printed.contains("login guesses_stopped: 4"), "{printed}");
    assert!(!printed.contains("example.com"), "{printed}");
    let (code, printed) = candidate_report_printed(daemons[1].addr, "default");
    assert_eq!(code, Some(1), "{printed}");
    for d in daemons {
        assert!(d.terminate().await.success());
    }
}

/// The enforced policy of the store-level checks below, and a candidate whose ceiling
/// is two.
fn policies() -> (portcullis::throttle::Policy, portcullis::throttle::Policy) {
    let enforced = portcullis::throttle::Policy {
        max_failures: 5,
        max_consecutive_failures: 100,
        lockout_duration: Duration::from_secs(900),
        first_window: Duration::from_secs(900),
        max_window: Duration::from_secs(3600),
        retention: Duration::from_secs(86400),
        second_factor_required: false,
    };
    (enforced, portcullis::throttle::Policy { max_consecutive_failures: 2, ..enforced })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_record_never_outlives_its_retention_and_a_corrupt_one_counts_nothing() {
    use portcullis::normalize::{Normalization, normalize};
    use portcullis::store::attempt_count::{Attempt, AttemptCountStore};
    use portcullis::store::keys::AccountKey;
    use portcullis::store::redis::RedisStore;
    let redis = RedisServer::start();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(5), 4).unwrap();
    let secret = portcullis::secret::KeySecret::new(SECRET.as_bytes().to_vec());
    let id = |who: &str| normalize(Normalization::Email, who).unwrap();
    let (enforced, candidate) = policies();
    let key = AccountKey::new(&secret, "default", &id("ceiling@example.com"));
    let shadow = key.candidate_record().unwrap();
    let attempt = Attempt::new(&key, None, &enforced).with_candidate(Some(&candidate));
    for _ in 0..3 {
        store.count(&attempt).await.unwrap();
    }
    let mut conn = redis.conn();
    let ttl: i64 = redis::cmd("PTTL").arg(&shadow).query(&mut conn).unwrap();
    assert!(ttl > 86_000_000, "at the candidate's ceiling, kept for its retention: {ttl}");

    // A candidate record edited by hand: the count fails before anything is written,
    // and a clear goes through all the same.
    let other = AccountKey::new(&secret, "default", &id("corrupt@example.com"));
    let shadow = other.candidate_record().unwrap();
    let _: () = redis::cmd("SET").arg(&shadow).arg("not,a,record").query(&mut conn).unwrap();
    let attempt = Attempt::new(&other, None, &enforced).with_candidate(Some(&candidate));
    assert!(store.count(&attempt).await.is_err(), "a corrupt candidate record counted");
    let exists: i64 = redis::cmd("EXISTS").arg(other.record()).query(&mut conn).unwrap();
    assert_eq!(exists, 0, "the enforced count was written before the failure");
    let _: () = redis::cmd("DEL").arg(&shadow).query(&mut conn).unwrap();
    let _: () = redis::cmd("HSET").arg(&shadow).arg("f").arg("1").query(&mut conn).unwrap();
    assert!(!store.clear(&other).await.unwrap(), "a clear reads nothing from it");
    let exists: i64 = redis::cmd("EXISTS").arg(&shadow).query(&mut conn).unwrap();
    assert_eq!(exists, 0, "and deletes it");
    store.count(&attempt).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_candidate_record_counts_nothing_on_the_embedded_store_either() {
    use portcullis::normalize::{Normalization, normalize};
    use portcullis::store::attempt_count::{Attempt, AttemptCountStore};
    use portcullis::store::embedded::{EmbeddedStore, SystemClock};
    use portcullis::store::keys::AccountKey;
    const ENTRIES: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("entries");
    let dir = tempfile::tempdir().unwrap();
    let open = || {
        EmbeddedStore::open(dir.path(), Duration::from_secs(5), std::sync::Arc::new(SystemClock))
            .unwrap()
    };
    let secret = portcullis::secret::KeySecret::new(SECRET.as_bytes().to_vec());
    let id = normalize(Normalization::Email, "corrupt@example.com").unwrap();
    let key = AccountKey::new(&secret, "default", &id);
    drop(open());
    {
        let db = redb::Database::create(dir.path().join("portcullis.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let shadow = key.candidate_record().unwrap();
        txn.open_table(ENTRIES).unwrap().insert(shadow.as_str(), &[1u8, 0, 0][..]).unwrap();
        txn.commit().unwrap();
    }
    let store = open();
    let (enforced, candidate) = policies();
    let attempt = Attempt::new(&key, None, &enforced).with_candidate(Some(&candidate));
    assert!(store.count(&attempt).await.is_err(), "a corrupt candidate record counted");
    assert_eq!(store.record(&key).await.unwrap(), None, "the enforced count was written");
    assert!(!store.clear(&key).await.unwrap(), "a clear goes through and reads nothing");
    assert!(store.count(&attempt).await.unwrap().allowed, "counted afresh after the clear");
}
