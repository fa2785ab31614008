//! Why a door is shut, alike on both stores (docs/throttle.md, "Why a door is shut";
//! docs/devices.md, "Lanes in Inspect"): when it shut and by what, the failures of the
//! untrusted lane and of the known devices' lanes, and the distinct client networks of
//! the window, as `Admin/Inspect` answers them.

use portcullis::pb::{DoorState, InspectResponse, ShutBy};
use portcullis::store::attempt_count::{Attempt, Counted, DeviceClaim};
use portcullis::throttle::attempt_count::{MAX_DEVICE_LANES, MAX_NETWORKS};

use super::*;

fn network(n: u32) -> NetworkKey {
    NetworkKey::new(&secret(), "default", &format!("ip:203.0.113.{n}/32"))
}

/// One untrusted attempt on `k` from `from` (`None`: no client_key).
async fn from(b: &dyn Backend, k: &AccountKey, p: &Policy, from: Option<&NetworkKey>) -> Counted {
    b.store().count(&Attempt::new(k, None, p).from_network(from)).await.unwrap()
}

/// One attempt of the known device `bucket` of `k` (its token under epoch 0) from `from`.
async fn device(
    b: &dyn Backend,
    k: &AccountKey,
    bucket: &AccountKey,
    p: &Policy,
    from: Option<&NetworkKey>,
) -> Counted {
    let claim = DeviceClaim { bucket, epoch: 0 };
    let attempt = Attempt { device: Some(claim), ..Attempt::new(k, None, p) };
    b.store().count(&attempt.from_network(from)).await.unwrap()
}

async fn inspect(b: &dyn Backend, k: &AccountKey, p: &Policy) -> InspectResponse {
    portcullis::rpc::admin::inspection(p, &b.store().inspect(k, p).await.unwrap())
}

/// The store's clock now, in ms.
async fn now(b: &dyn Backend, k: &AccountKey, p: &Policy) -> u64 {
    b.store().inspect(k, p).await.unwrap().now_ms
}

/// A door shut from three client networks: when the fifth attempt shut it, by the
/// window; the untrusted lane's six failures (the sixth refused, and counted) beside a
/// known device's two in its own lane; three distinct networks (the device's network
/// and an attempt without client_key are not the untrusted window's).
pub(super) async fn why_a_door_shut_from_three_networks(b: &dyn Backend) {
    let (k, p) = (key("three-networks@example.com"), policy(false));
    let phone = k.device(&secret(), &[7; 16]);
    let nets = [network(1), network(2), network(3), network(4)];
    for n in [0, 1, 2, 0] {
        assert!(from(b, &k, &p, Some(&nets[n])).await.allowed);
    }
    let before = now(b, &k, &p).await;
    assert!(from(b, &k, &p, Some(&nets[1])).await.allowed, "the fifth");
    let after = now(b, &k, &p).await;
    assert!(!from(b, &k, &p, None).await.allowed, "the sixth, without client_key");
    for _ in 0..2 {
        let counted = device(b, &k, &phone, &p, Some(&nets[3])).await;
        assert!(counted.trusted && counted.allowed);
    }
    let seen = inspect(b, &k, &p).await;
    assert_eq!(seen.door, DoorState::Closed as i32);
    assert_eq!(seen.shut_by, ShutBy::Window as i32);
    assert!(
        (before..=after).contains(&seen.door_shut_unix_ms),
        "{seen:?} not in {before}..={after}"
    );
    assert_eq!((seen.failures, seen.device_lanes, seen.device_failures), (6, 1, 2));
    assert_eq!(seen.distinct_networks, 3);
    assert!(!seen.ceiling_reached);
    // The device's lane keeps its own window's networks.
    let lane = b.store().inspect(&phone, &p).await.unwrap();
    assert_eq!((lane.networks, lane.devices.lanes), (1, 0), "a bucket reads no lanes");
    // Open again once the window (and its lockout) is over: nothing said of a shut.
    b.advance(&k, 15 * MIN).await;
    b.advance(&phone, 15 * MIN).await;
    let open = inspect(b, &k, &p).await;
    assert_eq!(open.door, DoorState::Open as i32);
    assert_eq!((open.shut_by, open.door_shut_unix_ms), (ShutBy::Unspecified as i32, 0));
    assert_eq!((open.failures, open.distinct_networks), (0, 0));
    assert_eq!((open.device_lanes, open.device_failures), (1, 0), "a lane, its window over");
}

/// The network set is the window's: a new window starts it empty. It holds at most
/// MAX_NETWORKS, and an attempt refused behind the closed door is noted as counted.
pub(super) async fn the_network_set_restarts_with_the_window(b: &dyn Backend) {
    let (k, p) = (key("window-networks@example.com"), policy(false));
    for n in 1..=3 {
        from(b, &k, &p, Some(&network(n))).await;
    }
    assert_eq!(inspect(b, &k, &p).await.distinct_networks, 3);
    b.advance(&k, 15 * MIN).await;
    assert_eq!(inspect(b, &k, &p).await.distinct_networks, 0, "the window is over");
    from(b, &k, &p, Some(&network(3))).await;
    let seen = inspect(b, &k, &p).await;
    assert_eq!((seen.failures, seen.distinct_networks), (1, 1), "a new window, a new set");
    // A flood from many networks: noted up to the bound, refused attempts included.
    let n = u32::try_from(MAX_NETWORKS).unwrap() + 6;
    for i in 0..n {
        from(b, &k, &p, Some(&network(10 + i))).await;
    }
    let seen = inspect(b, &k, &p).await;
    assert_eq!(seen.failures, n + 1);
    assert_eq!(seen.distinct_networks as usize, MAX_NETWORKS, "64 means 64 or more");
    // A clear and a new record: the old window's networks are gone.
    b.store().clear(&k).await.unwrap();
    from(b, &k, &p, None).await;
    assert_eq!(inspect(b, &k, &p).await.distinct_networks, 0);
}

