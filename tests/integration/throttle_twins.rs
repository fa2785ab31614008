//! The pure rules of `portcullis::throttle` against their Lua twins on a real Redis:
//! the door `Admin/Inspect` reports (`throttle::door`) opens and closes exactly when
//! `admit.lua` does, for records around every edge of a window (the spray window's
//! twin test is in `spray_window.rs`, the bucket's and the repeat list's in
//! `store_conformance/`).

use std::time::Duration;

use portcullis::normalize::{Normalization, normalize};
use portcullis::secret::KeySecret;
use portcullis::store::Store;
use portcullis::store::keys::AccountKey;
use portcullis::store::redis::RedisStore;
use portcullis::throttle::door::door;
use portcullis::throttle::{Policy, Record};
use portcullis_test_support::*;

#[tokio::test]
async fn the_door_and_admit_lua_agree_around_every_edge() {
    let redis = RedisServer::start();
    let mut conn = redis.conn();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(2), 1).unwrap();
    let policy = Policy {
        max_failures: 5,
        first_window: Duration::from_secs(900),
        max_window: Duration::from_secs(3600),
        retention: Duration::from_secs(86_400),
        second_factor_required: false,
    };
    let secret = KeySecret::new(SECRET.into());
    // (failures, window start this long ago in ms, step); windows of 900 s at step 0,
    // 1,800 s at step 1; the edges ±2 s so the test's own time cannot cross them.
    let cases = [
        (0, 1_000, 0),
        (4, 1_000, 0),
        (5, 1_000, 0),
        (5, 898_000, 0),
        (5, 902_000, 0),
        (9, 902_000, 0),
        (5, 902_000, 1),
        (5, 1_802_000, 1),
        (5, 3_598_000, 2),
        (5, 3_602_000, 3),
    ];
    for (n, (failures, ago, step)) in cases.into_iter().enumerate() {
        let id = normalize(Normalization::Email, &format!("door{n}@example.com")).unwrap();
        let key = AccountKey::new(&secret, "default", &id);
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
        let now = s * 1000 + us / 1000;
        let _: () = redis::cmd("HSET")
            .arg(key.record())
            .arg("f")
            .arg(failures)
            .arg("ws")
            .arg(now - ago)
            .arg("st")
            .arg(step)
            .query(&mut conn)
            .unwrap();
        let record = Record { failures, window_start_ms: now - ago, step, repeats: 0 };
        let pure = door(&policy, Some(&record), now);
        let script = store.is_open(&key, &policy).await.unwrap();
        assert_eq!(pure.open, script, "{failures} failures, {ago} ms ago, step {step}");
    }
}
