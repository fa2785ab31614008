//! `Verify` end to end: independent tools' hashes, no oracle between unknown accounts
//! and wrong passwords, no hashing behind a closed door, and malformed hashes refused
//! without work or count.

use portcullis::login::Signals;
use portcullis::normalize::Normalization;
use portcullis::pb::{Verdict, VerifyResponse};
use portcullis::verify::hash::{HashParams, Prf, StoredHash};
use portcullis_test_support::*;
use prost::Message;
use tonic::Code;

#[derive(serde::Deserialize)]
struct Vectors {
    vectors: Vec<Vector>,
}

#[derive(serde::Deserialize)]
struct Vector {
    tool: String,
    password: String,
    hash: String,
    #[serde(rename = "match")]
    matches: bool,
}

/// `tests/data/hashes.json`: a copy of the project's shared vectors, made by htpasswd,
/// libxcrypt, pyca bcrypt and argon2-cffi.
fn vectors() -> Vec<Vector> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hashes.json");
    let v: Vectors = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(v.vectors.len() >= 30, "the vector file lost rows");
    v.vectors
}

/// A fresh bcrypt hash of `password` at `cost`, as a gateway would store it.
fn bcrypt(password: &[u8], cost: u32) -> String {
    let params = portcullis::verify::hash::HashParams::Bcrypt { cost };
    StoredHash::generate(password, &params).unwrap().as_str().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_independent_vector_verifies_as_its_tool_says() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let rows = vectors();
    for (n, row) in rows.iter().enumerate() {
        // One account per row, so earlier rejections never close a later row's door.
        let id = format!("vector-{n}@example.com");
        let r = c.verify("default", &id, row.password.as_bytes(), &row.hash, "10.0.0.1").await;
        let r = r.unwrap_or_else(|s| panic!("row {n} ({}): {s:?}", row.tool));
        let want = if row.matches { Verdict::Accept } else { Verdict::Reject };
        assert_eq!(r.verdict(), want, "row {n} ({}) password {:?}", row.tool, row.password);
    }
    assert_eq!(daemon.budget().comparisons, rows.len() as u64);
    daemon.shutdown().await;
}

/// A Django site: its realm targets Django's default hasher, so its users' hashes need no
/// rehash and an unknown identifier costs a PBKDF2 of Django's iterations; a hash of fewer
/// iterations (or another framework's) is accepted and asked to be rehashed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_django_realm_verifies_djangos_hashes_and_costs_the_same_for_unknown_ids() {
    let redis = RedisServer::start();
    let extra =
        "[realms.django]\nhash = { algorithm = \"pbkdf2_sha256\", pbkdf2_iterations = 1000000 }\n";
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).extra(extra).settings()).await;
    let target = HashParams::Pbkdf2 { prf: Prf::Sha256, iterations: 1_000_000 };
    assert_eq!(daemon.verifier.dummy("django").unwrap().params(), target);
    // A million PBKDF2 iterations take about a second in the debug build, and more than
    // the usual 5 s call deadline on a machine busy with the rest of the suite: these
    // calls may take a minute (a timing belongs in `cargo bench --bench verify_cost`).
    let patient = tonic::transport::Endpoint::from_shared(format!("http://{}", daemon.addr))
        .unwrap()
        .timeout(std::time::Duration::from_secs(60))
        .connect()
        .await
        .unwrap();
    let mut c = Client(portcullis::pb::governor_client::GovernorClient::new(patient));
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/framework_hashes.json");
    let rows: Vectors = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let row = |tool: &str| {
        let found = rows.vectors.iter().find(|r| r.tool.contains(tool) && r.matches);
        found.unwrap_or_else(|| panic!("no vector of {tool}"))
    };
    for (n, (tool, rehash)) in [
        ("PBKDF2PasswordHasher (the default)", false),
        ("PBKDF2SHA1PasswordHasher", true),
        ("Argon2PasswordHasher", true),
        ("BCryptSHA256PasswordHasher", true),
        ("ScryptPasswordHasher", true),
        ("passlib 1.7.4 pbkdf2_sha256", true),
        ("Werkzeug 3.1.9 generate_password_hash (the default, scrypt)", true),
    ]
    .into_iter()
    .enumerate()
    {
        let v = row(tool);
        let id = format!("user-{n}@example.com");
        let r = c.verify("django", &id, v.password.as_bytes(), &v.hash, "c").await.unwrap();
        assert_eq!((r.verdict(), r.needs_rehash), (Verdict::Accept, rehash), "{tool}");
        let wrong = c.verify("django", &id, b"not it", &v.hash, "c").await.unwrap();
        assert_eq!(wrong.verdict(), Verdict::Reject, "{tool}");
    }
    let unknown = c.verify("django", "nobody@example.com", b"pw", "", "c").await.unwrap();
    assert_eq!(unknown.verdict(), Verdict::Reject);
    assert_eq!(daemon.budget().comparisons, 15, "the unknown identifier was hashed too");
    daemon.shutdown().await;
}

