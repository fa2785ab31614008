//! What the Verify benches share: the passwords and the argon2 target they hash with;
//! [`time_case`], one comparison timed raw and through `Verify` in alternation (the cost
//! bench's rows, and the spray bench's argon2id reference); and [`classify`] and
//! [`CallReport`], `Verify` answers sorted and counted (the flood bench's callers).

use std::time::{Duration, Instant};

use portcullis::pb::Verdict;
use portcullis::verify::hash::{Algorithm, HashParams, StoredHash};
use tonic::Code;

use crate::Client;
use crate::proc_cpu::process_cpu_seconds;

/// The password every stored hash of the Verify benches is made from.
pub const PASSWORD: &[u8] = b"correct horse battery staple";
/// A wrong password, for the rows that compare without a match.
pub const WRONG_PASSWORD: &[u8] = b"Winter2024!";
/// Errors a [`CallReport`] quotes (distinct ones), when calls fail in an unexpected way.
pub const QUOTED_ERRORS: usize = 3;
/// Timed comparisons per [`time_case`] (p99 is then the second slowest).
pub const RUNS: usize = 100;
/// Untimed comparisons before each [`time_case`] (caches, connection, script load).
pub const WARM_RUNS: usize = 3;
/// The argon2 memory of every argon2 target here (OWASP's minimum for argon2id), in KiB.
pub const ARGON2_TARGET_KIB: u32 = 19_456;

/// The `default` realm's target: argon2id m=[`ARGON2_TARGET_KIB`] t=2 p=1.
pub fn argon2id_target() -> HashParams {
    HashParams::Argon2 {
        algorithm: Algorithm::Argon2id,
        memory_kib: ARGON2_TARGET_KIB,
        iterations: 2,
        parallelism: 1,
    }
}

/// One comparison to time, raw and through `Verify`.
pub struct Case<'a> {
    pub realm: &'a str,
    pub password: &'a [u8],
    /// The hash compared raw: the stored hash, or for the unknown account the same work
    /// its dummy does (an argon2id hash at the target, wrong password).
    pub raw: &'a StoredHash,
    /// The `stored_hash` sent (empty: the unknown-account path).
    pub stored_hash: &'a str,
    pub want: Verdict,
    /// The `needs_rehash` every answer must carry.
    pub rehash: bool,
    pub tag: &'a str,
}

/// [`RUNS`] rounds (after [`WARM_RUNS`]) of the raw comparison, as the daemon runs it
/// (`matches_keeping` with the realm's target memory), and one sequential `Verify` call
/// (a fresh identifier each), alternated so both see the machine in the same state;
/// every answer must be `want`. Returns both sets of times, sorted, and the CPU time
/// the daemon (process `daemon_pid`, all its threads) spent per call, from `/proc`.
pub fn time_case(
    rt: &tokio::runtime::Runtime,
    client: &mut Client,
    daemon_pid: u32,
    case: &Case<'_>,
) -> (Vec<Duration>, Vec<Duration>, Option<Duration>) {
    let (mut raw, mut rpc) = (Vec::with_capacity(RUNS), Vec::with_capacity(RUNS));
    let daemon_cpu = || process_cpu_seconds(daemon_pid);
    let mut cpu_before = None;
    // Every argon2 realm here targets m = ARGON2_TARGET_KIB (bcrypt ignores it).
    let keep_kib = ARGON2_TARGET_KIB;
    for i in 0..WARM_RUNS + RUNS {
        if i == WARM_RUNS {
            cpu_before = daemon_cpu();
        }
        let start = Instant::now();
        let matched = case.raw.matches_keeping(std::hint::black_box(case.password), keep_kib);
        let took = start.elapsed();
        // A challenge is a right password too (a step-up realm's unknown device).
        let right = matches!(case.want, Verdict::Accept | Verdict::Challenge);
        let want = right && !case.stored_hash.is_empty();
        assert_eq!(matched, want, "{}: unexpected comparison result", case.tag);
        if i >= WARM_RUNS {
            raw.push(took);
        }
        let identifier = format!("cost-{}-{i}@example.com", case.tag);
        // A client key per call, as logins from many clients: no network bucket
        // (docs/throttle.md, "Per client network") empties during a row of failures, and
        // each call pays for its bucket's token as a real one does.
        let client_key = format!("bench-cost-{}-{i}", case.tag);
        let start = Instant::now();
        let answer = rt
            .block_on(client.verify(
                case.realm,
                &identifier,
                case.password,
                case.stored_hash,
                &client_key,
            ))
            .unwrap_or_else(|s| {
                panic!("{}: Verify failed: {:?} {}", case.tag, s.code(), s.message())
            });
        let took = start.elapsed();
        assert_eq!(answer.verdict, case.want as i32, "{}: unexpected verdict", case.tag);
        assert_eq!(answer.needs_rehash, case.rehash, "{}: unexpected needs_rehash", case.tag);
        if i >= WARM_RUNS {
            rpc.push(took);
        }
    }
    let cpu_per_call = cpu_before
        .zip(daemon_cpu())
        .map(|(before, after)| Duration::from_secs_f64((after - before) / RUNS as f64));
    raw.sort_unstable();
    rpc.sort_unstable();
    (raw, rpc, cpu_per_call)
}

