//! `cargo bench --bench verify_cost`: what one password comparison costs, raw and
//! through `Verify`. Prints markdown tables; `docs/performance.md` ("Verify cost")
//! explains them. (The flood is `benches/verify_flood.rs`, the spray cost
//! `benches/spray_cost.rs`.)
//!
//! Each algorithm at its default target: the raw comparison
//! (`StoredHash::matches_keeping`, as the daemon's hashing threads run it) alternated with
//! `Verify` end to end over loopback gRPC (sequential calls, a fresh identifier each, the
//! matching stored hash, so every call is an accept at the realm's target), so a drift of
//! the machine's speed moves both alike; then a right password from an unknown device
//! in a step-up realm (a `VERDICT_CHALLENGE`, which should cost what an accept costs),
//! and a wrong password and an unknown account, which the timing rule says cost the
//! same. `PORTCULLIS_BENCH_STEP_UP=0` leaves the step-up row out (a `PORTCULLIS_BINARY`
//! built before step-up refuses its realm). The daemon is the real binary in its own
//! process (`PORTCULLIS_BINARY` names another build, e.g. an older one, for a
//! before/after): its allocator and its runtime (`server.io_threads`) are the ones a
//! deployment has. A first row at argon2's minimum cost shows what `Verify` adds by
//! itself, and a last table times `Verify` at load (the hashing thread never idle)
//! against raw comparisons back to back. The timing itself is
//! `portcullis_test_support::verify_bench::time_case`, which the spray bench shares.
//!
//! Runs against one private `redis-server` (never the shared 6379), on a quiet machine:
//! no probe, no other load from this bench.

use portcullis_test_support as common;
use portcullis_test_support::bench as support;

use std::process::ExitCode;
use std::time::{Duration, Instant};
use support::{millis, percentile};

use common::verify_bench::{
    ARGON2_TARGET_KIB, Case, PASSWORD, RUNS, WARM_RUNS, WRONG_PASSWORD, argon2id_target, time_case,
};
use portcullis::pb::Verdict;
use portcullis::verify::hash::{Algorithm, HashParams, Prf, StoredHash};

/// Realms whose targets are the other algorithms, so every accept here is at its
/// realm's target (`default` is argon2id m=19456 t=2 p=1 already). Appended before
/// `common::REALMS_TOML`.
const EXTRA_REALMS: &str = "[realms.argon2i]\nhash = { algorithm = \"argon2i\" }\n\
    [realms.argon2d]\nhash = { algorithm = \"argon2d\" }\n\
    [realms.bcrypt10]\nhash = { algorithm = \"bcrypt\", bcrypt_cost = 10 }\n\
    [realms.django]\nhash = { algorithm = \"pbkdf2_sha256\", pbkdf2_iterations = 1000000 }\n\
    [realms.flask]\nhash = { algorithm = \"scrypt\", scrypt_log_n = 15, scrypt_r = 8, scrypt_p = 1 }\n";

/// The step-up realm of the challenge row (`unknown_device`, which a daemon built
/// before step-up does not know: `PORTCULLIS_BENCH_STEP_UP=0` leaves it and the row out,
/// to run an older `PORTCULLIS_BINARY`).
const STEP_UP_REALM: &str = "[realms.stepup]\nunknown_device = \"step_up\"\n";

/// An algorithm at its default target, and the realm targeting it.
struct Target {
    label: &'static str,
    params: HashParams,
    realm: &'static str,
}

fn targets() -> [Target; 6] {
    let argon2 = |algorithm| HashParams::Argon2 {
        algorithm,
        memory_kib: ARGON2_TARGET_KIB,
        iterations: 2,
        parallelism: 1,
    };
    [
        Target { label: "argon2id", params: argon2id_target(), realm: "default" },
        Target { label: "argon2i", params: argon2(Algorithm::Argon2i), realm: "argon2i" },
        Target { label: "argon2d", params: argon2(Algorithm::Argon2d), realm: "argon2d" },
        Target { label: "bcrypt", params: HashParams::Bcrypt { cost: 10 }, realm: "bcrypt10" },
        // Django 5.2's default hasher, and Werkzeug 3's (Flask's) default.
        Target {
            label: "pbkdf2_sha256",
            params: HashParams::Pbkdf2 { prf: Prf::Sha256, iterations: 1_000_000 },
            realm: "django",
        },
        Target {
            label: "scrypt",
            params: HashParams::Scrypt { log_n: 15, r: 8, p: 1 },
            realm: "flask",
        },
    ]
}

