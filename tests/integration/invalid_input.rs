//! Bad input is INVALID_ARGUMENT naming the field, and nothing reaches the store.

use portcullis::pb::{ClearAttemptsRequest, ClearReason, RecordAttemptRequest};
use portcullis_test_support::*;
use tonic::Code;

#[tokio::test]
async fn bad_input_is_refused_before_any_store_work() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let over = format!("{}@example.com", "a".repeat(309));
    assert_eq!(over.len(), 321);
    let long_id = "i".repeat(129);

    let cases: Vec<(&str, Option<portcullis::pb::Account>, &str, &str)> = vec![
        ("missing account", None, "", "account is required"),
        ("empty identifier", account("default", ""), "", "account.identifier"),
        ("blank identifier", account("default", " \u{3000}\t "), "", "account.identifier"),
        ("321-byte identifier", account("default", &over), "", "account.identifier"),
        // Over the raw limit (4096 bytes) but under server.max_message_kib; a message over
        // that is refused before decoding (tests/integration/hardening.rs).
        ("huge identifier", account("default", &"x".repeat(5_000)), "", "account.identifier"),
        ("unknown realm", account("nope", "a@example.com"), "", "account.realm"),
        ("empty realm", account("", "a@example.com"), "", "account.realm"),
        ("empty domain label", account("default", "dave@example.com.."), "", "empty domain label"),
        ("empty inner label", account("default", "dave@example..com"), "", "empty domain label"),
        ("empty local part", account("default", "@example.com"), "", "empty local part"),
        ("several @", account("default", "a@b@example.com"), "", "more than one @"),
        ("quoted local part", account("default", "\"a b\"@example.com"), "", "quoted local part"),
        ("bad address literal", account("default", "a@[300.1.1.1]"), "", "address literal"),
        ("attempt_id with space", account("default", "a@example.com"), "a b", "attempt_id"),
        ("attempt_id too long", account("default", "a@example.com"), &long_id, "attempt_id"),
    ];
    for (what, acct, attempt_id, field) in &cases {
        let req = RecordAttemptRequest {
            account: acct.clone(),
            attempt_id: attempt_id.to_string(),
            client_key: String::new(),
        };
        let err = c.0.record_attempt(req).await.expect_err(what);
        assert_eq!(err.code(), Code::InvalidArgument, "{what}");
        assert!(err.message().contains(field), "{what}: {:?}", err.message());
        if attempt_id.is_empty() {
            let err =
                c.0.admit(portcullis::pb::AdmitRequest { account: acct.clone() })
                    .await
                    .expect_err(what);
            assert_eq!(err.code(), Code::InvalidArgument, "{what} (admit)");
            let req = ClearAttemptsRequest {
                account: acct.clone(),
                reason: ClearReason::PasswordResetCompleted as i32,
                client_key: String::new(),
            };
            let err = c.0.clear_attempts(req).await.expect_err(what);
            assert_eq!(err.code(), Code::InvalidArgument, "{what} (clear)");
        }
    }
    // The boundary itself is fine: exactly 320 bytes.
    assert!(c.attempt("default", &over[1..]).await.is_ok());
    let _: () = redis::cmd("DEL")
        .arg(record_key("default", portcullis::normalize::Normalization::Email, &over[1..]))
        .query(&mut conn)
        .unwrap();

    for reason in [ClearReason::Unspecified as i32, 3, -1, 999] {
        let req = ClearAttemptsRequest {
            account: account("default", "a@example.com"),
            reason,
            client_key: String::new(),
        };
        let err = c.0.clear_attempts(req).await.expect_err("bad reason");
        assert_eq!(err.code(), Code::InvalidArgument);
        assert!(err.message().contains("reason"), "{:?}", err.message());
    }
    assert_eq!(dbsize(&mut conn), 0, "a refused request wrote to the store");
    daemon.shutdown().await;
}

#[tokio::test]
async fn an_unspecified_clear_reason_does_not_clear() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    for _ in 0..6 {
        c.attempt("default", "f@example.com").await.unwrap();
    }
    let err = c.clear("default", "f@example.com", 0).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(c.admit("default", "f@example.com").await.unwrap(), portcullis::pb::Decision::Deny);
    daemon.shutdown().await;
}
