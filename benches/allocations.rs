//! `cargo bench --bench allocations`: heap allocations the daemon makes per call, counted
//! by dhat's heap profiler (docs/performance.md, "Allocations per call").
//!
//! The daemon runs in this process as the binary runs it: the runtime its `[server]`
//! settings ask for (one I/O thread by default), on a thread of its own, with the
//! binary's telemetry installed (text logs at `info`, the Prometheus recorder). The
//! calls come from a second process (this bench, run again as a driver), so every
//! allocation counted here is the daemon's: its runtime, the embedded store's writer,
//! anything it spawns. One call at a time, after a warm-up: the count is the calls' own,
//! not a load's.
//!
//! dhat counts `alloc`, `alloc_zeroed` and `realloc` calls (a `realloc` is an allocation
//! to the allocator) and the bytes they asked for. The counts are stable from run to run
//! within a few allocations a call (the store's pool, timers and h2's buffers grow in
//! steps), and do not depend on the machine's load: unlike the throttle bench, this one
//! may run beside other work.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, ExitCode, Stdio};
use std::time::Duration;

use portcullis::config::Settings;
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{Account, AdmitRequest, Decision, RecordAttemptRequest};
use portcullis_test_support::{RedisServer, TestConfig};
use tonic::transport::Channel;

#[global_allocator]
static ALLOCATOR: dhat::Alloc = dhat::Alloc;

/// Calls before counting (connections, the pool, the script cache, the metric handles).
const WARM_UP: u64 = 500;
/// Calls counted per row.
const CALLS: u64 = 2_000;
/// Distinct accounts the calls cycle over, so no record fills (and no lockout line is
/// written: the counts are the quiet path's).
const ACCOUNTS: u64 = 1_000;

/// Starts the daemon with `settings` on a thread of its own, as the binary does, and
/// answers its address.
fn start_daemon(settings: Settings) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = listener.local_addr().expect("its address");
    listener.set_nonblocking(true).expect("non-blocking");
    std::thread::spawn(move || {
        let runtime = settings.server.runtime().expect("the daemon's runtime");
        runtime.block_on(async move {
            // Once a process, as the binary does: the second daemon shares the first's.
            static TELEMETRY: std::sync::Once = std::sync::Once::new();
            TELEMETRY.call_once(|| {
                std::mem::forget(portcullis::telemetry::init(
                    portcullis::telemetry::LogFormat::Text,
                ));
            });
            let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
            let daemon = portcullis::Daemon::new(settings).expect("the daemon builds");
            let _ = daemon.serve(listener, std::future::pending::<()>()).await;
        });
    });
    addr
}

/// One call, by name.
#[derive(Clone, Copy)]
enum Call {
    RecordAttempt,
    Admit,
}

async fn call(client: &mut GovernorClient<Channel>, call: Call, n: u64) {
    let account = Some(Account {
        realm: "default".into(),
        identifier: format!("user{}@example.com", n % ACCOUNTS),
    });
    match call {
        Call::RecordAttempt => {
            let request = RecordAttemptRequest {
                account,
                client_key: format!("198.51.100.{}", n % 200),
                ..Default::default()
            };
            let answer = client.record_attempt(request).await.expect("an answer").into_inner();
            assert_eq!(answer.decision, Decision::Allow as i32, "{answer:?}");
        }
        Call::Admit => {
            let request = AdmitRequest { account };
            client.admit(request).await.expect("an answer");
        }
    }
}

/// The driver: connects to the daemon at `addr`, makes the warm-up calls, says
/// `warm`, waits for `go`, makes the counted calls one at a time and says `done`.
async fn drive(addr: &str, what: Call) {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .expect("a URI")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("the daemon answers");
    let mut client = GovernorClient::new(channel);
    for n in 0..WARM_UP {
        call(&mut client, what, n).await;
    }
    println!("warm");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("go");
    for n in WARM_UP..WARM_UP + CALLS {
        call(&mut client, what, n).await;
    }
    println!("done");
}

/// Allocations and bytes per call of `what` (its driver argument) against the daemon
/// at `addr`: the daemon's heap counts across the driver's counted calls.
fn per_call(addr: std::net::SocketAddr, what: &str) -> (f64, f64) {
    let exe = std::env::current_exe().expect("this bench's path");
    let mut driver = Command::new(exe)
        .args(["--drive", &addr.to_string(), what])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the driver starts");
    let mut said = BufReader::new(driver.stdout.take().expect("its output")).lines();
    let mut line = || said.next().and_then(Result::ok).unwrap_or_default();
    assert_eq!(line(), "warm");
    let before = dhat::HeapStats::get();
    writeln!(driver.stdin.as_mut().expect("its input"), "go").expect("go");
    assert_eq!(line(), "done");
    let after = dhat::HeapStats::get();
    assert!(driver.wait().expect("the driver ends").success());
    let calls = CALLS as f64;
    (
        (after.total_blocks - before.total_blocks) as f64 / calls,
        (after.total_bytes - before.total_bytes) as f64 / calls,
    )
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--list") {
        return ExitCode::SUCCESS;
    }
    if let Some(at) = args.iter().position(|a| a == "--drive") {
        let (addr, what) = (&args[at + 1], &args[at + 2]);
        let what = if what == "admit" { Call::Admit } else { Call::RecordAttempt };
        let runtime = tokio::runtime::Runtime::new().expect("the driver's runtime");
        runtime.block_on(drive(addr, what));
        return ExitCode::SUCCESS;
    }
    let _profiler = dhat::Profiler::builder().testing().trim_backtraces(Some(4)).build();
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("a data directory");
    let on_redis = start_daemon(TestConfig::redis(&redis.url()).settings());
    let embedded = start_daemon(TestConfig::embedded(&dir.path().join("data")).settings());
    println!("| call | store | allocations per call | bytes per call |");
    println!("|---|---|---:|---:|");
    let rows = [
        ("RecordAttempt", "Redis", on_redis, "record_attempt"),
        ("RecordAttempt", "embedded", embedded, "record_attempt"),
        ("Admit", "Redis", on_redis, "admit"),
    ];
    for (name, store, addr, what) in rows {
        let (allocations, bytes) = per_call(addr, what);
        println!("| {name} | {store} | {allocations:.1} | {bytes:.0} |");
    }
    ExitCode::SUCCESS
}
