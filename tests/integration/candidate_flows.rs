//! A candidate's flows in shadow (`[realms.NAME.candidate.flows.<flow>]`,
//! `Admin/CandidateReport`; docs/throttle.md, "Trying a policy in shadow"): a replayed
//! log of one-time codes (wrong ones, and right ones the gateway clears with
//! `ClearFlow`) and reset mail requests of several accounts, run against the enforced
//! flows (five codes a window; five mails a day, a second apart) and a tighter candidate
//! (three codes; two mails a day, four an hour from a network): each flow's line of the report equals a count by hand
//! from the log, on the embedded store and on Redis across two daemons, and every answer
//! is the enforced policy's.

use std::process::Command;
use std::time::Duration;

use portcullis::pb::{
    CandidateDefenceReport, ClearFlowRequest, Decision, Flow, RecordFlowAttemptRequest,
};
use portcullis_test_support::*;

/// The enforced flows are the defaults but for mails a second apart; the candidate
/// sets only two flows' limits (so only they are tried, and `verification_resend` has
/// no line).
const REALMS: &str = r#"
[realms.shadowed]
[realms.shadowed.flows.password_reset]
min_interval = "1s"
[realms.shadowed.candidate.flows.second_factor]
max_failures = 3
[realms.shadowed.candidate.flows.password_reset]
daily_cap = 2
network_budget = 4
"#;

/// The code log: each account's codes (true: the right one), replayed one attempt of
/// each account in turn.
fn code_log() -> Vec<(&'static str, bool)> {
    let (w, r) = (false, true);
    let accounts: [(&str, Vec<bool>); 4] = [
        ("alice@example.com", vec![w, w, w, w, r]),
        ("bob@example.com", vec![w, w, w, w, w, w, w]),
        ("carol@example.com", vec![w, r]),
        ("dave@example.com", vec![w, w, w, r, w, w, w, w]),
    ];
    let mut out = Vec::new();
    for turn in 0..8 {
        for (who, codes) in &accounts {
            if let Some(&right) = codes.get(turn) {
                out.push((*who, right));
            }
        }
    }
    out
}

/// The mail log: how many reset mails each account asks for, one a round, the rounds
/// more than the interval apart.
const MAILS: [(&str, usize); 3] =
    [("erin@example.com", 4), ("frank@example.com", 1), ("grace@example.com", 3)];

/// The code flow by hand: an attempt's number in its window; the enforced policy allows
/// the first five, the candidate the first three; a right code the enforced policy
/// allowed is cleared, which starts the record over (and is a user the candidate
/// locked out when it refused it). Also the enforced answers, in order.
fn codes_by_hand(log: &[(&str, bool)]) -> ([u64; 3], Vec<bool>) {
    let mut n = std::collections::HashMap::<&str, u64>::new();
    let ([mut refuse, mut allow, mut locked_out], mut answers) = ([0; 3], Vec::new());
    for (who, right) in log {
        let k = n.entry(who).or_default();
        *k += 1;
        let (enforced, candidate) = (*k <= 5, *k <= 3);
        answers.push(enforced);
        refuse += u64::from(enforced && !candidate);
        allow += u64::from(!enforced && candidate);
        locked_out += u64::from(enforced && !candidate && *right);
        if *right && enforced {
            *k = 0;
        }
    }
    ([refuse, allow, locked_out], answers)
}

/// The mail flow by hand: the enforced policy allows five a day (and 30 an hour from
/// the network); the candidate two a day, and four from the network, whose bucket
/// refills far slower than the test runs: a request its budget refused is refused, else
/// its log decides, and a send its log refused gives the token back (the rounds are
/// more than the interval apart); nothing clears a send log.
fn mails_by_hand() -> [u64; 3] {
    let (mut tokens, mut refuse) = (4u64, 0u64);
    let mut sent = std::collections::HashMap::<&str, u64>::new();
    for round in 0..4 {
        for (who, mails) in MAILS {
            if round >= mails {
                continue;
            }
            let count = sent.entry(who).or_default();
            let allowed = tokens > 0 && *count < 2;
            if allowed {
                (tokens, *count) = (tokens - 1, *count + 1);
            }
            refuse += u64::from(!allowed);
        }
    }
    [refuse, 0, 0]
}

