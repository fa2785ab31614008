//! What each operation costs Redis, read from Redis's own `INFO commandstats`: exactly
//! one script call per `RecordAttempt` and per `Admit`, and no connection check
//! (`PING`, `UNWATCH`) per operation, whether calls come one at a time or 64 at once.

use std::collections::BTreeMap;

use portcullis::store::realm_tally::FLUSH_EVERY;
use portcullis_test_support::*;

/// Calls per command (`cmdstat_<name>:calls=N,...`) since the last `CONFIG RESETSTAT`.
fn command_calls(conn: &mut redis::Connection) -> BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO").arg("commandstats").query(conn).unwrap();
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.trim_end().split_once(':')?;
            let name = name.strip_prefix("cmdstat_")?;
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect()
}

fn reset_stats(conn: &mut redis::Connection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(conn).unwrap();
}

/// Commands besides the scripts' own and this test's `INFO`/`CONFIG`, the health
/// check's `PING` (one a second, whatever the load), a new pooled connection's
/// set-up (redis-rs's two `CLIENT SETINFO`, which Redis before 7.2 counts as `client`;
/// at most the pool's 16 connections) and the realm status tally's first write (its
/// script's load): what each call adds.
fn overhead(calls: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    // The operations' scripts' commands, and the tally's (`realm_tally/note.lua`).
    const SCRIPT_OWN: [&str; 13] = [
        "time", "hmget", "hset", "pexpire", "get", "set", "del", "info", "pfadd", "hgetall",
        "hget", "hincrby", "hdel",
    ];
    calls
        .iter()
        .filter(|(name, calls)| {
            !SCRIPT_OWN.contains(&name.as_str())
                && !name.starts_with("config")
                && *name != "evalsha"
                && *name != "ping"
                && !(*name == "client" && **calls <= 2 * 16)
                && !(*name == "script|load" && **calls <= 1)
        })
        .map(|(name, calls)| (name.clone(), *calls))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_script_call_per_operation_and_no_connection_checks() {
    let redis = RedisServer::start();
    let mut probe = redis.conn();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    // Loads the scripts (EVALSHA, NOSCRIPT, SCRIPT LOAD, EVALSHA) and opens connections.
    c.attempt("default", "warm-up@example.com").await.unwrap();
    c.admit("default", "warm-up@example.com").await.unwrap();

    // One at a time.
    reset_stats(&mut probe);
    let started = std::time::Instant::now();
    const SEQUENTIAL: u64 = 200;
    for i in 0..SEQUENTIAL {
        c.attempt("default", &format!("user{i}@example.com")).await.unwrap();
    }
    let calls = command_calls(&mut probe);
    assert_eq!(calls.get("evalsha"), Some(&SEQUENTIAL), "one script per RecordAttempt: {calls:?}");
    assert_eq!(overhead(&calls), BTreeMap::new(), "commands besides the script: {calls:?}");
    // The health check pings once a second; any PING per operation would be 200.
    let health_pings = started.elapsed().as_secs() + 2;
    let pings = calls.get("ping").copied().unwrap_or(0);
    assert!(pings <= health_pings, "{pings} PINGs for {SEQUENTIAL} calls: {calls:?}");
    assert!(!calls.contains_key("unwatch"), "UNWATCH sent: {calls:?}");

    // 64 at once, over 4 HTTP/2 connections, one hot account: Admit and RecordAttempt.
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(daemon.client().await);
    }
    reset_stats(&mut probe);
    let started = std::time::Instant::now();
    const CONCURRENT: u64 = 64;
    const ROUNDS: u64 = 10;
    let tasks: Vec<_> = (0..CONCURRENT)
        .map(|i| {
            let mut c = clients[i as usize % clients.len()].clone();
            tokio::spawn(async move {
                for _ in 0..ROUNDS {
                    c.admit("default", "hot@example.com").await.unwrap();
                    c.attempt("default", "hot@example.com").await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let calls = command_calls(&mut probe);
    // The hot account's lockout is noted for the realm's status, which the daemon writes
    // (one script) at most every `FLUSH_EVERY`, apart from the calls; its first write
    // meets NOSCRIPT, loads the script and sends it again (one `EVALSHA` more).
    let flushes = started.elapsed().as_millis() / FLUSH_EVERY.as_millis() + 1;
    let loads = calls.get("script|load").copied().unwrap_or(0);
    let tally = u64::try_from(flushes).unwrap() + loads;
    let scripts = calls.get("evalsha").copied().unwrap_or(0);
    let operations = 2 * CONCURRENT * ROUNDS;
    assert!(
        (operations..=operations + tally).contains(&scripts),
        "one script per Admit and per RecordAttempt, and at most {tally} of the tally's: {calls:?}"
    );
    assert_eq!(overhead(&calls), BTreeMap::new(), "commands besides the script: {calls:?}");
    let health_pings = started.elapsed().as_secs() + 2;
    let pings = calls.get("ping").copied().unwrap_or(0);
    assert!(
        pings <= health_pings,
        "{pings} PINGs for {} calls: {calls:?}",
        2 * CONCURRENT * ROUNDS
    );
    daemon.shutdown().await;
}

/// A `Verify` is five scripts and nothing else, in two round trips of scripts sent
/// together: the count, the spray check and the network's token; then, on an accept, the
/// clear and the token's give-back, or, on a reject, the spray failure note and the
/// refused password's repeat note (docs/verify.md, "The order of work"). The same for a
/// known and an unknown account. A repeat of a refused password is five too, in two
/// round trips: its token goes back beside the spray note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verify_is_five_scripts_whatever_its_verdict() {
    let redis = RedisServer::start();
    let mut probe = redis.conn();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let hash = bcrypt::hash("right", 4).unwrap();
    // Loads every script a Verify uses (a first EVALSHA answers NOSCRIPT).
    c.verify("fast", "warm-up@example.com", b"right", &hash, "192.0.2.1").await.unwrap();
    c.verify("fast", "warm-up@example.com", b"wrong", &hash, "192.0.2.1").await.unwrap();
    const CALLS: u64 = 20;
    for (what, password, stored) in [
        ("accept", &b"right"[..], hash.as_str()),
        ("wrong password", b"wrong", hash.as_str()),
        ("unknown account", b"wrong", ""),
    ] {
        reset_stats(&mut probe);
        for i in 0..CALLS {
            let id = format!("{what}-{i}@example.com");
            c.verify("fast", &id, password, stored, &format!("198.51.100.{i}")).await.unwrap();
        }
        let calls = command_calls(&mut probe);
        assert_eq!(calls.get("evalsha"), Some(&(5 * CALLS)), "{what}: {calls:?}");
        // (The other counts are the scripts' own commands.)
        for check in ["ping", "unwatch", "watch", "multi", "exec"] {
            assert!(!calls.contains_key(check), "{what}: {check} sent: {calls:?}");
        }
    }
    reset_stats(&mut probe);
    for _ in 0..CALLS {
        c.verify("fast", "repeat@example.com", b"wrong", &hash, "203.0.113.1").await.unwrap();
    }
    let calls = command_calls(&mut probe);
    // The first is a new wrong password; the others repeat it, in turn forgiven unseen
    // (its token back beside the spray note; no repeat note, which would re-arm the
    // entry) and compared again (as any wrong password): five scripts each way.
    assert_eq!(calls.get("evalsha"), Some(&(5 * CALLS)), "repeats: {calls:?}");
    daemon.shutdown().await;
}

/// The scripts docs/deployment.md's "Redis operations per login" table gives a `Verify`
/// row starting with `outcome`: the number its "scripts" column starts with.
fn documented_scripts(outcome: &str) -> u64 {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/deployment.md"),
    )
    .unwrap();
    let row = doc
        .lines()
        .find(|l| l.starts_with(&format!("| `Verify`, {outcome}")))
        .unwrap_or_else(|| panic!("docs/deployment.md has no Verify row {outcome:?}"));
    let scripts = row.split('|').nth(2).unwrap().trim();
    scripts.split(' ').next().unwrap().parse().unwrap()
}

/// A `Verify` at a closed door is four scripts (the count, the spray check and the
/// network's token, then the token back), and docs/deployment.md's table says what is
/// measured for every row measured here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_scripts_per_verify_are_the_ones_sent() {
    let redis = RedisServer::start();
    let mut probe = redis.conn();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let hash = bcrypt::hash("right", 4).unwrap();
    let measure = async |c: &mut Client, probe: &mut redis::Connection, id: &str, pw: &[u8]| {
        reset_stats(probe);
        c.verify("fast", id, pw, &hash, "192.0.2.9").await.unwrap();
        command_calls(probe).get("evalsha").copied().unwrap_or(0)
    };
    // Warm-up: every script loaded (a first EVALSHA answers NOSCRIPT).
    c.verify("fast", "warm@example.com", b"right", &hash, "192.0.2.1").await.unwrap();
    c.verify("fast", "warm@example.com", b"wrong", &hash, "192.0.2.1").await.unwrap();
    let right = measure(&mut c, &mut probe, "ok@example.com", b"right").await;
    let wrong = measure(&mut c, &mut probe, "bad@example.com", b"wrong-0").await;
    for n in 1..10 {
        c.verify("fast", "shut@example.com", format!("w{n}").as_bytes(), &hash, "192.0.2.9")
            .await
            .unwrap();
    }
    let closed = measure(&mut c, &mut probe, "shut@example.com", b"w-last").await;
    assert_eq!((right, wrong, closed), (5, 5, 4));
    assert_eq!(documented_scripts("right password"), right);
    assert_eq!(documented_scripts("wrong password"), wrong);
    assert_eq!(documented_scripts("door closed"), closed);
    daemon.shutdown().await;
}
