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

/// A `VerifyRequest` (or `RecordAttemptRequest`, `AdmitRequest`) on the wire with its
/// string fields as raw bytes, to send bytes that are not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct RawAccount {
    #[prost(bytes = "vec", tag = "1")]
    realm: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    identifier: Vec<u8>,
}

/// See [`RawAccount`]: `VerifyRequest`'s fields by number.
#[derive(Clone, PartialEq, prost::Message)]
struct RawVerify {
    #[prost(message, optional, tag = "1")]
    account: Option<RawAccount>,
    #[prost(bytes = "vec", tag = "2")]
    password: Vec<u8>,
    #[prost(bytes = "vec", tag = "3")]
    stored_hash: Vec<u8>,
    #[prost(bytes = "vec", tag = "4")]
    client_key: Vec<u8>,
    #[prost(bytes = "vec", tag = "5")]
    attempt_id: Vec<u8>,
    #[prost(bytes = "vec", tag = "6")]
    device_token: Vec<u8>,
}

/// Invalid UTF-8 in any string field is `INVALID_ARGUMENT` naming the field (never
/// `INTERNAL`, which pages someone), on `Verify`, `RecordAttempt` and `Admit` alike, and
/// nothing is counted.
#[tokio::test]
async fn a_string_field_that_is_not_utf8_is_invalid_argument_naming_it() {
    use portcullis::pb::{AdmitResponse, RecordAttemptResponse, VerifyResponse};
    let dir = tempfile::tempdir().unwrap();
    let daemon = Daemon::on(None, dir.path(), "").await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let bad = b"caf\xe9".to_vec();
    let good = || RawVerify {
        account: Some(RawAccount {
            realm: b"fast".to_vec(),
            identifier: b"u@example.com".to_vec(),
        }),
        password: b"pw".to_vec(),
        stored_hash: Vec::new(),
        client_key: b"192.0.2.7".to_vec(),
        attempt_id: Vec::new(),
        device_token: Vec::new(),
    };
    let cases: Vec<(&str, RawVerify)> = vec![
        ("account.realm", {
            let mut r = good();
            r.account.as_mut().unwrap().realm = bad.clone();
            r
        }),
        ("account.identifier", {
            let mut r = good();
            r.account.as_mut().unwrap().identifier = bad.clone();
            r
        }),
        ("stored_hash", RawVerify { stored_hash: bad.clone(), ..good() }),
        ("client_key", RawVerify { client_key: bad.clone(), ..good() }),
        ("attempt_id", RawVerify { attempt_id: bad.clone(), ..good() }),
        ("device_token", RawVerify { device_token: bad.clone(), ..good() }),
    ];
    async fn call<R: Default + prost::Message + std::fmt::Debug + Send + 'static>(
        channel: &tonic::transport::Channel,
        path: &'static str,
        request: RawVerify,
    ) -> tonic::Status {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let codec = portcullis_client::codec::SmallBufferCodec::<RawVerify, R>::default();
        let path = http::uri::PathAndQuery::from_static(path);
        grpc.unary(tonic::Request::new(request), path, codec).await.expect_err("refused")
    }
    for (field, request) in cases {
        let status =
            call::<VerifyResponse>(&channel, "/portcullis.v1.Governor/Verify", request.clone())
                .await;
        assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        assert_eq!(status.message(), format!("{field} is not valid UTF-8"));
        // RecordAttempt and Admit read the account (field 1) the same way.
        if field.starts_with("account.") {
            let status = call::<RecordAttemptResponse>(
                &channel,
                "/portcullis.v1.Governor/RecordAttempt",
                RawVerify { password: Vec::new(), stored_hash: Vec::new(), ..request.clone() },
            )
            .await;
            assert_eq!(
                (status.code(), status.message()),
                (Code::InvalidArgument, &*format!("{field} is not valid UTF-8"))
            );
            let admit = RawVerify { account: request.account.clone(), ..RawVerify::default() };
            let status =
                call::<AdmitResponse>(&channel, "/portcullis.v1.Governor/Admit", admit).await;
            assert_eq!(status.code(), Code::InvalidArgument, "{field}: {status:?}");
        }
    }
    assert_eq!(daemon.budget().comparisons, 0, "nothing was compared");
    daemon.shutdown().await;
}
