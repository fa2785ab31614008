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