fn describe(params: &HashParams) -> String {
    match params {
        HashParams::Bcrypt { cost } => format!("cost {cost}"),
        HashParams::Argon2 { memory_kib, iterations, parallelism, .. } => {
            format!("m={memory_kib} t={iterations} p={parallelism}")
        }
        HashParams::Pbkdf2 { iterations, .. } => format!("{iterations} iterations"),
        HashParams::Scrypt { log_n, r, p } => format!("N=2^{log_n} r={r} p={p}"),
    }
}

struct CostRow {
    label: String,
    params: String,
    /// Sorted raw comparison times.
    raw: Vec<Duration>,
    /// The daemon's CPU time per `Verify` call (all threads), if `/proc` had it.
    cpu: Option<Duration>,
    /// Sorted `Verify` round trips.
    rpc: Vec<Duration>,
}

/// Calls in flight in the at-load rows: one comparing, the others counted and queued, so
/// the hashing thread always has the next comparison waiting.
const AT_LOAD_IN_FLIGHT: usize = 3;
/// Alternations of the at-load rows, and comparisons of each kind per round: short
/// rounds, many of them, so the machine's drift moves both sides alike.
const AT_LOAD_ROUNDS: usize = 10;
const AT_LOAD_RUNS: usize = 30;

/// `Verify` at load against the raw comparison back to back, alternated
/// [`AT_LOAD_ROUNDS`] times: [`AT_LOAD_RUNS`] raw comparisons in a loop, then as many accepted
/// `Verify` calls from [`AT_LOAD_IN_FLIGHT`] callers, each its own client key, on one account
/// (each accept clears it, so it never locks). Returns ms per comparison, raw and
/// `Verify`, per round.
fn time_at_load(
    rt: &tokio::runtime::Runtime,
    client: &common::Client,
    hash: &StoredHash,
) -> Vec<(f64, f64)> {
    let per_caller = AT_LOAD_RUNS / AT_LOAD_IN_FLIGHT;
    (0..AT_LOAD_ROUNDS)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..AT_LOAD_RUNS {
                let matched =
                    hash.matches_keeping(std::hint::black_box(PASSWORD), ARGON2_TARGET_KIB);
                assert!(matched, "at load: the raw comparison must match");
            }
            let raw = millis(start.elapsed()) / AT_LOAD_RUNS as f64;
            let start = Instant::now();
            rt.block_on(async {
                let mut callers = tokio::task::JoinSet::new();
                for caller in 0..AT_LOAD_IN_FLIGHT {
                    let (mut client, stored) = (client.clone(), hash.as_str().to_owned());
                    // A client key per caller: one client's calls take turns (docs/verify.md,
                    // "Parallel logins"), which would leave the hashing thread idle
                    // between them.
                    let client_key = format!("bench-load-{caller}");
                    callers.spawn(async move {
                        for _ in 0..per_caller {
                            let answer = client
                                .verify(
                                    "default",
                                    "at-load@example.com",
                                    PASSWORD,
                                    &stored,
                                    &client_key,
                                )
                                .await
                                .unwrap_or_else(|s| {
                                    panic!("at load: Verify failed: {:?} {}", s.code(), s.message())
                                });
                            assert_eq!(
                                answer.verdict,
                                Verdict::Accept as i32,
                                "at load: not accepted"
                            );
                        }
                    });
                }
                callers.join_all().await;
            });
            let verify = millis(start.elapsed()) / (per_caller * AT_LOAD_IN_FLIGHT) as f64;
            (raw, verify)
        })
        .collect()
}

/// The at-load rows: ms per comparison, raw and through `Verify`, and the difference;
/// then the median round.
fn print_at_load(rounds: &[(f64, f64)]) {
    println!(
        "\n## At load: argon2id m={ARGON2_TARGET_KIB} t=2 p=1, {AT_LOAD_IN_FLIGHT} Verify calls in flight against the raw comparison back to back\n"
    );
    println!("| round | raw ms/comparison | Verify ms/call | Verify − raw % |");
    println!("|---:|---:|---:|---:|");
    let share = |(raw, verify): (f64, f64)| 100.0 * (verify - raw) / raw;
    for (i, &(raw, verify)) in rounds.iter().enumerate() {
        println!("| {} | {raw:.2} | {verify:.2} | {:+.1}% |", i + 1, share((raw, verify)));
    }
    let mut shares: Vec<f64> = rounds.iter().copied().map(share).collect();
    shares.sort_by(f64::total_cmp);
    if let Some(median) = shares.get(shares.len() / 2) {
        println!("\nMedian round: Verify − raw {median:+.1}%.");
    }
}