/// A door shut by the ceiling says so, and when: the attempt that reached it, not the
/// one that exhausted an earlier window; time does not change either.
pub(super) async fn the_ceiling_shows_as_the_cause(b: &dyn Backend) {
    let k = key("ceiling-cause@example.com");
    let p = Policy { max_consecutive_failures: 7, ..policy(false) };
    for _ in 0..5 {
        from(b, &k, &p, Some(&network(1))).await;
    }
    let first = inspect(b, &k, &p).await;
    assert_eq!((first.shut_by, first.ceiling_reached), (ShutBy::Window as i32, false));
    b.advance(&k, 15 * MIN).await;
    from(b, &k, &p, Some(&network(1))).await;
    let before = now(b, &k, &p).await;
    assert!(from(b, &k, &p, Some(&network(2))).await.reached_ceiling);
    let after = now(b, &k, &p).await;
    let seen = inspect(b, &k, &p).await;
    assert_eq!(seen.door, DoorState::Closed as i32);
    assert_eq!((seen.shut_by, seen.ceiling_reached), (ShutBy::Ceiling as i32, true));
    assert!((before..=after).contains(&seen.door_shut_unix_ms), "{seen:?}");
    assert!(seen.door_shut_unix_ms > first.door_shut_unix_ms);
    assert_eq!((seen.distinct_networks, seen.seconds_until_open), (2, 0));
    b.advance(&k, 24 * 60 * MIN).await;
    let later = inspect(b, &k, &p).await;
    assert_eq!((later.shut_by, later.door), (ShutBy::Ceiling as i32, DoorState::Closed as i32));
    assert_eq!(later.door_shut_unix_ms, seen.door_shut_unix_ms - moved(b, 24 * 60 * MIN));
}

/// How far the recorded shut time moved when `ms` were "waited" (Redis ages the record's
/// times; the embedded store moves its clock).
fn moved(b: &dyn Backend, ms: u64) -> u64 {
    if b.ages_records() { ms } else { 0 }
}

/// The device index lists at most MAX_DEVICE_LANES buckets: Inspect reads that many.
pub(super) async fn the_device_index_is_bounded(b: &dyn Backend) {
    let (k, p) = (key("many-devices@example.com"), policy(false));
    for d in 0..(MAX_DEVICE_LANES + 2) {
        let bucket = k.device(&secret(), &[u8::try_from(d).unwrap(); 16]);
        assert!(device(b, &k, &bucket, &p, None).await.trusted);
    }
    let seen = inspect(b, &k, &p).await;
    assert_eq!(seen.device_lanes as usize, MAX_DEVICE_LANES);
    assert_eq!(seen.device_failures as usize, MAX_DEVICE_LANES);
    assert_eq!((seen.failures, seen.door), (0, DoorState::Open as i32), "the untrusted lane");
}

/// The keys on Redis, pinned: the account record's network set `…:r:n` and a device
/// bucket's `…:d:<16 hex>:n` hold the networks (60 bits of their tags, as integers)
/// and end with the window; the
/// index `…:dx` lists the device's tag and lives as long as the device epoch; an
/// attempt without client_key writes no set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_keys_on_redis() {
    let redis = Redis::new();
    let (k, p) = (key("lane-keys@example.com"), policy(false));
    let phone = k.device(&secret(), &[7; 16]);
    from(&redis, &k, &p, Some(&network(1))).await;
    device(&redis, &k, &phone, &p, Some(&network(2))).await;
    let mut conn = redis.server.conn();
    let tag = format!("portcullis:v2:{{{}}}", k.digest());
    let members = |conn: &mut redis::Connection, key: &str| -> Vec<String> {
        redis::cmd("SMEMBERS").arg(key).query(conn).unwrap()
    };
    // A network as the number its tag's first 15 hex digits spell: an intset.
    let member = |n: u32| u64::from_str_radix(&network(n).tag()[..15], 16).unwrap().to_string();
    assert_eq!(members(&mut conn, &format!("{tag}:r:n")), [member(1)]);
    assert_eq!(members(&mut conn, &format!("{}:n", phone.record())), [member(2)]);
    let encoding: String =
        redis::cmd("OBJECT").arg("ENCODING").arg(format!("{tag}:r:n")).query(&mut conn).unwrap();
    assert_eq!(encoding, "intset");
    let listed: Vec<String> =
        redis::cmd("ZRANGE").arg(format!("{tag}:dx")).arg(0).arg(-1).query(&mut conn).unwrap();
    assert_eq!(listed, [&phone.record()[format!("{tag}:d:").len()..]]);
    let ttl = |conn: &mut redis::Connection, key: String| -> u64 {
        redis::cmd("PTTL").arg(key).query(conn).unwrap()
    };
    assert!(near(Some(ttl(&mut conn, format!("{tag}:r:n"))), 15 * MIN), "ends with the window");
    let epoch_ttl = portcullis::store::attempt_count::DEFAULT_EPOCH_TTL_MS;
    assert!(near(Some(ttl(&mut conn, format!("{tag}:dx"))), epoch_ttl));
    let sa: Option<u64> = redis::cmd("HGET").arg(k.record()).arg("sa").query(&mut conn).unwrap();
    assert_eq!(sa, None, "written only when the door shuts");
    let bare = key("no-client-key@example.com");
    from(&redis, &bare, &p, None).await;
    let exists: u64 = redis::cmd("EXISTS").arg(bare.networks()).query(&mut conn).unwrap();
    assert_eq!(exists, 0, "an attempt without client_key writes no set");
}
