//! The lockout schedule with the design's defaults, against a real redis-server and the
//! real Lua script. Time is moved by ageing a record's window start (the script reads
//! Redis TIME, which a test cannot move), so nothing waits real minutes.

use portcullis::normalize::Normalization;
use portcullis::pb::Decision::{Allow, Deny};
use portcullis_test_support::*;

const MIN: u64 = 60_000;

/// Sends `n` attempts and returns their decisions.
async fn attempts(
    client: &mut Client,
    realm: &str,
    id: &str,
    n: usize,
) -> Vec<portcullis::pb::Decision> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(client.attempt(realm, id).await.unwrap());
    }
    out
}

#[tokio::test]
async fn windows_double_from_first_to_max_then_hold() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let id = "mallory@example.com";
    let key = record_key("default", Normalization::Email, id);

    // Window 0 (15 min): attempts 1–5 allowed, the 6th denied.
    assert_eq!(attempts(&mut c, "default", id, 6).await, [Allow, Allow, Allow, Allow, Allow, Deny]);
    assert_eq!(read_record(&mut conn, &key).map(|r| (r.0, r.2)), Some((6, 0)));

    // Each exhausted window doubles the next: 15, 30, 60, then capped at 60 minutes.
    // Every round shows the running window's exact length: shut 1 s before its end,
    // open at its end, with the step one higher.
    let mut window_min = 15;
    for (next_step, next_window_min) in [(1, 30), (2, 60), (2, 60), (2, 60)] {
        age_record(&mut conn, &key, window_min * MIN - 1000);
        assert_eq!(
            c.attempt("default", id).await.unwrap(),
            Deny,
            "{window_min}-minute window still running"
        );
        age_record(&mut conn, &key, 1000);
        assert_eq!(
            attempts(&mut c, "default", id, 6).await,
            [Allow, Allow, Allow, Allow, Allow, Deny]
        );
        let (failures, _, step) = read_record(&mut conn, &key).unwrap();
        assert_eq!((failures, step), (6, next_step));
        window_min = next_window_min;
    }
    assert_store_clean(&mut conn, &[id, "mallory"]);
    daemon.shutdown().await;
}

#[tokio::test]
async fn quiet_period_longer_than_retention_starts_again_at_the_first_window() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let id = "bob@example.com";
    let key = record_key("default", Normalization::Email, id);

    for _ in 0..2 {
        attempts(&mut c, "default", id, 6).await;
        age_record(&mut conn, &key, 15 * MIN);
    }
    assert_eq!(read_record(&mut conn, &key).unwrap().2, 1, "escalated once");
    // Every attempt pushes the expiry to now + retention (24 h).
    let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut conn).unwrap();
    assert!(ttl > 24 * 60 * MIN as i64 - 60_000 && ttl <= 24 * 60 * MIN as i64, "PTTL {ttl}");
    // A quiet day: the record expires (expiry brought forward instead of waiting 24 h).
    let _: () = redis::cmd("PEXPIRE").arg(&key).arg(1).query(&mut conn).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    assert_eq!(read_record(&mut conn, &key), None);

    assert_eq!(attempts(&mut c, "default", id, 6).await, [Allow, Allow, Allow, Allow, Allow, Deny]);
    assert_eq!(read_record(&mut conn, &key).unwrap().2, 0, "back to the first window");
    age_record(&mut conn, &key, 15 * MIN);
    assert_eq!(c.attempt("default", id).await.unwrap(), Allow, "a 15-minute window again");
    daemon.shutdown().await;
}

#[tokio::test]
async fn second_factor_realm_never_escalates() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let id = "carol@example.com";
    let key = record_key("mfa", Normalization::Email, id);

    for _ in 0..5 {
        assert_eq!(attempts(&mut c, "mfa", id, 6).await, [Allow, Allow, Allow, Allow, Allow, Deny]);
        assert_eq!(read_record(&mut conn, &key).unwrap().2, 0);
        age_record(&mut conn, &key, 15 * MIN);
    }
    daemon.shutdown().await;
}

#[tokio::test]
async fn admit_follows_the_door_and_never_counts() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let id = "dave@example.com";
    let key = record_key("default", Normalization::Email, id);

    for _ in 0..20 {
        assert_eq!(c.admit("default", id).await.unwrap(), Allow);
    }
    assert_eq!(dbsize(&mut conn), 0, "Admit wrote to the store");
    attempts(&mut c, "default", id, 4).await;
    let before: Vec<String> = redis::cmd("HGETALL").arg(&key).query(&mut conn).unwrap();
    for _ in 0..20 {
        assert_eq!(c.admit("default", id).await.unwrap(), Allow);
    }
    let after: Vec<String> = redis::cmd("HGETALL").arg(&key).query(&mut conn).unwrap();
    assert_eq!(before, after, "Admit changed the record");
    attempts(&mut c, "default", id, 1).await;
    assert_eq!(c.admit("default", id).await.unwrap(), Deny, "5 used: the door is shut");
    age_record(&mut conn, &key, 15 * MIN);
    assert_eq!(c.admit("default", id).await.unwrap(), Allow, "window over");
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 5);
    daemon.shutdown().await;
}

#[tokio::test]
async fn reset_completed_and_verified_reopen_a_locked_door() {
    use portcullis::pb::ClearReason;
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    let id = "erin@example.com";
    let key = record_key("default", Normalization::Email, id);

    for reason in [ClearReason::PasswordResetCompleted, ClearReason::PasswordVerified] {
        attempts(&mut c, "default", id, 7).await;
        assert_eq!(c.admit("default", id).await.unwrap(), Deny);
        c.clear("default", id, reason as i32).await.unwrap();
        assert_eq!(read_record(&mut conn, &key), None);
        assert_eq!(c.admit("default", id).await.unwrap(), Allow);
        assert_eq!(
            attempts(&mut c, "default", id, 6).await,
            [Allow, Allow, Allow, Allow, Allow, Deny]
        );
        c.clear("default", id, reason as i32).await.unwrap();
    }
    daemon.shutdown().await;
}
