//! `cargo bench --bench spray_cost`: what spray detection (docs/spray.md) adds to a
//! `Verify` attempt's store work. Prints a markdown table; `docs/performance.md`
//! ("Spray cost") explains it. (The cost of one comparison is `benches/verify_cost.rs`,
//! the flood `benches/verify_flood.rs`.)
//!
//! The store work of one `Verify` attempt: the count alone, and the count with its spray
//! check sent beside it (as the service sends them), and the failure note a failed
//! comparison sends after, timed in alternation on one private `redis-server` (never the
//! shared 6379) and on an embedded store, in this process.
//!
//! The last column sets what spray detection adds against one argon2id `Verify` at the
//! realm's target: its median, timed first as the cost bench times it
//! (`portcullis_test_support::verify_bench::time_case`, the real `portcullis` binary in
//! its own process, stopped before the spray rows). `PORTCULLIS_BENCH_ROWS=spray` runs
//! the spray rows alone, without that reference (the column then reads `—`).

use portcullis::store::spray_window::SprayNoteRequest;
use portcullis_test_support as common;
use portcullis_test_support::bench as support;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::{millis, percentile};

use common::verify_bench::{Case, PASSWORD, argon2id_target, time_case};
use portcullis::pb::Verdict;
use portcullis::verify::hash::StoredHash;

/// Timed store round trips per spray-cost row (each in both forms, alternating).
const SPRAY_RUNS: usize = 4000;

/// One store's spray cost: the count alone, the count with its spray check, and the
/// failure note.
struct SprayRow {
    store: &'static str,
    count_only: Vec<Duration>,
    with_check: Vec<Duration>,
    failure_note: Vec<Duration>,
}

/// Times `record_attempt` alone, `record_attempt` joined with the spray check,
/// and the failure note (a fresh account and password fingerprint each time, as a spray
/// would send), in alternation so drift hits all alike.
async fn time_spray(store: &dyn portcullis::store::Store, label: &'static str) -> SprayRow {
    use portcullis::defence::spray::SprayFingerprints;
    use portcullis::normalize::{Normalization, normalize};
    use portcullis::secret::KeySecret;
    use portcullis::store::keys::AccountKey;
    use portcullis::store::spray_window::SprayNote;
    let secret = KeySecret::new(common::SECRET.as_bytes().to_vec());
    let fingerprints = SprayFingerprints::new(&secret);
    let settings = common::TestConfig::redis("redis://127.0.0.1:1").settings();
    let realm = settings.realms.get("default").expect("the default realm").clone();
    let mut row = SprayRow {
        store: label,
        count_only: Vec::new(),
        with_check: Vec::new(),
        failure_note: Vec::new(),
    };
    for i in 0..(SPRAY_RUNS + 200) {
        let id = normalize(Normalization::Exact, &format!("spray-bench-{label}-{i}")).unwrap();
        let key = AccountKey::new(&secret, "default", &id);
        let started = Instant::now();
        store.record_attempt(&key, None, &realm.policy).await.expect("record_attempt");
        let count_only = started.elapsed();
        let key = AccountKey::new(
            &secret,
            "default",
            &normalize(Normalization::Exact, &format!("n{i}{label}")).unwrap(),
        );
        let spray = fingerprints.key("default", format!("password {i}").as_bytes());
        let (period, limit) = (realm.spray.period_ms(), realm.spray.threshold);
        let check = SprayNoteRequest {
            spray: &spray,
            account: &key,
            note: SprayNote::Check,
            period_ms: period,
            limit,
        };
        let started = Instant::now();
        let (counted, checked) = tokio::join!(
            store.record_attempt(&key, None, &realm.policy),
            store.note_spray(&check),
        );
        let with_check = started.elapsed();
        counted.expect("record_attempt");
        checked.expect("spray check");
        let started = Instant::now();
        store
            .note_spray(&SprayNoteRequest {
                spray: &spray,
                account: &key,
                note: SprayNote::Failure,
                period_ms: period,
                limit,
            })
            .await
            .expect("note");
        let failure_note = started.elapsed();
        if i >= 200 {
            row.count_only.push(count_only);
            row.with_check.push(with_check);
            row.failure_note.push(failure_note);
        }
    }
    row.count_only.sort();
    row.with_check.sort();
    row.failure_note.sort();
    row
}

