//! Records that stay apart: a retried flow attempt counts once (and a retried mail
//! request keeps no network token), one attempt id on the login and on a flow counts in
//! each; clearing the login clears no flow and clearing a flow clears nothing else; the
//! operator reads and clears one flow at a time, through the Admin service and the CLI.

use portcullis::pb::{ClearReason, Verdict};
use portcullis::verify::hash::{HashParams, StoredHash};

use super::*;

/// `Admin/Inspect`'s failures of each record of `identifier` in `realm`: the login's,
/// then each flow's.
async fn counts(ops: &mut Caller, realm: &str, identifier: &str) -> [u32; 5] {
    let mut out = [0; 5];
    let records = [Flow::Unspecified, Flow::SecondFactor, Flow::RecoveryCode];
    let records = records.into_iter().chain([Flow::PasswordReset, Flow::VerificationResend]);
    for (slot, flow) in out.iter_mut().zip(records) {
        *slot = inspect_flow(ops, realm, identifier, flow).await.failures;
    }
    out
}

async fn with_id(
    c: &mut Client,
    realm: &str,
    who: &str,
    flow: Flow,
    from: &str,
    id: &str,
) -> Decision {
    decision(&try_flow(c, realm, who, flow, from, id).await.unwrap())
}

/// A retried code counts once and gets its first answer (at most twice more); a retried
/// mail request sends nothing more and gives its network's token back; one id on the
/// login and on each flow counts in each.
async fn attempt_ids_count_once_per_record(d: &Daemon) {
    use Decision::{Allow, Deny};
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let who = "retry@example.com";
    for n in 1..=4 {
        let id = format!("code-{n}");
        assert_eq!(with_id(&mut c, "default", who, Flow::SecondFactor, "", &id).await, Allow);
    }
    for _ in 0..2 {
        assert_eq!(with_id(&mut c, "default", who, Flow::SecondFactor, "", "code-5").await, Allow);
    }
    assert_eq!(counts(&mut ops, "default", who).await, [0, 5, 0, 0, 0]);
    assert_eq!(with_id(&mut c, "default", who, Flow::SecondFactor, "", "code-6").await, Deny);
    // A late retry gets its first answer, once more; then an id is no reusable ALLOW.
    assert_eq!(with_id(&mut c, "default", who, Flow::SecondFactor, "", "code-5").await, Allow);
    assert_eq!(with_id(&mut c, "default", who, Flow::SecondFactor, "", "code-5").await, Deny);
    assert_eq!(counts(&mut ops, "default", who).await, [0, 6, 0, 0, 0]);

    // A reset mail retried: one mail, and the retries keep none of the network's two
    // tokens, so the network may still cause one mail elsewhere, and then none.
    let net = "203.0.113.20";
    assert_eq!(with_id(&mut c, "budget2", who, Flow::PasswordReset, net, "mail-1").await, Allow);
    for _ in 0..2 {
        let answer = with_id(&mut c, "budget2", who, Flow::PasswordReset, net, "mail-1").await;
        assert_eq!(answer, Allow, "a retry gets its first answer");
    }
    let replayed = with_id(&mut c, "budget2", who, Flow::PasswordReset, net, "mail-1").await;
    assert_eq!(replayed, Deny, "a third retry");
    assert_eq!(counts(&mut ops, "budget2", who).await, [0, 0, 0, 1, 0]);
    let other = "other@example.com";
    assert_eq!(with_id(&mut c, "budget2", other, Flow::PasswordReset, net, "m").await, Allow);
    let third = "third@example.com";
    assert_eq!(with_id(&mut c, "budget2", third, Flow::PasswordReset, net, "m").await, Deny);
    assert_eq!(counts(&mut ops, "budget2", third).await, [0, 0, 0, 0, 0], "no mail was noted");
    // Each mail flow has a budget of its own.
    assert_eq!(with_id(&mut c, "budget2", third, Flow::VerificationResend, net, "v").await, Allow);
    // A refused request (the interval) gives its token back too: after three, the
    // network's second token is still there for another account, then none is.
    let (net, who) = ("203.0.113.21", "refused@example.com");
    for n in 0..4 {
        let id = n.to_string();
        let answer = with_id(&mut c, "budget2", who, Flow::PasswordReset, net, &id).await;
        assert_eq!(answer, if n == 0 { Allow } else { Deny }, "request {n}");
    }
    let fourth = "fourth@example.com";
    assert_eq!(with_id(&mut c, "budget2", fourth, Flow::PasswordReset, net, "m").await, Allow);
    let fifth = "fifth@example.com";
    assert_eq!(with_id(&mut c, "budget2", fifth, Flow::PasswordReset, net, "m").await, Deny);

    // One id, five records (the login and each flow): each counts it.
    let same = "same@example.com";
    assert_eq!(c.attempt_with_id("default", same, "shared-id").await.unwrap(), Allow);
    for (flow, _) in BUDGETS {
        assert_eq!(with_id(&mut c, "default", same, flow, net, "shared-id").await, Allow);
        assert_eq!(with_id(&mut c, "default", same, flow, net, "shared-id").await, Allow);
    }
    assert_eq!(counts(&mut ops, "default", same).await, [1, 1, 1, 1, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_flow_attempt_counts_once_and_login_ids_are_apart_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(None, dir.path(), FLOW_REALMS).await;
    attempt_ids_count_once_per_record(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_flow_attempt_counts_once_and_login_ids_are_apart_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(Some(&redis), dir.path(), FLOW_REALMS).await;
    attempt_ids_count_once_per_record(&d).await;
    d.shutdown().await;
}

/// Attempts at `flow` (`Flow::Unspecified`: at the login) until one is denied (at most
/// 10): the door is closed.
async fn exhaust(c: &mut Client, realm: &str, who: &str, flow: Flow) {
    for _ in 0..10 {
        let answer = match flow {
            Flow::Unspecified => c.attempt(realm, who).await.unwrap(),
            flow => flow_from(c, realm, who, flow, "203.0.113.30").await,
        };
        if answer == Decision::Deny {
            return;
        }
    }
    panic!("{flow:?} never closed");
}

async fn login_open(c: &mut Client, realm: &str, who: &str) -> bool {
    c.admit(realm, who).await.unwrap() == Decision::Allow
}

/// A completed reset clears the login and leaves the mail cap; a verified code clears
/// its flow only; a verified password clears no flow; the operator unlocks one flow at a
/// time, a mail cap included. (`fast`: a minute between mails, so no wait reopens one.)
async fn no_record_clears_another(d: &Daemon) {
    use Decision::{Allow, Deny};
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let who = "apart@example.com";
    assert_eq!(flow_from(&mut c, "fast", who, Flow::PasswordReset, "203.0.113.1").await, Allow);
    exhaust(&mut c, "fast", who, Flow::Unspecified).await;
    c.clear("fast", who, ClearReason::PasswordResetCompleted as i32).await.unwrap();
    assert!(login_open(&mut c, "fast", who).await, "a completed reset left the login locked");
    let again = flow_from(&mut c, "fast", who, Flow::PasswordReset, "203.0.113.2").await;
    assert_eq!(again, Deny, "a completed reset cleared the mail interval");
    assert_eq!(counts(&mut ops, "fast", who).await, [0, 0, 0, 1, 0]);

    // Login, both code flows closed: a verified code opens its own flow only.
    exhaust(&mut c, "fast", who, Flow::Unspecified).await;
    exhaust(&mut c, "fast", who, Flow::SecondFactor).await;
    exhaust(&mut c, "fast", who, Flow::RecoveryCode).await;
    clear_flow(&mut c, "fast", who, Flow::SecondFactor).await.unwrap();
    assert_eq!(flow_from(&mut c, "fast", who, Flow::SecondFactor, "").await, Allow);
    assert_eq!(flow_from(&mut c, "fast", who, Flow::RecoveryCode, "").await, Deny);
    assert!(!login_open(&mut c, "fast", who).await, "ClearFlow opened the login");
    clear_flow(&mut c, "fast", who, Flow::RecoveryCode).await.unwrap();
    assert_eq!(flow_from(&mut c, "fast", who, Flow::RecoveryCode, "").await, Allow);
    assert!(!login_open(&mut c, "fast", who).await, "ClearFlow opened the login");

    // A verified password (ClearAttempts, or Verify's accept) clears no code flow.
    exhaust(&mut c, "fast", who, Flow::SecondFactor).await;
    c.clear("fast", who, ClearReason::PasswordVerified as i32).await.unwrap();
    assert!(login_open(&mut c, "fast", who).await);
    assert_eq!(flow_from(&mut c, "fast", who, Flow::SecondFactor, "").await, Deny);
    let hash = StoredHash::generate(b"right", &HashParams::Bcrypt { cost: 4 }).unwrap();
    let accept = c.verify("fast", who, b"right", hash.as_str(), "203.0.113.3").await.unwrap();
    assert_eq!(verdict(&accept), Verdict::Accept);
    assert_eq!(flow_from(&mut c, "fast", who, Flow::SecondFactor, "").await, Deny);

    // The operator's Unlock with a flow clears that flow's record only.
    exhaust(&mut c, "fast", who, Flow::Unspecified).await;
    let seen = inspect_flow(&mut ops, "fast", who, Flow::SecondFactor).await;
    assert_eq!((seen.door, seen.step, seen.window_seconds), (2, 0, 900), "{seen:?}");
    unlock_flow(&mut ops, "fast", who, Flow::SecondFactor).await;
    assert_eq!(flow_from(&mut c, "fast", who, Flow::SecondFactor, "").await, Allow);
    assert!(!login_open(&mut c, "fast", who).await, "Unlock of a flow opened the login");
    assert_eq!(counts(&mut ops, "fast", who).await[3], 1, "Unlock of a code cleared mails");
    unlock_flow(&mut ops, "fast", who, Flow::PasswordReset).await;
    assert_eq!(counts(&mut ops, "fast", who).await[3], 0);
    assert_eq!(flow_from(&mut c, "fast", who, Flow::PasswordReset, "203.0.113.4").await, Allow);
    assert!(!login_open(&mut c, "fast", who).await, "Unlock of a flow opened the login");
    let seen = inspect_flow(&mut ops, "fast", who, Flow::Unspecified).await;
    assert_eq!(seen.door, 2, "the login record is still closed: {seen:?}");
}

/// `Inspect` of a mail flow: `failures` is the mails sent in 24 h (refused requests
/// are not mails), the door closed while the interval holds the next one back.
async fn inspect_counts_mails_sent(d: &Daemon) {
    let mut c = d.client().await;
    let mut ops = caller(d.addr, None, None).await.unwrap();
    let who = "mailed@example.com";
    for sent in 1..=3u32 {
        let first = flow_from(&mut c, "quick", who, Flow::VerificationResend, "203.0.113.8").await;
        assert_eq!(first, Decision::Allow, "mail {sent}");
        let refused = flow_from(&mut c, "quick", who, Flow::VerificationResend, "203.0.113.9");
        assert_eq!(refused.await, Decision::Deny, "mail {sent}, again at once");
        let seen = inspect_flow(&mut ops, "quick", who, Flow::VerificationResend).await;
        assert_eq!(seen.failures, sent, "{seen:?}");
        assert_eq!((seen.door, seen.window_seconds, seen.step), (2, 86_400, 0), "{seen:?}");
        assert!(seen.seconds_until_open <= 1, "{seen:?}");
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    let seen = inspect_flow(&mut ops, "quick", who, Flow::VerificationResend).await;
    assert_eq!((seen.door, seen.failures, seen.seconds_until_open), (1, 3, 0), "{seen:?}");
    let other = inspect_flow(&mut ops, "quick", who, Flow::PasswordReset).await;
    assert_eq!((other.door, other.failures), (1, 0), "the other mail flow: {other:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_the_login_or_a_flow_never_clears_another_record_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(None, dir.path(), FLOW_REALMS).await;
    no_record_clears_another(&d).await;
    inspect_counts_mails_sent(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_the_login_or_a_flow_never_clears_another_record_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(Some(&redis), dir.path(), FLOW_REALMS).await;
    no_record_clears_another(&d).await;
    inspect_counts_mails_sent(&d).await;
    d.shutdown().await;
}

/// `portcullis inspect --flow` and `portcullis unlock --flow` act on that flow's
/// record: the door, its failures, and an unlock that leaves the login locked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_cli_inspects_and_unlocks_one_flow() {
    let dir = tempfile::tempdir().unwrap();
    let d = Daemon::on(None, dir.path(), FLOW_REALMS).await;
    let mut c = d.client().await;
    let who = "cli@example.com";
    exhaust(&mut c, "default", who, Flow::Unspecified).await;
    exhaust(&mut c, "default", who, Flow::SecondFactor).await;
    let addr = format!("http://{}", d.addr);
    let cli = move |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(args)
            .args(["--realm", "default", "--identifier", who, "--addr", &addr])
            .env_remove("PORTCULLIS_ADDR")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.code().unwrap_or(-1), text)
    };
    let run = |args: &'static [&'static str]| {
        let cli = cli.clone();
        tokio::task::spawn_blocking(move || cli(args))
    };
    let (code, out) = run(&["inspect", "--flow", "second_factor"]).await.unwrap();
    assert_eq!(code, 1, "closed: {out}");
    assert!(out.contains("door: closed") && out.contains("failures: 6"), "{out}");
    assert!(out.contains("window_seconds: 900"), "{out}");
    let (code, out) = run(&["inspect", "--flow", "password_reset"]).await.unwrap();
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("door: open") && out.contains("failures: 0"), "{out}");
    assert!(out.contains("window_seconds: 86400"), "{out}");
    let args = &["unlock", "--reason", "owner-verified", "--flow", "second_factor"];
    let (code, out) = run(args).await.unwrap();
    assert_eq!(code, 0, "{out}");
    let (code, out) = run(&["inspect", "--flow", "second_factor"]).await.unwrap();
    assert!(code == 0 && out.contains("failures: 0"), "{out}");
    let (code, out) = run(&["inspect"]).await.unwrap();
    assert!(code == 1 && out.contains("door: closed"), "the login was unlocked too: {out}");
    let (code, out) = run(&["attempt", "--flow", "second_factor"]).await.unwrap();
    assert_eq!(code, 2, "--flow on a Governor command: {out}");
    assert!(out.contains("--flow"), "{out}");
    d.shutdown().await;
}