#[tokio::test]
async fn unknown_account_and_wrong_password_are_indistinguishable() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let realm_target = portcullis::verify::hash::HashParams::Argon2 {
        algorithm: portcullis::verify::hash::Algorithm::Argon2id,
        memory_kib: 19456,
        iterations: 2,
        parallelism: 1,
    };
    // The dummy hash is the realm's target: an unknown account costs the same work.
    assert_eq!(daemon.verifier.dummy("default").unwrap().params(), realm_target);
    assert_eq!(
        daemon.verifier.dummy("fast").unwrap().params(),
        portcullis::verify::hash::HashParams::Bcrypt { cost: 4 }
    );
    let known = StoredHash::generate(b"right password", &realm_target).unwrap();
    let known = known.as_str();

    let wrong = c.verify("default", "known@example.com", b"wrong", known, "c1").await.unwrap();
    let unknown = c.verify("default", "nobody@example.com", b"wrong", "", "c1").await.unwrap();
    // Even the right password of some other account gets nothing from an unknown one.
    let unknown2 =
        c.verify("default", "nobody2@example.com", b"right password", "", "c1").await.unwrap();
    assert_eq!(wrong.encode_to_vec(), unknown.encode_to_vec());
    assert_eq!(wrong.encode_to_vec(), unknown2.encode_to_vec());
    assert_eq!(wrong.encode_to_vec(), portcullis::rpc::reject(Signals::default()).encode_to_vec());
    assert_eq!(daemon.budget().comparisons, 3, "an unknown account skipped the hash work");

    let right =
        c.verify("default", "known@example.com", b"right password", known, "c1").await.unwrap();
    assert_eq!(right.verdict(), Verdict::Accept);
    assert!(!right.needs_rehash);
    daemon.shutdown().await;
}

#[tokio::test]
async fn a_closed_door_rejects_without_hashing_and_a_match_clears() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let hash = bcrypt(b"s3cret", 4);
    let id = "locked@example.com";
    let key = record_key("fast", Normalization::Email, id);

    for n in 1..=5 {
        // Distinct guesses: a repeated wrong password would be forgiven (throttle.md).
        let guess = format!("guess-{n}");
        let r = c.verify("fast", id, guess.as_bytes(), &hash, "c").await.unwrap();
        assert_eq!(r.verdict(), Verdict::Reject);
        assert_eq!(daemon.budget().comparisons, n);
    }
    // The door is shut: even the right password is rejected, and nothing is hashed
    // (the answer asks for a step-up: the window is past step_up_failures).
    // The first refusal also tells the gateway it started the lockout.
    for n in 0..5 {
        let signals = Signals { step_up: true, lockout_started: n == 0, ..Signals::default() };
        let closed = portcullis::rpc::reject(signals);
        let r = c.verify("fast", id, b"s3cret", &hash, "c").await.unwrap();
        assert_eq!(r.encode_to_vec(), closed.encode_to_vec(), "closed-door call {n}");
    }
    assert_eq!(daemon.budget().comparisons, 5, "a closed door ran a comparison");
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 10, "closed-door attempts are counted");

    // After the window, the right password is accepted and clears the record.
    age_record(&mut conn, &key, 15 * 60_000);
    let r = c.verify("fast", id, b"s3cret", &hash, "c").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Accept);
    assert!(!r.needs_rehash);
    assert_eq!(read_record(&mut conn, &key), None, "a match clears the record");
    assert_store_clean(&mut conn, &[id, "locked", "s3cret"]);
    daemon.shutdown().await;
}