fn line(lines: &[CandidateDefenceReport], name: &str) -> [u64; 3] {
    lines
        .iter()
        .find(|l| l.defence == name)
        .map_or([u64::MAX; 3], |l| [l.would_refuse, l.would_allow, l.users_locked_out])
}

/// The report's flow lines once they hold `want`, or after 20 s.
async fn lines_when(daemon: &DaemonProcess, want: [[u64; 3]; 2]) -> Vec<CandidateDefenceReport> {
    let holds = |r: &portcullis::pb::CandidateReportResponse| {
        [line(&r.defences, "second_factor"), line(&r.defences, "password_reset")] == want
    };
    candidate_report_when(daemon.addr, "shadowed", holds).await.defences
}

/// One `RecordFlowAttempt` on `daemon`'s client: whether it was allowed.
async fn flow(c: &mut Client, who: &str, flow: Flow, client_key: &str) -> bool {
    let request = RecordFlowAttemptRequest {
        account: account("shadowed", who),
        flow: flow as i32,
        client_key: client_key.into(),
        attempt_id: String::new(),
    };
    let r = c.0.record_flow_attempt(request).await.unwrap().into_inner();
    r.decision == Decision::Allow as i32
}

/// Replays both logs on `clients` in turn (a right code cleared through the next one),
/// asserting each answer is the enforced policy's; answers the report it wants.
async fn replay(clients: &mut [Client]) -> [[u64; 3]; 2] {
    let log = code_log();
    let (codes, answers) = codes_by_hand(&log);
    for (i, ((who, right), want)) in log.iter().zip(answers).enumerate() {
        let n = clients.len();
        let allowed = flow(&mut clients[i % n], who, Flow::SecondFactor, "198.51.100.7").await;
        assert_eq!(allowed, want, "{who}'s code {i}: the enforced answer");
        if *right && allowed {
            let request = ClearFlowRequest {
                account: account("shadowed", who),
                flow: Flow::SecondFactor as i32,
            };
            clients[(i + 1) % n].0.clear_flow(request).await.unwrap();
        }
    }
    let mut i = 0;
    for round in 0..4 {
        for (who, mails) in MAILS {
            if round < mails {
                let c = &mut clients[i % clients.len()];
                i += 1;
                let allowed = flow(c, who, Flow::PasswordReset, "203.0.113.9").await;
                assert!(allowed, "{who}'s mail {round}: the enforced policy allows five");
            }
        }
        tokio::time::sleep(Duration::from_millis(1_200)).await;
    }
    let want = [codes, mails_by_hand()];
    assert_eq!(want, [[6, 0, 2], [4, 0, 0]], "the logs as counted by hand");
    want
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_flow_log_reports_by_hand_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let daemon =
        DaemonProcess::spawn(&TestConfig::embedded(&dir.path().join("d")).extra(REALMS).toml());
    let want = replay(&mut [daemon.client().await]).await;
    let lines = lines_when(&daemon, want).await;
    let got = [line(&lines, "second_factor"), line(&lines, "password_reset")];
    assert_eq!(got, want, "{lines:?}");
    let names: Vec<&str> = lines.iter().map(|l| l.defence.as_str()).collect();
    assert_eq!(names, ["login", "second_factor", "password_reset"], "the flows it sets");
    assert_eq!(line(&lines, "login"), [0; 3], "no login was counted");
    // `portcullis config-dump` shows the candidate's flows as they run.
    let out = Command::new(daemon_binary())
        .args(["config-dump", "--addr", &format!("http://{}", daemon.addr)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dump: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let shown = &dump["settings"]["realms"]["shadowed"]["candidate"]["flows"];
    assert_eq!(shown["second_factor"]["max_failures"], 3, "{shown}");
    assert_eq!(shown["password_reset"]["min_interval"], "1s", "the realm's: {shown}");
    assert_eq!(shown["password_reset"]["daily_cap"], 2, "{shown}");
    assert_eq!(shown["password_reset"]["network_budget"], 4, "{shown}");
    assert!(daemon.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_flow_log_reports_by_hand_across_two_daemons_on_redis() {
    let redis = RedisServer::start();
    let config = TestConfig::redis(&redis.url()).extra(REALMS).toml();
    let daemons = [DaemonProcess::spawn(&config), DaemonProcess::spawn(&config)];
    let mut clients = [daemons[0].client().await, daemons[1].client().await];
    let want = replay(&mut clients).await;
    let lines = lines_when(&daemons[0], want).await;
    let got = [line(&lines, "second_factor"), line(&lines, "password_reset")];
    assert_eq!(got, want, "{lines:?}");
    // The candidate's records are in the accounts' hash tags, and expire.
    let mut conn = redis.conn();
    let shadows: Vec<String> =
        redis::cmd("KEYS").arg("portcullis:v2:*:f:*:s").query(&mut conn).unwrap();
    assert!(!shadows.is_empty(), "no candidate flow record");
    assert_store_clean(&mut conn, &["example.com", "alice", "erin"]);
    // `portcullis candidate-report` prints a line per flow it tries.
    let (code, printed) = candidate_report_printed(daemons[1].addr, "shadowed");
    assert_eq!(code, Some(0), "{printed}");
    assert!(printed.contains("second_factor users_locked_out: 2"), "{printed}");
    assert!(printed.contains("password_reset would_refuse: 4"), "{printed}");
    assert!(!printed.contains("verification_resend"), "{printed}");
    for d in daemons {
        assert!(d.terminate().await.success());
    }
}

/// A step-up's verified code: the right password from an unknown device gets a
/// challenge, two wrong codes follow (the candidate, one code a window, refuses the
/// second), then the gateway verifies the right code and calls `ConfirmDevice`: the code
/// the candidate refused last was followed by the right one, a user it would have shut
/// out, on the `second_factor` line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_device_after_a_code_the_candidate_refused_is_a_user_it_shuts_out() {
    const STEP_UP: &str = r#"
[realms.shadowed]
unknown_device = "step_up"
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
[realms.shadowed.candidate.flows.second_factor]
max_failures = 1
"#;
    let dir = tempfile::tempdir().unwrap();
    let config = TestConfig::embedded(&dir.path().join("d")).extra(STEP_UP).toml();
    let daemon = DaemonProcess::spawn(&config);
    let mut c = daemon.client().await;
    let (who, password) = ("stepped@example.com", "right-password-2026");
    let hash = bcrypt::hash(password, 4).unwrap();
    let r = c.verify("shadowed", who, password.as_bytes(), &hash, "home").await.unwrap();
    let challenge = r.challenge_token.clone();
    assert!(!challenge.is_empty(), "a challenge: {r:?}");
    for n in 0..2 {
        assert!(flow(&mut c, who, Flow::SecondFactor, "home").await, "code {n}: enforced");
    }
    let request = portcullis::pb::ConfirmDeviceRequest {
        account: account("shadowed", who),
        challenge_token: challenge,
        stored_hash: hash,
    };
    let token = c.0.confirm_device(request).await.unwrap().into_inner().device_token;
    assert!(!token.is_empty());
    let want = [[1, 0, 1], [u64::MAX; 3]]; // no password_reset line: not tried
    let lines = lines_when(&daemon, want).await;
    assert_eq!(line(&lines, "second_factor"), want[0], "{lines:?}");
    assert!(daemon.terminate().await.success());
}
