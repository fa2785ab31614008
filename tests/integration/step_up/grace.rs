//! Grace logins of a breached password: counted exactly, fleet-wide, per account and
//! stored hash, kept across a restart; a challenge spends none.

use super::*;

/// `clients[n]` each accept [`BREACHED`] for `identifier` in `realm` once, all at once,
/// from a network of its own: answers how many accepts and changes required.
async fn accept_at_once(
    clients: &[Client],
    realm: &str,
    identifier: &str,
    hash: &str,
) -> (usize, usize) {
    let barrier = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let mut calls = tokio::task::JoinSet::new();
    for (n, c) in clients.iter().enumerate() {
        let (mut c, barrier) = (c.clone(), barrier.clone());
        let (realm, identifier, hash) = (realm.to_owned(), identifier.to_owned(), hash.to_owned());
        calls.spawn(async move {
            barrier.wait().await;
            let from = format!("198.51.100.{}", n + 1);
            c.verify(&realm, &identifier, BREACHED.as_bytes(), &hash, &from).await.unwrap()
        });
    }
    let (mut accepts, mut changes) = (0, 0);
    while let Some(r) = calls.join_next().await {
        let r = r.unwrap();
        match verdict(&r) {
            Verdict::Accept => {
                accepted(&r, true, "a grace login");
                accepts += 1;
            }
            Verdict::ChangeRequired => {
                change_required(&r, "past the grace logins");
                changes += 1;
            }
            other => panic!("{other:?}: {r:?}"),
        }
    }
    (accepts, changes)
}

/// The grace logins through `clients` (one per daemon, or several on one daemon): eight
/// accepts of one breached password at once are exactly 3 accepts (with
/// `password_breached` and a device token) and 5 changes required (no device token);
/// a new stored hash starts afresh; an unlisted password is never counted; with no grace
/// the first accept requires the change.
async fn grace_logins_are_counted_exactly(clients: &[Client]) {
    assert_eq!(clients.len(), 8);
    let victim = "breached@example.com";
    let hash = hash_of(BREACHED.as_bytes());
    assert_eq!(accept_at_once(clients, "grace", victim, &hash).await, (3, 5));
    // More of them: changes required, all.
    let mut c = clients[0].clone();
    for n in 0..3 {
        let r = c.verify("grace", victim, BREACHED.as_bytes(), &hash, "198.51.100.77").await;
        change_required(&r.unwrap(), &format!("accept {}", 9 + n));
    }

    // A new stored hash (the same password rehashed, or a change to another listed one):
    // its own count, from 1.
    let rehashed = hash_of(BREACHED.as_bytes());
    for n in 1..=3 {
        let r = c.verify("grace", victim, BREACHED.as_bytes(), &rehashed, "198.51.100.77").await;
        accepted(&r.unwrap(), true, &format!("grace login {n} of the new stored hash"));
    }
    let r = c.verify("grace", victim, BREACHED.as_bytes(), &rehashed, "198.51.100.77").await;
    change_required(&r.unwrap(), "the new stored hash's fourth");

    // An unlisted password is not counted, however often.
    let fine = hash_of(PASSWORD);
    for n in 0..6 {
        let r = c.verify("grace", "fine@example.com", PASSWORD, &fine, "198.51.100.78").await;
        accepted(&r.unwrap(), false, &format!("unlisted accept {n}"));
    }
    // No grace: the first accept requires the change, on every daemon.
    for (n, c) in clients.iter().enumerate() {
        let mut c = c.clone();
        let id = format!("nograce-{n}@example.com");
        let r = c.verify("nograce", &id, BREACHED.as_bytes(), &hash, "198.51.100.79").await;
        change_required(&r.unwrap(), "no grace");
    }
    // Eight more on a fresh account: the same split.
    assert_eq!(accept_at_once(clients, "grace", "second@example.com", &hash).await, (3, 5));
}