#[tokio::test]
async fn needs_rehash_when_the_hash_is_below_the_realm_target() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    // The default realm targets argon2id m=19456 t=2 p=1; a bcrypt hash is below it,
    // and so is a weaker argon2id. The `fast` realm targets bcrypt cost 4.
    let bcrypt5 = "$2b$05$IbTcdjsgUGCtcgd/e8TOs.xs3Rqt9IqOvtdu6ZrtBE/tx1q1TDfm2";
    let pw = b"correct horse battery staple";
    let r = c.verify("default", "r1@example.com", pw, bcrypt5, "c").await.unwrap();
    assert_eq!((r.verdict(), r.needs_rehash), (Verdict::Accept, true));
    let r = c.verify("fast", "r2@example.com", pw, bcrypt5, "c").await.unwrap();
    assert_eq!((r.verdict(), r.needs_rehash), (Verdict::Accept, false));
    let argon2i = "$argon2i$v=19$m=8192,t=3,p=2$EOzYWv5TlULjMkIpuOnfIA$ahSlkwJIngtv2RdEa0TFsb6ir6nRhddn/89Bx6hQans";
    let r = c.verify("default", "r3@example.com", pw, argon2i, "c").await.unwrap();
    assert_eq!((r.verdict(), r.needs_rehash), (Verdict::Accept, true));
    let at_target = "$argon2id$v=19$m=19456,t=2,p=1$9UYIR9ZIReF5HPUwKOtfHg$mXlw4iTpYMohjtsi7qzPygANdC7/hd1SbLoNsHPwwfQ";
    let r = c.verify("default", "r4@example.com", pw, at_target, "c").await.unwrap();
    assert_eq!((r.verdict(), r.needs_rehash), (Verdict::Accept, false));
    // needs_rehash is never set on a rejection.
    let r = c.verify("default", "r5@example.com", b"nope", bcrypt5, "c").await.unwrap();
    assert_eq!((r.verdict(), r.needs_rehash), (Verdict::Reject, false));
    daemon.shutdown().await;
}

