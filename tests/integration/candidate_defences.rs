//! A candidate in shadow beyond the account's own record (`[realms.NAME.candidate]`;
//! docs/throttle.md, "Trying a policy in shadow").
//!
//! The network's bucket (`network_capacity`): a replayed login log from two client
//! networks, run against the enforced bucket (ten tokens) and a tighter candidate (two):
//! the report's network line equals a count by hand from the log, on the embedded store
//! through `Verify`, and on Redis through `RecordAttempt` and `ClearAttempts` across two
//! daemons. A known device's bucket: attempts with a device token are tried on the
//! bucket's own candidate record. The candidate never changes an answer.

use std::process::Command;

use portcullis::pb::{CandidateDefenceReport, Decision, RecordAttemptResponse, Verdict};
use portcullis_test_support::*;

/// Ten tokens a day enforced, two for the candidate: nothing refills during the test.
/// Every attempt counts (no repeat list), and comparisons are cheap.
const REALMS: &str = r#"
[realms.netshadow]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
repeat_list_length = 0
network_capacity = 10
[realms.netshadow.candidate]
network_capacity = 2
"#;

const RIGHT: &str = "right-password-2026";
const ENFORCED: u32 = 10;
const CANDIDATE: u32 = 2;

/// The log: one attempt per account (true: the right password), from one of two
/// networks.
fn log() -> Vec<(String, bool, &'static str)> {
    let (w, r) = (false, true);
    let one = [w, w, r, w, r, w, w, r].map(|right| (right, "198.51.100.7"));
    let other = [r, w].map(|right| (right, "203.0.113.50"));
    one.into_iter()
        .chain(other)
        .enumerate()
        .map(|(i, (right, network))| (format!("user{i}@example.com"), right, network))
        .collect()
}

/// The network's line by hand: each attempt takes a token of its network's bucket and
/// of the candidate's; a right password gives both back, or, where the candidate's
/// bucket had none for it, is a user the candidate would have shut out. The enforced
/// bucket never runs dry here. `[would_refuse, would_allow, users_locked_out]`.
fn by_hand(log: &[(String, bool, &str)]) -> [u64; 3] {
    let mut used = std::collections::HashMap::<&str, (u32, u32)>::new();
    let [mut refuse, mut allow, mut locked_out] = [0; 3];
    for (_, right, network) in log {
        let (enforced, candidate) = used.entry(network).or_default();
        let (e, c) = (*enforced < ENFORCED, *candidate < CANDIDATE);
        assert!(e, "the enforced bucket is never empty in this log");
        *enforced += 1;
        *candidate += u32::from(c);
        refuse += u64::from(e && !c);
        allow += u64::from(!e && c);
        if *right {
            *enforced -= 1;
            if c {
                *candidate -= 1;
            } else {
                locked_out += 1;
            }
        }
    }
    [refuse, allow, locked_out]
}

fn network_line(r: &portcullis::pb::CandidateReportResponse) -> Option<CandidateDefenceReport> {
    r.defences.iter().find(|d| d.defence == "network").cloned()
}

fn numbers(line: &Option<CandidateDefenceReport>) -> [u64; 3] {
    line.as_ref().map_or([0; 3], |l| [l.would_refuse, l.would_allow, l.users_locked_out])
}