fn main() -> ExitCode {
    let redis = common::RedisServer::start();
    // The client on a runtime of its own; the daemon is the real binary, in its own
    // process.
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .thread_name("client")
        .enable_all()
        .build()
        .expect("client runtime");
    let step_up = std::env::var("PORTCULLIS_BENCH_STEP_UP").map_or(true, |v| v != "0");
    let realms = format!("{EXTRA_REALMS}{}", if step_up { STEP_UP_REALM } else { "" });
    let daemon = common::DaemonProcess::spawn_quiet(
        &common::TestConfig::redis(&redis.url()).extra(&realms).toml(),
    );
    let mut cost_rows = Vec::new();
    let mut argon2id_hash = None;
    let mut client = client_rt.block_on(common::Client::connect(daemon.addr));
    // What Verify adds when the hashing costs next to nothing: argon2id at its minimum
    // (m=8 t=1 p=1), below the realm's target, so accepted with `needs_rehash`.
    eprintln!("cost: argon2id at its minimum ...");
    let minimum = HashParams::Argon2 {
        algorithm: Algorithm::Argon2id,
        memory_kib: 8,
        iterations: 1,
        parallelism: 1,
    };
    let hash = StoredHash::generate(PASSWORD, &minimum).expect("hash");
    let case = Case {
        realm: "default",
        password: PASSWORD,
        raw: &hash,
        stored_hash: hash.as_str(),
        want: Verdict::Accept,
        rehash: true,
        tag: "minimum",
    };
    let (raw, rpc, cpu) = time_case(&client_rt, &mut client, daemon.pid(), &case);
    let label = "argon2id at its minimum (the daemon's own work)".into();
    cost_rows.push(CostRow { label, params: describe(&minimum), raw, rpc, cpu });
    for target in targets() {
        eprintln!("cost: {} ...", target.label);
        let hash = StoredHash::generate(PASSWORD, &target.params).expect("hash");
        let case = Case {
            realm: target.realm,
            password: PASSWORD,
            raw: &hash,
            stored_hash: hash.as_str(),
            want: Verdict::Accept,
            rehash: false,
            tag: target.label,
        };
        let (raw, rpc, cpu) = time_case(&client_rt, &mut client, daemon.pid(), &case);
        let params = describe(&target.params);
        cost_rows.push(CostRow { label: target.label.into(), params, raw, rpc, cpu });
        if target.realm == "default" {
            argon2id_hash = Some(hash);
        }
    }
    let argon2id_hash = argon2id_hash.expect("the argon2id target is measured");
    // A step-up realm (docs/devices.md): the same right password from an unknown device
    // answers a challenge (a challenge token instead of a device token), at the same
    // target: it should cost what the plain accept above costs.
    if step_up {
        eprintln!("cost: argon2id, step-up challenge ...");
        let case = Case {
            realm: "stepup",
            password: PASSWORD,
            raw: &argon2id_hash,
            stored_hash: argon2id_hash.as_str(),
            want: Verdict::Challenge,
            rehash: false,
            tag: "step-up",
        };
        let (raw, rpc, cpu) = time_case(&client_rt, &mut client, daemon.pid(), &case);
        let label = "argon2id, step-up realm: right password, unknown device (CHALLENGE)".into();
        cost_rows.push(CostRow { label, params: describe(&argon2id_hash.params()), raw, rpc, cpu });
    }
    // The timing rule: a wrong password and an unknown identifier cost the same. Both
    // are alternated with the same raw work: the wrong password against the hash.
    for (label, tag, stored_hash) in [
        ("argon2id, wrong password", "wrong", argon2id_hash.as_str()),
        ("unknown account (`stored_hash` empty: argon2id dummy)", "unknown", ""),
    ] {
        eprintln!("cost: {label} ...");
        let case = Case {
            realm: "default",
            password: WRONG_PASSWORD,
            raw: &argon2id_hash,
            stored_hash,
            want: Verdict::Reject,
            rehash: false,
            tag,
        };
        let (raw, rpc, cpu) = time_case(&client_rt, &mut client, daemon.pid(), &case);
        let params = describe(&argon2id_hash.params());
        cost_rows.push(CostRow { label: label.into(), params, raw, rpc, cpu });
    }
    eprintln!("cost: a repeated wrong password ...");
    let repeats = time_repeats(&client_rt, &mut client, &argon2id_hash);
    eprintln!("cost: at load ...");
    let at_load = time_at_load(&client_rt, &client, &argon2id_hash);
    drop(client);
    drop(daemon);
    print_cost(&cost_rows);
    print_repeats(repeats);
    print_at_load(&at_load);
    println!("\nLoad average after the run: {}.", common::proc_cpu::load_average());
    ExitCode::SUCCESS
}