#[tokio::test]
async fn malformed_and_oversized_hashes_are_refused_without_work_or_count() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let bcrypt = "$2b$05$IbTcdjsgUGCtcgd/e8TOs.xs3Rqt9IqOvtdu6ZrtBE/tx1q1TDfm2";
    let argon2 = "$argon2id$v=19$m=19456,t=2,p=1$9UYIR9ZIReF5HPUwKOtfHg$mXlw4iTpYMohjtsi7qzPygANdC7/hd1SbLoNsHPwwfQ";
    let cases = [
        (bcrypt.replacen("IbTc", "Ibéc", 1), "60 ASCII"),
        (argon2.replacen("9UYI", "9UéI", 1), "malformed argon2"),
        (format!("{}3", &bcrypt[..59]), "final base64"),
        (bcrypt[..40].to_owned(), "60 ASCII"),
        (argon2[..40].to_owned(), "malformed argon2"),
        (argon2[..argon2.len() - 22].to_owned(), "malformed argon2"),
        (bcrypt.replacen("$2b$", "$2x$", 1), "$2x$"),
        ("$1$saltsalt$hashhashhashhashhash".to_owned(), "unsupported format"),
        ("{SSHA}abcdef".to_owned(), "unsupported format"),
        ("pbkdf2_sha256$1000$salt$AAAA".to_owned(), "malformed PBKDF2 hash"),
        (
            "pbkdf2_sha256$3000000$salt$AAAAAAAAAAAAAAAAAAAAAA==".to_owned(),
            "PBKDF2 iterations = 3000000 is above the ceiling 2000000",
        ),
        (
            "scrypt$1048576$salt$8$1$AAAAAAAAAAAAAAAAAAAAAA==".to_owned(),
            "scrypt memory (128 · r · (N + p + 1) bytes, in KiB) = 1048578 is above the ceiling 132096",
        ),
        (bcrypt.replacen("$05$", "$31$", 1), "bcrypt cost = 31 is above the ceiling 14"),
        (
            argon2.replacen("m=19456", "m=4194304", 1),
            "argon2 m (KiB) = 4194304 is above the ceiling",
        ),
        (argon2.replacen("p=1", "p=4294967295", 1), "argon2 p = 4294967295 is above the ceiling"),
        // A keyed hash or one with associated data could never match here: named,
        // never silently compared as if the parameter were absent.
        (argon2.replacen("p=1", "p=1,keyid=a2V5MQ", 1), "argon2 parameter keyid"),
        (argon2.replacen("p=1", "p=1,data=ZGF0YQ", 1), "argon2 parameter data"),
        (argon2.replacen("p=1", "p=1,z=1", 1), "argon2 parameter z"),
    ];
    for (hash, want) in &cases {
        let err = c.verify("default", "bad-hash@example.com", b"pw", hash, "c").await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{hash}");
        assert!(
            err.message().contains("stored_hash") && err.message().contains(want),
            "{hash}: {}",
            err.message()
        );
        assert!(
            !err.message().contains("IbTcdj") && !err.message().contains("9UYIR9"),
            "the message echoes the hash"
        );
    }
    assert_eq!(daemon.budget().comparisons, 0, "a malformed hash reached a comparison");
    assert_eq!(dbsize(&mut conn), 0, "a malformed hash left a count");
    // The daemon keeps serving.
    let r = c
        .verify("default", "bad-hash@example.com", b"correct horse battery staple", bcrypt, "c")
        .await
        .unwrap();
    assert_eq!(r.verdict(), Verdict::Accept);
    daemon.shutdown().await;
}

#[tokio::test]
async fn bad_verify_input_is_invalid_argument_and_writes_nothing() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let hash = "$2b$05$IbTcdjsgUGCtcgd/e8TOs.xs3Rqt9IqOvtdu6ZrtBE/tx1q1TDfm2";
    let long_pw = vec![b'p'; 1025];
    let cases: [(&str, &str, &[u8], &str, &str); 5] = [
        ("default", "", b"pw", hash, "account.identifier"),
        ("nope", "a@example.com", b"pw", hash, "account.realm"),
        ("default", "a@example.com", b"pw", hash, "client_key"),
        ("default", "a@example.com", &long_pw, hash, "password is longer than 1024 bytes"),
        ("default", "a@example.com", b"pw", hash, "client_key is longer"),
    ];
    let long_client = "c".repeat(257);
    for (i, (realm, id, pw, hash, want)) in cases.iter().enumerate() {
        let client_key = match i {
            2 => "",
            4 => long_client.as_str(),
            _ => "c",
        };
        let err = c.verify(realm, id, pw, hash, client_key).await.unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{want}");
        assert!(err.message().contains(want), "{want}: {}", err.message());
    }
    assert_eq!(dbsize(&mut conn), 0);
    assert_eq!(daemon.budget().comparisons, 0);
    // 1,024 bytes is still a password (it does not match this hash).
    let r = c.verify("default", "a@example.com", &long_pw[..1024], hash, "c").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Reject);
    daemon.shutdown().await;
}

