//! `attempt_id`: a retried RecordAttempt counts once and gets its first answer.

use portcullis::normalize::Normalization;
use portcullis::pb::Decision::{Allow, Deny};
use portcullis_test_support::*;

#[tokio::test]
async fn a_retried_attempt_counts_once_and_gets_the_same_answer() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let id = "grace@example.com";
    let key = record_key("default", Normalization::Email, id);

    for n in 1..=4 {
        assert_eq!(c.attempt_with_id("default", id, &format!("try-{n}")).await.unwrap(), Allow);
    }
    // The 5th attempt, retried once: one count, one answer.
    for _ in 0..2 {
        assert_eq!(c.attempt_with_id("default", id, "fifth").await.unwrap(), Allow);
    }
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 5);
    assert_eq!(c.attempt_with_id("default", id, "sixth").await.unwrap(), Deny);
    // A late retry of the 5th still gets its first answer, and counts nothing...
    assert_eq!(c.attempt_with_id("default", id, "fifth").await.unwrap(), Allow);
    assert_eq!(c.attempt_with_id("default", id, "sixth").await.unwrap(), Deny);
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 6);
    // ...but only MAX_REPLAYS (2) times: an id is not a reusable ALLOW.
    assert_eq!(portcullis::rpc::MAX_REPLAYS, 2);
    assert_eq!(c.attempt_with_id("default", id, "fifth").await.unwrap(), Deny);
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 6);
    // Without an id, every call counts.
    c.attempt("default", id).await.unwrap();
    c.attempt("default", id).await.unwrap();
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 8);
    // The same id on another account key is another attempt.
    assert_eq!(c.attempt_with_id("default", "heidi@example.com", "fifth").await.unwrap(), Allow);
    assert_store_clean(&mut conn, &[id, "grace", "heidi", "fifth", "sixth"]);
    daemon.shutdown().await;
}

/// An `attempt_id`'s answer is bound to the rest of its request: the same id with
/// another `client_key` (RecordAttempt, a mail flow) or another password (Verify) is
/// INVALID_ARGUMENT naming `attempt_id`, counts nothing and never gets the first call's
/// ALLOW; the same request again still gets its first answer. On both stores.
async fn a_replay_with_another_request_is_invalid_argument(daemon: &Daemon) {
    use portcullis::pb::{Flow, RecordAttemptRequest, RecordFlowAttemptRequest, VerifyRequest};
    use portcullis::verify::hash::{HashParams, StoredHash};
    let mut c = daemon.client().await;
    let mut ops = caller(daemon.addr, None, None).await.unwrap();
    let who = "bound@example.com";
    let attempt = |client_key: &str| RecordAttemptRequest {
        account: account("default", who),
        attempt_id: "bound-1".into(),
        client_key: client_key.into(),
    };
    let first = c.0.record_attempt(attempt("198.51.100.1")).await.unwrap().into_inner();
    assert_eq!(first.decision, Allow as i32);
    let again = c.0.record_attempt(attempt("198.51.100.1")).await.unwrap().into_inner();
    assert_eq!(again.decision, Allow as i32, "the same request gets its first answer");
    let other = c.0.record_attempt(attempt("203.0.113.9")).await.unwrap_err();
    assert_eq!(other.code(), tonic::Code::InvalidArgument, "{other:?}");
    assert!(other.message().contains("attempt_id"), "{other:?}");
    assert_eq!(ops.inspect("default", who).await.unwrap().failures, 1, "a reuse counted");

    let hash = StoredHash::generate(b"right", &HashParams::Bcrypt { cost: 4 })
        .unwrap()
        .as_str()
        .to_owned();
    let verify = |password: &[u8]| VerifyRequest {
        account: account("fast", who),
        password: password.to_vec(),
        stored_hash: hash.clone(),
        client_key: "198.51.100.1".into(),
        attempt_id: "bound-2".into(),
        device_token: String::new(),
    };
    let wrong = c.0.verify(verify(b"wrong")).await.unwrap().into_inner();
    assert_eq!(verdict(&wrong), portcullis::pb::Verdict::Reject);
    let reused = c.0.verify(verify(b"right")).await.unwrap_err();
    assert_eq!(reused.code(), tonic::Code::InvalidArgument, "{reused:?}");

    let flow = |client_key: &str| RecordFlowAttemptRequest {
        account: account("default", who),
        flow: Flow::PasswordReset as i32,
        client_key: client_key.into(),
        attempt_id: "bound-3".into(),
    };
    let sent = c.0.record_flow_attempt(flow("198.51.100.1")).await.unwrap().into_inner();
    assert_eq!(sent.decision, Allow as i32);
    let elsewhere = c.0.record_flow_attempt(flow("203.0.113.9")).await.unwrap_err();
    assert_eq!(elsewhere.code(), tonic::Code::InvalidArgument, "{elsewhere:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_with_another_request_is_invalid_argument_on_redis() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    a_replay_with_another_request_is_invalid_argument(&daemon).await;
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_with_another_request_is_invalid_argument_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::start(TestConfig::embedded(dir.path()).settings()).await;
    a_replay_with_another_request_is_invalid_argument(&daemon).await;
    daemon.shutdown().await;
}