fn spray_costs(redis: &common::RedisServer, rt: &tokio::runtime::Runtime) -> Vec<SprayRow> {
    let data = tempfile::tempdir().expect("tempdir");
    rt.block_on(async {
        let redis_store =
            portcullis::store::redis::RedisStore::new(&redis.url(), Duration::from_secs(2), 4)
                .expect("redis store");
        let embedded = portcullis::store::embedded::EmbeddedStore::open(
            data.path(),
            Duration::from_secs(2),
            Arc::new(portcullis::store::embedded::SystemClock),
        )
        .expect("embedded store");
        eprintln!("spray: redis ...");
        let redis_row = time_spray(&redis_store, "redis").await;
        eprintln!("spray: embedded ...");
        let embedded_row = time_spray(&embedded, "embedded").await;
        vec![redis_row, embedded_row]
    })
}

fn print_spray(rows: &[SprayRow], argon2id_verify_ms: Option<f64>) {
    println!(
        "\n## Spray detection: store work per Verify attempt ({SPRAY_RUNS} sequential calls each)\n"
    );
    println!(
        "| store | count alone µs median / p99 | count + check µs median / p99 | failure note µs median / p99 | added to a failed Verify µs (median) | of an argon2id Verify |"
    );
    println!("|---|---|---|---|---:|---:|");
    let micros = |d: Duration| d.as_secs_f64() * 1e6;
    for r in rows {
        let added = micros(percentile(&r.with_check, 500)) - micros(percentile(&r.count_only, 500))
            + micros(percentile(&r.failure_note, 500));
        let share = argon2id_verify_ms
            .map_or_else(|| "—".to_owned(), |ms| format!("{:.2}%", 100.0 * added / (ms * 1e3)));
        println!(
            "| {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {added:+.0} | {share} |",
            r.store,
            micros(percentile(&r.count_only, 500)),
            micros(percentile(&r.count_only, 990)),
            micros(percentile(&r.with_check, 500)),
            micros(percentile(&r.with_check, 990)),
            micros(percentile(&r.failure_note, 500)),
            micros(percentile(&r.failure_note, 990)),
        );
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\nLoad average after the spray rows: {}.", load.trim());
}

/// The median of argon2id `Verify` calls at the default realm's target (accepted, a
/// fresh identifier each), in ms, against the real binary.
fn argon2id_verify_ms(redis: &common::RedisServer, rt: &tokio::runtime::Runtime) -> f64 {
    let daemon =
        common::DaemonProcess::spawn_quiet(&common::TestConfig::redis(&redis.url()).toml());
    let mut client = rt.block_on(common::Client::connect(daemon.addr));
    let hash = StoredHash::generate(PASSWORD, &argon2id_target()).expect("hash");
    let case = Case {
        realm: "default",
        password: PASSWORD,
        raw: &hash,
        stored_hash: hash.as_str(),
        want: Verdict::Accept,
        rehash: false,
        tag: "argon2id",
    };
    let (_, rpc, _) = time_case(rt, &mut client, daemon.pid(), &case);
    millis(percentile(&rpc, 500))
}

fn main() -> ExitCode {
    let redis = common::RedisServer::start();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let reference = if std::env::var("PORTCULLIS_BENCH_ROWS").is_ok_and(|v| v == "spray") {
        None
    } else {
        eprintln!("spray: argon2id Verify, the reference ...");
        Some(argon2id_verify_ms(&redis, &rt))
    };
    print_spray(&spray_costs(&redis, &rt), reference);
    ExitCode::SUCCESS
}