/// `Verify` with an explicit attempt id.
async fn verify_with_id(
    c: &mut Client,
    id: &str,
    password: &[u8],
    hash: &str,
    client_key: &str,
    attempt_id: &str,
) -> Result<VerifyResponse, tonic::Status> {
    let req = portcullis::pb::VerifyRequest {
        account: account("fast", id),
        password: password.to_vec(),
        stored_hash: hash.into(),
        client_key: client_key.into(),
        attempt_id: attempt_id.into(),
        ..Default::default()
    };
    Ok(c.0.verify(req).await?.into_inner())
}

#[tokio::test]
async fn a_replayed_attempt_id_is_never_compared_again() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let hash = &bcrypt(b"s3cret", 4);
    let id = "replayed@example.com";
    let key = record_key("fast", Normalization::Email, id);

    // Several passwords under one id: one count, one comparison. Another password under
    // the same id is another request: INVALID_ARGUMENT naming attempt_id, never
    // compared, never counted; the same request again gets its first answer.
    let first = verify_with_id(&mut c, id, b"guess-1", hash, "c", "same-id").await.unwrap();
    assert_eq!(first.verdict(), Verdict::Reject);
    for guess in [&b"guess-2"[..], b"s3cret", b"guess-3"] {
        let r = verify_with_id(&mut c, id, guess, hash, "c", "same-id").await.unwrap_err();
        assert_eq!(r.code(), tonic::Code::InvalidArgument, "{r:?}");
        assert!(r.message().contains("attempt_id"), "{r:?}");
    }
    let again = verify_with_id(&mut c, id, b"guess-1", hash, "c", "same-id").await.unwrap();
    assert_eq!(again.verdict(), Verdict::Reject, "a replay was compared again");
    assert_eq!(daemon.budget().comparisons, 1);
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 1);

    // Lock the door with fresh ids; an old id replayed with the right password stays shut.
    for n in 2..=6 {
        let guess = format!("wrong-{n}");
        verify_with_id(&mut c, id, guess.as_bytes(), hash, "c", &format!("id-{n}")).await.unwrap();
    }
    assert_eq!(c.admit("fast", id).await.unwrap(), portcullis::pb::Decision::Deny);
    for old in ["same-id", "id-2"] {
        let r = verify_with_id(&mut c, id, b"s3cret", hash, "c", old).await;
        let refused = r.is_err_and(|s| s.code() == tonic::Code::InvalidArgument);
        assert!(refused, "replaying {old} with the right password was answered");
    }
    assert_eq!(c.admit("fast", id).await.unwrap(), portcullis::pb::Decision::Deny);
    assert_eq!(daemon.budget().comparisons, 5);
    daemon.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_refused_by_the_budget_refunds_nothing() {
    let redis = RedisServer::start();
    let extra = "[verify]\nmax_concurrent = 1\nmax_wait = \"20ms\"\n";
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).extra(extra).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let fast = bcrypt(b"pw", 4);
    let slow_hash = bcrypt(b"pw", 12);
    let id = "refund@example.com";
    let key = record_key("fast", Normalization::Email, id);
    let r = verify_with_id(&mut c, id, b"guess", &fast, "A", "X").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Reject);
    // Hold client A's only slot with a slow comparison, then replay X from A.
    let mut holder = daemon.client().await;
    let hold = tokio::spawn(async move {
        verify_with_id(&mut holder, "other@example.com", b"pw", &slow_hash, "A", "Y").await
    });
    while daemon.budget().running == 0 {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    // The replay waits for client A's turn (its slot is held) and is refused by the
    // budget before it is counted: the first call's count stays.
    let refused = verify_with_id(&mut c, id, b"guess", &fast, "A", "X").await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted, "{refused:?}");
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 1, "the compared first call was refunded");
    let _ = hold.await;
    // Its turn had, the replay is answered without a comparison, and refunds nothing.
    let compared = daemon.budget().comparisons;
    let r = verify_with_id(&mut c, id, b"guess", &fast, "A", "X").await.unwrap();
    assert_eq!(r.verdict(), Verdict::Reject);
    assert_eq!(daemon.budget().comparisons, compared, "the replay was compared");
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 1, "the compared first call was refunded");
    daemon.shutdown().await;
}