/// A repeated wrong password (docs/throttle.md, "Repeated passwords") against a new one,
/// alternated, both on the argon2id target: each round, a new wrong password on a fresh
/// account from a fresh client, then the password one client was already refused with,
/// again on its account. Both answers must be the same bytes. Answers `(new, repeat)`
/// times.
fn time_repeats(
    rt: &tokio::runtime::Runtime,
    client: &mut common::Client,
    hash: &StoredHash,
) -> (Vec<Duration>, Vec<Duration>) {
    let stored = hash.as_str();
    let call = |client: &mut common::Client, identifier: &str, client_key: &str| {
        let started = Instant::now();
        let answer = rt
            .block_on(client.verify("default", identifier, WRONG_PASSWORD, stored, client_key))
            .unwrap_or_else(|s| panic!("repeat: Verify failed: {:?} {}", s.code(), s.message()));
        assert_eq!(answer.verdict, Verdict::Reject as i32, "repeat: not a reject");
        (started.elapsed(), answer)
    };
    // The refusal the repeats repeat.
    call(client, "repeated@example.com", "bench-repeat");
    let (mut new, mut repeat) = (Vec::with_capacity(RUNS), Vec::with_capacity(RUNS));
    for i in 0..WARM_RUNS + RUNS {
        let (took_new, first) =
            call(client, &format!("new-wrong-{i}@example.com"), &format!("bench-new-{i}"));
        let (took_repeat, again) = call(client, "repeated@example.com", "bench-repeat");
        assert_eq!(first, again, "repeat: a repeat answered other bytes than a new guess");
        if i >= WARM_RUNS {
            new.push(took_new);
            repeat.push(took_repeat);
        }
    }
    (new, repeat)
}

/// The repeat table: medians, p99s and the KS statistic of the two samples.
fn print_repeats((mut new, mut repeat): (Vec<Duration>, Vec<Duration>)) {
    new.sort();
    repeat.sort();
    let secs = |d: &[Duration]| d.iter().map(Duration::as_secs_f64).collect::<Vec<_>>();
    let ks = support::ks_statistic(&mut secs(&new), &mut secs(&repeat));
    let critical = 1.949 * (2.0 / RUNS as f64).sqrt();
    println!(
        "\n## A repeated wrong password (argon2id target, {RUNS} rounds, alternated with a new one)\n"
    );
    println!("| attempt | median ms | p99 ms |");
    println!("|---|---:|---:|");
    for (label, d) in [("new wrong password (compared)", &new), ("repeat (not compared)", &repeat)]
    {
        let (p50, p99) = (millis(percentile(d, 500)), millis(percentile(d, 990)));
        println!("| {label} | {p50:.2} | {p99:.2} |");
    }
    println!(
        "\nKS D = {ks:.3} (critical at α = 0.001: {critical:.3}): the repeat is told apart by \
         time, but only by the client that was refused with it (docs/throttle.md)."
    );
}

/// The per-comparison table: raw and `Verify` times per row; what `Verify` adds to the
/// median, in ms and as a share of the raw median (not for the minimum row, whose raw
/// time is next to nothing); and the daemon's CPU time per call.
fn print_cost(cost: &[CostRow]) {
    println!(
        "## Per comparison (idle machine, {RUNS} timed rounds per row, raw and Verify alternated)\n"
    );
    println!(
        "| algorithm | parameters | raw median ms | raw p99 ms | Verify median ms | Verify p99 ms | Verify − raw (median) ms | Verify − raw (median) % | daemon CPU ms/call |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for r in cost {
        let raw_p50 = millis(percentile(&r.raw, 500));
        let rpc_p50 = millis(percentile(&r.rpc, 500));
        let share = if raw_p50 >= 1.0 {
            format!("{:+.1}%", 100.0 * (rpc_p50 - raw_p50) / raw_p50)
        } else {
            "—".to_owned()
        };
        let cpu = r.cpu.map_or_else(|| "—".to_owned(), |d| format!("{:.2}", millis(d)));
        println!(
            "| {} | {} | {raw_p50:.2} | {:.2} | {rpc_p50:.2} | {:.2} | {:+.2} | {share} | {cpu} |",
            r.label,
            r.params,
            millis(percentile(&r.raw, 990)),
            millis(percentile(&r.rpc, 990)),
            rpc_p50 - raw_p50,
        );
    }
}