/// The count as Redis holds it: `<16 hex credential>:<count>`, kept about a year.
fn stored_count(redis: &RedisServer, identifier: &str, hash: &str) -> Option<(String, i64)> {
    let key = account_key("grace", identifier);
    let mut conn = redis.conn();
    let value: Option<String> =
        redis::cmd("GET").arg(key.breached_count()).query(&mut conn).unwrap();
    let ttl: i64 = redis::cmd("PTTL").arg(key.breached_count()).query(&mut conn).unwrap();
    let credential = format!("{:016x}", key.credential(&secret(), hash));
    value.map(|v| {
        let (kept, count) = v.split_once(':').unwrap();
        assert_eq!(kept, credential, "the count is of another credential");
        (count.to_owned(), ttl)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_daemons_on_one_redis_agree_on_the_grace_logins() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let settings =
        TestConfig::redis(&redis.url()).extra(&(breach_section(dir.path()) + REALMS)).settings();
    let mut daemons = Vec::new();
    let mut clients = Vec::new();
    for _ in 0..8 {
        let d = Daemon::start(settings.clone()).await;
        clients.push(d.client().await);
        daemons.push(d);
    }
    // Before anything: the first round on its own, read from the store.
    let hash = hash_of(BREACHED.as_bytes());
    assert_eq!(accept_at_once(&clients, "grace", "audited@example.com", &hash).await, (3, 5));
    let (count, ttl) = stored_count(&redis, "audited@example.com", &hash).expect("a stored count");
    assert_eq!(count, "8", "eight daemons counted otherwise");
    let year_ms = 365 * 24 * 3600 * 1000;
    assert!(ttl > year_ms, "the count is kept {ttl} ms, not a year");
    let rehashed = hash_of(BREACHED.as_bytes());
    let mut c = clients[3].clone();
    let r = c.verify("grace", "audited@example.com", BREACHED.as_bytes(), &rehashed, "192.0.2.9");
    accepted(&r.await.unwrap(), true, "a new stored hash");
    assert_eq!(stored_count(&redis, "audited@example.com", &rehashed).unwrap().0, "1");
    assert_eq!(stored_count(&redis, "fine@example.com", &hash), None);

    grace_logins_are_counted_exactly(&clients).await;
    assert_eq!(
        stored_count(&redis, "fine@example.com", &hash),
        None,
        "an unlisted password was counted"
    );
    for d in daemons {
        d.shutdown().await;
    }
    let secrets = ["breached@", "audited@", "fine@", BREACHED, "$2b$04$"];
    assert_store_clean(&mut redis.conn(), &secrets);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grace_logins_are_counted_exactly_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, dir.path(), true).await;
    let mut clients = Vec::new();
    for _ in 0..8 {
        clients.push(d.client().await);
    }
    grace_logins_are_counted_exactly(&clients).await;
    d.shutdown().await;
}

/// The count outlives the daemon: on the embedded store, two grace logins before a
/// restart and one after leave none for a fourth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_count_outlives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let hash = hash_of(BREACHED.as_bytes());
    let id = "restarted@example.com";
    let d = daemon(None, dir.path(), true).await;
    let mut c = d.client().await;
    for n in 1..=2 {
        let r = c.verify("grace", id, BREACHED.as_bytes(), &hash, "192.0.2.60").await;
        accepted(&r.unwrap(), true, &format!("grace login {n}"));
    }
    d.shutdown().await;
    let d = daemon(None, dir.path(), true).await;
    let mut c = d.client().await;
    let r = c.verify("grace", id, BREACHED.as_bytes(), &hash, "192.0.2.60").await;
    accepted(&r.unwrap(), true, "grace login 3, after the restart");
    let r = c.verify("grace", id, BREACHED.as_bytes(), &hash, "192.0.2.60").await;
    change_required(&r.unwrap(), "the fourth, after the restart");
    d.shutdown().await;
}

/// A challenge is not a grace login: in a `step_up` realm a breached password from an
/// unknown device is challenged (with `password_breached`) as often as it comes, and
/// only the confirmed device's accepts count.
async fn a_challenge_spends_no_grace_login(d: &Daemon) {
    let mut c = d.client().await;
    let id = "stepped@example.com";
    let hash = hash_of(BREACHED.as_bytes());
    let mut last = String::new();
    for n in 0..6 {
        let r = c.verify("stepgrace", id, BREACHED.as_bytes(), &hash, "192.0.2.20").await;
        last = challenged(&r.unwrap(), true, &format!("challenge {n}"));
    }
    let mut device = confirm(&mut c, "stepgrace", id, &last, &hash).await.unwrap();
    for n in 1..=3 {
        let r = c.verify_with_device(
            "stepgrace",
            id,
            BREACHED.as_bytes(),
            &hash,
            "192.0.2.20",
            &device,
        );
        device = accepted(&r.await.unwrap(), true, &format!("grace login {n} after 6 challenges"));
    }
    let r =
        c.verify_with_device("stepgrace", id, BREACHED.as_bytes(), &hash, "192.0.2.20", &device);
    change_required(&r.await.unwrap(), "the fourth accept");
    // An unknown device is still challenged first: the owner proves the device, then
    // the gateway asks for the change.
    let r = c.verify("stepgrace", id, BREACHED.as_bytes(), &hash, "192.0.2.21").await;
    challenged(&r.unwrap(), true, "an unknown device past the grace logins");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_challenge_spends_no_grace_login_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(Some(&redis), dir.path(), true).await;
    a_challenge_spends_no_grace_login(&d).await;
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_challenge_spends_no_grace_login_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let d = daemon(None, dir.path(), true).await;
    a_challenge_spends_no_grace_login(&d).await;
    d.shutdown().await;
}