/// The report once its network line holds `want`, or after 20 s.
async fn report_when(
    daemon: &DaemonProcess,
    want: [u64; 3],
) -> portcullis::pb::CandidateReportResponse {
    candidate_report_when(daemon.addr, "netshadow", |r| numbers(&network_line(r)) == want).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_log_reports_the_network_by_hand_through_verify_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let daemon =
        DaemonProcess::spawn(&TestConfig::embedded(&dir.path().join("d")).extra(REALMS).toml());
    let hash = bcrypt::hash(RIGHT, 4).unwrap();
    let mut c = daemon.client().await;
    let log = log();
    for (i, (who, right, network)) in log.iter().enumerate() {
        let password = if *right { RIGHT.to_owned() } else { format!("wrong-{i}") };
        let r = c.verify("netshadow", who, password.as_bytes(), &hash, network).await.unwrap();
        assert_eq!(r.verdict == Verdict::Accept as i32, *right, "attempt {i}: {r:?}");
        assert!(!r.network_throttled, "attempt {i}: {r:?}");
    }
    let want = by_hand(&log);
    assert_eq!(want, [6, 0, 3], "the log as counted by hand");
    let r = report_when(&daemon, want).await;
    let line = network_line(&r);
    assert_eq!(numbers(&line), want, "{r:?}");
    assert_eq!(line.unwrap().guesses_stopped, 3, "six refused, three of them right");
    let defences: Vec<_> = r.defences.iter().map(|d| d.defence.as_str()).collect();
    assert_eq!(defences, ["login", "network"]);
    assert_eq!((r.would_refuse, r.would_allow), (0, 0), "the login's rules are the realm's");
    // `portcullis config-dump` shows the candidate's bucket as it runs.
    let out = Command::new(daemon_binary())
        .args(["config-dump", "--addr", &format!("http://{}", daemon.addr)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dump: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shown = &dump["settings"]["realms"]["netshadow"]["candidate"];
    assert_eq!(shown["network_capacity"], 2, "{shown}");
    assert_eq!(shown["network_refill_period"], "1day", "{shown}");
    assert!(daemon.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_log_reports_the_network_by_hand_across_two_daemons_on_redis() {
    let redis = RedisServer::start();
    let config = TestConfig::redis(&redis.url()).extra(REALMS).toml();
    let daemons = [DaemonProcess::spawn(&config), DaemonProcess::spawn(&config)];
    let mut clients = [daemons[0].client().await, daemons[1].client().await];
    let log = log();
    for (i, (who, right, network)) in log.iter().enumerate() {
        let c = &mut clients[i % 2];
        let r: RecordAttemptResponse = c.attempt_from("netshadow", who, network).await.unwrap();
        assert_eq!(r.decision, Decision::Allow as i32, "attempt {i}: {r:?}");
        // The gateway compares the password itself and reports a match to the other
        // daemon, from the attempt's network.
        if *right {
            let verified = 1;
            clients[(i + 1) % 2].clear_from("netshadow", who, verified, network).await.unwrap();
        }
    }
    let want = by_hand(&log);
    let r = report_when(&daemons[0], want).await;
    assert_eq!(numbers(&network_line(&r)), want, "{r:?}");
    let other = report_when(&daemons[1], want).await;
    assert_eq!(numbers(&network_line(&other)), want, "both daemons read the store");

    let (code, printed) = candidate_report_printed(daemons[1].addr, "netshadow");
    assert_eq!(code, Some(0), "{printed}");
    assert!(printed.contains("network would_refuse: 6"), "{printed}");
    assert!(printed.contains("network users_locked_out: 3"), "{printed}");
    assert!(!printed.contains("example.com") && !printed.contains("198.51"), "{printed}");
    for d in daemons {
        assert!(d.terminate().await.success());
    }
}

/// The login's limits tried on a known device's bucket: five failures a window enforced,
/// three for the candidate.
const DEVICE_REALMS: &str = r#"
[realms.devshadow]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
repeat_list_length = 0
[realms.devshadow.candidate]
max_failures = 3
"#;

/// On a known device: four wrong passwords and the right one. The device's bucket
/// counts them; the candidate refuses the fourth and the fifth (the right password: a
/// user it would have shut out). After the match, the device's candidate record starts
/// over with its bucket.
async fn a_known_devices_bucket_is_tried_under_the_candidate(daemon: &DaemonProcess) {
    let hash = bcrypt::hash(RIGHT, 4).unwrap();
    let mut c = daemon.client().await;
    let who = "device-owner@example.com";
    let first = c.verify("devshadow", who, RIGHT.as_bytes(), &hash, "home").await.unwrap();
    let token = first.device_token.clone();
    assert!(!token.is_empty(), "{first:?}");
    let with_token = [false, false, false, false, true];
    for (i, right) in with_token.into_iter().enumerate() {
        let password = if right { RIGHT.to_owned() } else { format!("wrong-{i}") };
        let r = c
            .verify_with_device("devshadow", who, password.as_bytes(), &hash, "home", &token)
            .await
            .unwrap();
        assert_eq!(r.verdict == Verdict::Accept as i32, right, "attempt {i}: {r:?}");
    }
    let wrong = c
        .verify_with_device("devshadow", who, b"wrong-again", &hash, "home", &token)
        .await
        .unwrap();
    assert_eq!(wrong.verdict, Verdict::Reject as i32);
    let report = candidate_report_when(daemon.addr, "devshadow", |r| {
        (r.would_refuse, r.users_locked_out) == (2, 1)
    })
    .await;
    assert_eq!((report.would_refuse, report.users_locked_out, report.would_allow), (2, 1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_devices_bucket_is_tried_under_the_candidate_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(&dir.path().join("d")).extra(DEVICE_REALMS).toml();
    let daemon = DaemonProcess::spawn(&config);
    a_known_devices_bucket_is_tried_under_the_candidate(&daemon).await;
    assert!(daemon.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_devices_bucket_is_tried_under_the_candidate_on_redis() {
    let redis = RedisServer::start();
    let daemon = DaemonProcess::spawn(&TestConfig::redis(&redis.url()).extra(DEVICE_REALMS).toml());
    a_known_devices_bucket_is_tried_under_the_candidate(&daemon).await;
    assert!(daemon.terminate().await.success());
}
