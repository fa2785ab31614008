//! The pure rules of `portcullis::throttle` against their Lua twins on a real Redis:
//! the door `Admin/Inspect` reports (`throttle::attempt_count::door`) opens and closes exactly when
//! `admit.lua` does, for records around every edge of a window (the spray window's
//! twin test is in `spray_window.rs`, the bucket's and the repeat list's in
//! `store_conformance/`); and the throttle bench's tools, which must send the script what
//! the store sends and pace calls when asked to.

use std::time::Duration;

use portcullis::normalize::{Normalization, normalize};
use portcullis::secret::KeySecret;
use portcullis::store::attempt_count::AttemptCountStore;
use portcullis::store::keys::AccountKey;
use portcullis::store::redis::RedisStore;
use portcullis::throttle::attempt_count::door;
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
        max_consecutive_failures: 100,
        lockout_duration: Duration::from_secs(900),
        second_factor_required: false,
    };
    let secret = KeySecret::new(SECRET.into());
    // (failures, window start this long ago in ms, step, consecutive failures, lockout
    // end from now in ms: 0 none); windows of 900 s at step 0, 1,800 s at step 1; the
    // edges ±2 s so the test's own time cannot cross them.
    let cases: [(u64, u64, u32, u64, i64); 16] = [
        (0, 1_000, 0, 0, 0),
        (4, 1_000, 0, 4, 0),
        (5, 1_000, 0, 5, 0),
        (5, 898_000, 0, 5, 0),
        (5, 902_000, 0, 5, 0),
        (9, 902_000, 0, 5, 0),
        (5, 902_000, 1, 5, 0),
        (5, 1_802_000, 1, 10, 0),
        (5, 3_598_000, 2, 15, 0),
        (5, 3_602_000, 3, 20, 0),
        // A lockout that outlasts its window, and one that ended.
        (5, 902_000, 0, 5, 2_000),
        (5, 902_000, 0, 5, -2_000),
        (4, 902_000, 0, 4, 2_000),
        // At the ceiling, and just below it, in a window long over.
        (1, 1_000, 2, 100, 0),
        (0, 7_200_000, 2, 100, 0),
        (0, 7_200_000, 2, 99, 0),
    ];
    for (n, (failures, ago, step, consecutive, lockout_in)) in cases.into_iter().enumerate() {
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
            .arg("c")
            .arg(consecutive)
            .query(&mut conn)
            .unwrap();
        let locked_until_ms =
            if lockout_in == 0 { 0 } else { now.saturating_add_signed(lockout_in) };
        if locked_until_ms > 0 {
            let _: () = redis::cmd("HSET")
                .arg(key.record())
                .arg("lu")
                .arg(locked_until_ms)
                .query(&mut conn)
                .unwrap();
        }
        let record = Record {
            failures,
            window_start_ms: now - ago,
            step,
            consecutive,
            locked_until_ms,
            ..Record::default()
        };
        let pure = door(&policy, Some(&record), now);
        let script = store.is_open(&key, &policy).await.unwrap();
        assert_eq!(
            pure.open, script,
            "{failures} failures, {ago} ms ago, step {step}, {consecutive} in a row, lockout {lockout_in}"
        );
    }
}

/// The benches call `record_attempt.lua` without the daemon (`redis-benchmark`'s
/// `EVALSHA` row and the script row of `cargo bench --bench throttle`) with the store's
/// own arguments (`load_tools::script_args`): the script counts with them, as it does
/// for the store.
#[test]
fn the_benches_send_the_script_what_the_store_sends() {
    let redis = RedisServer::start();
    let script = redis::Script::new(portcullis::store::redis::RECORD_ATTEMPT_SOURCE);
    let mut call = script.prepare_invoke();
    for key in load_tools::script_keys("bench-hot") {
        call.key(key);
    }
    for arg in load_tools::script_args("bench-hot") {
        call.arg(arg);
    }
    let reply: Vec<u8> = call.invoke(&mut redis.conn()).unwrap();
    assert!(portcullis::store::redis::attempt_count::is_record_attempt_reply(&reply), "{reply:?}");
    assert_eq!(reply[..8], 1i64.to_le_bytes(), "the first attempt is allowed");
}

/// The load tool's paced rows (`cargo bench --bench throttle`, "paced at half the
/// peak") measure latency off the limit only if the tool keeps the pace: its measured
/// calls are spread over `calls / rate` seconds, not sent as fast as answers come, and
/// every one is counted with its `grpc-status`.
#[test]
fn the_load_tool_paces_its_measured_calls_and_counts_every_answer() {
    use portcullis_test_support::h2_load::{self, Load};
    let dir = tempfile::tempdir().unwrap();
    let daemon = DaemonProcess::spawn_quiet(&TestConfig::embedded(&dir.path().join("data")).toml());
    let (calls, rate) = (200, 400.0);
    let report = h2_load::run(&Load {
        addr: daemon.addr,
        path: load_tools::RECORD_ATTEMPT_PATH,
        frame: load_tools::record_attempt_frame("default", "paced@example.com"),
        authorization: None,
        connections: 2,
        streams: 4,
        warm_up: 10,
        calls,
        rate: Some(rate),
        threads: 1,
        cpu_of: None,
    })
    .unwrap();
    assert!(report.all_ok(), "{}; {:?}", report.line(), report.quoted);
    assert_eq!(report.ok, calls);
    assert_eq!(report.latencies.len() as u64, calls);
    assert_eq!(report.paced, Some(rate));
    // The last call is due (calls - 1) / rate seconds in; a closed loop would have sent
    // all 200 in a few milliseconds.
    let paced = Duration::from_secs_f64((calls - 1) as f64 / rate);
    assert!(report.elapsed >= paced, "{:?} < {paced:?}: the calls were not paced", report.elapsed);
}