/// One `Verify` answer, classified.
pub enum Answer {
    /// The verdict the caller expects (reject for the attacker, accept for the user).
    Expected,
    /// `RESOURCE_EXHAUSTED`: the CPU budget refused it.
    Refused,
    /// `UNAVAILABLE` (the store timed out) or the call's own deadline passed: what an
    /// overloaded daemon answers. Counted, not fatal.
    Failed(String),
    /// Anything else: a bug in the daemon or in the bench.
    Unexpected(String),
}

pub fn classify(
    answer: Result<portcullis::pb::VerifyResponse, tonic::Status>,
    want: Verdict,
) -> Answer {
    match answer {
        Ok(r) if r.verdict == want as i32 => Answer::Expected,
        Ok(r) => Answer::Unexpected(format!("unexpected answer {r:?}")),
        Err(s) if s.code() == Code::ResourceExhausted => Answer::Refused,
        Err(s)
            if matches!(s.code(), Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded) =>
        {
            Answer::Failed(format!("{:?}: {}", s.code(), s.message()))
        }
        Err(s) => Answer::Unexpected(format!("{:?}: {}", s.code(), s.message())),
    }
}

/// What callers saw inside the measured window (unexpected answers: at any time).
#[derive(Default)]
pub struct CallReport {
    /// The expected verdict: a comparison ran.
    pub expected: u64,
    /// Answered `RESOURCE_EXHAUSTED`.
    pub refused: u64,
    /// Timed out or `UNAVAILABLE`.
    pub failed: u64,
    /// Anything else, at any time.
    pub unexpected: u64,
    pub quoted: Vec<String>,
    pub expected_latency: Vec<Duration>,
    pub refused_latency: Vec<Duration>,
}

impl CallReport {
    pub fn note(&mut self, answer: Answer, took: Duration, in_window: bool) {
        match answer {
            Answer::Expected if in_window => {
                self.expected += 1;
                self.expected_latency.push(took);
            }
            Answer::Refused if in_window => {
                self.refused += 1;
                self.refused_latency.push(took);
            }
            Answer::Failed(e) if in_window => {
                self.failed += 1;
                self.quote(e);
            }
            Answer::Unexpected(e) => {
                self.unexpected += 1;
                self.quote(e);
            }
            _ => {}
        }
    }

    pub fn quote(&mut self, e: String) {
        if self.quoted.len() < QUOTED_ERRORS && !self.quoted.contains(&e) {
            self.quoted.push(e);
        }
    }

    pub fn merge(&mut self, other: CallReport) {
        self.expected += other.expected;
        self.refused += other.refused;
        self.failed += other.failed;
        self.unexpected += other.unexpected;
        for e in other.quoted {
            self.quote(e);
        }
        self.expected_latency.extend(other.expected_latency);
        self.refused_latency.extend(other.refused_latency);
    }

    pub fn sort(&mut self) {
        self.expected_latency.sort_unstable();
        self.refused_latency.sort_unstable();
    }
}
