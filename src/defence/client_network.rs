//! The throttle per client network (docs/throttle.md, "Per client network"): credential
//! stuffing tries one or two passwords at each of many accounts, so no account's own
//! count ever fills; this bounds what one *source* may fail across a realm's accounts.
//!
//! A failed comparison spends one token of a bucket keyed by the client's network in
//! the realm ([`crate::throttle::network_bucket`], GCRA; Auth0's suspicious-IP throttling has the
//! same shape: 100 a day, one back every 14.4 minutes). The network is the request's
//! `client_key` read as an IP address and cut to a prefix (IPv4 /32 and IPv6 /64 by
//! default: one host usually holds a whole /64, RFC 6177; Authelia groups the same way);
//! an IPv4-mapped IPv6 address counts as IPv4, and a `client_key` that is no address is
//! its own bucket. Addresses in `trusted_networks` (a gateway's own NAT egress, an
//! office) are never throttled, and neither is a valid device token: a real user on a
//! known device behind a throttled NAT still logs in.
//!
//! What an empty bucket does is the realm's `network_action`: `reject` refuses the
//! attempt before any hashing and gives the account's count back (Okta ThreatInsight
//! does not count a blocked request as a failed sign-in), `flag` compares as usual and
//! answers `network_throttled`, so the gateway can demand a second factor or a CAPTCHA.
//!
//! [`NetworkWatch`] is this daemon's view of throttled networks: one log line when a
//! network's throttle episode begins and one when it ends (with its count), named by
//! [`NetworkKey::tag`], never by address.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use crate::secret::KeySecret;
use crate::setting::{ConfigError, Problems, check};
use crate::store::keys::NetworkKey;
use crate::telemetry::events::{EventKind, SecurityEvent, emit};
use crate::telemetry::metrics::{NETWORK_EPISODES, NETWORK_THROTTLED};
use crate::throttle::network_bucket::BucketPolicy;

/// Most throttle episodes one daemon follows at once; past it a new episode is counted
/// in the metrics but not logged, so a flood of networks costs bounded memory.
pub const MAX_EPISODES: usize = 10_000;

/// `realms.NAME.network_action`: what an empty network bucket does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkAction {
    /// Refuse the attempt with the uniform reject, before any hashing, and give the
    /// account's count back.
    #[default]
    Reject,
    /// Compare as usual; every answer to the network carries `network_throttled`.
    Flag,
}

impl NetworkAction {
    /// The metric label and the configuration value.
    pub fn as_str(self) -> &'static str {
        match self {
            NetworkAction::Reject => "reject",
            NetworkAction::Flag => "flag",
        }
    }
}

/// Most entries of `trusted_networks`.
pub const MAX_TRUSTED_NETWORKS: usize = 1_000;

/// A realm's network throttle settings as written (`network_*`, `trusted_networks`),
/// before [`NetworkPolicy::checked`].
#[derive(Debug, Clone, Copy)]
pub struct NetworkSettings<'a> {
    /// `network_capacity`: tokens a full bucket holds.
    pub capacity: u32,
    /// `network_refill_period`: how long an empty bucket takes to fill.
    pub refill_period: Duration,
    /// `network_action`.
    pub action: NetworkAction,
    /// `network_ipv4_prefix`.
    pub ipv4_prefix: u8,
    /// `network_ipv6_prefix`.
    pub ipv6_prefix: u8,
    /// `trusted_networks`.
    pub trusted: &'a [IpNet],
}

/// A realm's network throttle, validated ([`NetworkPolicy::checked`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkPolicy {
    /// The bucket: `network_capacity` tokens, one back every
    /// `network_refill_period / network_capacity`.
    pub bucket: BucketPolicy,
    /// What an empty bucket does.
    pub action: NetworkAction,
    /// Prefix length an IPv4 address is grouped by (8–32).
    pub ipv4_prefix: u8,
    /// Prefix length an IPv6 address is grouped by (16–128).
    pub ipv6_prefix: u8,
    /// Networks never throttled.
    pub trusted: Vec<IpNet>,
}

impl NetworkPolicy {
    /// `realms.REALM`'s network throttle, checked where it is used: `network_capacity`
    /// 1–1,000,000 tokens, `network_refill_period` 60 s – 30 days and at least one
    /// millisecond a token, `network_ipv4_prefix` 8–32, `network_ipv6_prefix` 16–128, at
    /// most [`MAX_TRUSTED_NETWORKS`] trusted networks, each one a network the
    /// throttle may trust ([`trusted_network_problem`]). Each problem is noted in
    /// `problems`, naming `realms.REALM.FIELD`.
    pub fn checked(realm: &str, settings: &NetworkSettings<'_>, problems: &mut Problems) -> Self {
        let key = |field: &str| format!("realms.{realm}.{field}");
        let s = settings;
        let bucket = checked_bucket(realm, s.capacity, s.refill_period, problems);
        problems.note(check(&key("network_ipv4_prefix"), s.ipv4_prefix, 8..=32));
        problems.note(check(&key("network_ipv6_prefix"), s.ipv6_prefix, 16..=128));
        problems.note(check(&key("trusted_networks"), s.trusted.len(), 0..=MAX_TRUSTED_NETWORKS));
        for net in s.trusted {
            if let Some(problem) = trusted_network_problem(net) {
                problems.note::<()>(Err(ConfigError::invalid(key("trusted_networks"), problem)));
            }
        }
        NetworkPolicy {
            bucket,
            action: s.action,
            ipv4_prefix: s.ipv4_prefix,
            ipv6_prefix: s.ipv6_prefix,
            trusted: s.trusted.iter().map(IpNet::trunc).collect(),
        }
    }
}

/// The bucket of `realms.SCOPE.network_capacity` tokens refilled over
/// `realms.SCOPE.network_refill_period`, checked: capacity 1–1,000,000, period 60 s – 30
/// days and at least one millisecond a token. The rule of a realm and of its candidate
/// alike (`SCOPE`: `NAME` or `NAME.candidate`); each problem is noted in `problems`.
pub fn checked_bucket(
    scope: &str,
    capacity: u32,
    refill_period: Duration,
    problems: &mut Problems,
) -> BucketPolicy {
    let key = |field: &str| format!("realms.{scope}.{field}");
    problems.note(check(&key("network_capacity"), capacity, 1..=1_000_000));
    let month = Duration::from_secs(30 * 24 * 3600);
    problems.note(check(
        &key("network_refill_period"),
        refill_period,
        Duration::from_secs(60)..=month,
    ));
    // (Guarded: a capacity of 0 is reported above, not divided by.)
    let interval_ms = crate::throttle::duration_ms(refill_period) / u64::from(capacity.max(1));
    if interval_ms == 0 {
        problems.note::<()>(Err(ConfigError::invalid(
            key("network_refill_period"),
            "must be at least network_capacity milliseconds (one token back a millisecond)",
        )));
    }
    BucketPolicy { capacity, interval_ms }
}

/// Where a `client_key` is throttled: a network of addresses, or the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// The address's network at the realm's prefix.
    Address(IpNet),
    /// A `client_key` that is no IP address: its own bucket.
    Key(String),
}

impl Network {
    /// The text the bucket's store key is derived from (`ip:203.0.113.0/24`,
    /// `key:<client_key>`): the two kinds never collide.
    pub fn as_text(&self) -> String {
        match self {
            Network::Address(net) => format!("ip:{net}"),
            Network::Key(key) => format!("key:{key}"),
        }
    }
}

/// The IP address in a `client_key`: an address (`203.0.113.7`, `2001:db8::1`) or a
/// socket address (`203.0.113.7:51234`, `[2001:db8::1]:443`, whose port is dropped),
/// an IPv4-mapped IPv6 address as its IPv4 address. `None`: no address.
pub fn address_of(client_key: &str) -> Option<IpAddr> {
    let ip = client_key
        .parse::<IpAddr>()
        .ok()
        .or_else(|| client_key.parse::<SocketAddr>().ok().map(|s| s.ip()))?;
    Some(ip.to_canonical())
}

/// The widest IPv4 entry of `trusted_networks` taken: a shorter prefix (above all `/0`,
/// which would turn the throttle off for every client) is refused. The private ranges
/// fit: `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`.
pub const MIN_TRUSTED_PREFIX: u8 = 8;

/// The widest IPv6 entry of `trusted_networks` taken outside the unique local range
/// (`fc00::/7`, which is never routed on the Internet and may be listed down to `/7`):
/// a `/32` is a whole provider's allocation, a `/8` a region's.
pub const MIN_TRUSTED_PREFIX_V6: u8 = 32;

/// Why `net` cannot be an entry of `trusted_networks`, or `None` when it can: a prefix
/// shorter than [`MIN_TRUSTED_PREFIX`], host bits set (`10.0.0.1/8`: which network was
/// meant is a guess), or an IPv4-mapped IPv6 network (`::ffff:10.0.0.0/104`), which can
/// never match because such addresses are compared as IPv4 ([`address_of`]).
pub fn trusted_network_problem(net: &IpNet) -> Option<String> {
    let unique_local = |v6: &ipnet::Ipv6Net| {
        v6.prefix_len() >= 7 && (v6.network().segments()[0] & 0xfe00) == 0xfc00
    };
    let min = match net {
        IpNet::V4(_) => MIN_TRUSTED_PREFIX,
        IpNet::V6(v6) if unique_local(v6) => 7,
        IpNet::V6(_) => MIN_TRUSTED_PREFIX_V6,
    };
    if net.prefix_len() < min {
        return Some(format!(
            "{net}: a prefix shorter than /{min} trusts too much of the Internet (/0 turns \
             the network throttle off for every client); list narrower networks"
        ));
    }
    if net.addr() != net.network() {
        return Some(format!(
            "{net}: host bits are set; write the network as {} (or the host as {}/{})",
            net.trunc(),
            net.addr(),
            net.max_prefix_len()
        ));
    }
    if let IpNet::V6(v6) = net
        && let Some(v4) = v6.network().to_ipv4_mapped()
    {
        let prefix = v6.prefix_len().saturating_sub(96);
        return Some(format!(
            "{net}: an IPv4-mapped network never matches (client addresses in that form \
             are compared as IPv4); write it as {v4}/{prefix}"
        ));
    }
    None
}

impl NetworkPolicy {
    /// The network `client_key` is throttled as, or `None` when it is never throttled:
    /// an empty key (a `RecordAttempt` that sent none) or an address in
    /// `trusted_networks`.
    pub fn network(&self, client_key: &str) -> Option<Network> {
        let ip = address_of(client_key);
        if ip.is_some_and(|ip| self.trusted.iter().any(|net| net.contains(&ip))) {
            return None;
        }
        self.group(client_key, ip)
    }

    /// The client `client_key` names for per-client state, trusted or not: its network's
    /// text (an address at the realm's prefix, or the key itself). What a repeat list is
    /// kept per (docs/throttle.md, "Repeated passwords").
    pub fn scope(&self, client_key: &str) -> String {
        self.group(client_key, address_of(client_key))
            .map_or_else(|| "key:".to_owned(), |n| n.as_text())
    }

    /// `client_key`'s network whether trusted or not (`ip`: its address, if any);
    /// `None` for an empty key.
    fn group(&self, client_key: &str, ip: Option<IpAddr>) -> Option<Network> {
        if client_key.is_empty() {
            return None;
        }
        let Some(ip) = ip else {
            return Some(Network::Key(client_key.to_owned()));
        };
        let prefix = match ip {
            IpAddr::V4(_) => self.ipv4_prefix,
            IpAddr::V6(_) => self.ipv6_prefix,
        };
        // The prefix was range-checked at start-up; a failure here is a bug, and the
        // full address (the narrowest bucket) is the safe side.
        let net = IpNet::new(ip, prefix).map_or(IpNet::from(ip), |n| n.trunc());
        Some(Network::Address(net))
    }

    /// The bucket key of `client_key` in `realm`, `None` when it is never throttled.
    pub fn key(&self, secret: &KeySecret, realm: &str, client_key: &str) -> Option<NetworkKey> {
        self.network(client_key).map(|n| NetworkKey::new(secret, realm, &n.as_text()))
    }
}

/// One network's throttle episode.
struct Episode {
    began: Instant,
    last: Instant,
    /// Attempts refused (or flagged) in it.
    throttled: u64,
    /// How long without a throttled attempt ends it: one token's refill.
    quiet: Duration,
}

/// This daemon's throttle episodes, by (realm, network tag). Cheap to share behind an
/// `Arc`.
#[derive(Default)]
pub struct NetworkWatch {
    episodes: Mutex<HashMap<(String, String), Episode>>,
}

impl NetworkWatch {
    /// An empty watch.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Notes one attempt that found `key`'s bucket empty in `realm`: the metric by
    /// action, and the episode's first line when it is the first.
    pub fn throttled(&self, realm: &str, key: &NetworkKey, policy: &NetworkPolicy) {
        ::metrics::counter!(NETWORK_THROTTLED, "realm" => realm.to_owned(), "action" => policy.action.as_str())
            .increment(1);
        let now = Instant::now();
        let mut episodes = self.episodes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(episode) = episodes.get_mut(&(realm.to_owned(), key.tag().to_owned())) {
            episode.last = now;
            episode.throttled += 1;
            return;
        }
        ::metrics::counter!(NETWORK_EPISODES, "realm" => realm.to_owned()).increment(1);
        if episodes.len() >= MAX_EPISODES {
            return;
        }
        let quiet = Duration::from_millis(policy.bucket.interval_ms).max(Duration::from_secs(1));
        episodes.insert(
            (realm.to_owned(), key.tag().to_owned()),
            Episode { began: now, last: now, throttled: 1, quiet },
        );
        tracing::warn!(
            realm,
            network = key.tag(),
            action = policy.action.as_str(),
            "network throttle episode began: a client network used up its bucket of failed \
             logins (network_capacity)"
        );
        emit(SecurityEvent::new(EventKind::NetworkThrottled).realm(realm).network(key.tag()));
    }

    /// Ends the episodes with no throttled attempt for one token's refill, one line each.
    pub fn expire(&self, now: Instant) {
        let mut episodes = self.episodes.lock().unwrap_or_else(|e| e.into_inner());
        episodes.retain(|(realm, tag), e| {
            if now.duration_since(e.last) < e.quiet {
                return true;
            }
            let lasted = Duration::from_secs(e.last.duration_since(e.began).as_secs());
            tracing::info!(
                realm = realm.as_str(),
                network = tag.as_str(),
                throttled = e.throttled,
                lasted = %humantime::format_duration(lasted),
                "network throttle episode ended"
            );
            false
        });
    }

    /// Episodes going on now.
    pub fn open(&self) -> usize {
        self.episodes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Runs [`Self::expire`] every `interval` until the watch is dropped.
    pub fn spawn_expiry(self: &Arc<Self>, interval: Duration) {
        super::spawn_ticks(self, interval, Self::expire);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(trusted: &[&str]) -> NetworkPolicy {
        NetworkPolicy {
            bucket: BucketPolicy { capacity: 100, interval_ms: 864_000 },
            action: NetworkAction::Reject,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
            trusted: trusted.iter().map(|t| t.parse().unwrap()).collect(),
        }
    }

    fn text(p: &NetworkPolicy, client_key: &str) -> Option<String> {
        p.network(client_key).map(|n| n.as_text())
    }

    #[test]
    fn addresses_are_grouped_by_prefix_and_other_keys_are_their_own() {
        let p = policy(&[]);
        assert_eq!(text(&p, "203.0.113.7").as_deref(), Some("ip:203.0.113.7/32"));
        assert_eq!(text(&p, "203.0.113.7:51234").as_deref(), Some("ip:203.0.113.7/32"));
        assert_eq!(text(&p, "::ffff:203.0.113.7").as_deref(), Some("ip:203.0.113.7/32"));
        assert_eq!(text(&p, "2001:db8:1:2::1").as_deref(), Some("ip:2001:db8:1:2::/64"));
        assert_eq!(text(&p, "[2001:db8:1:2:ffff::9]:443"), text(&p, "2001:db8:1:2::1"));
        assert_ne!(text(&p, "2001:db8:1:3::1"), text(&p, "2001:db8:1:2::1"));
        assert_eq!(text(&p, "session-42").as_deref(), Some("key:session-42"));
        // Not an address: a bucket of its own, never a panic.
        for odd in ["999.1.1.1", "1.2.3.4/24", "::g", "[::1]", "fe80::1%eth0", " 1.2.3.4"] {
            assert!(matches!(p.network(odd), Some(Network::Key(_))), "{odd}");
        }
        assert_eq!(p.network(""), None);
        let wide = NetworkPolicy { ipv4_prefix: 24, ..policy(&[]) };
        assert_eq!(text(&wide, "203.0.113.7").as_deref(), Some("ip:203.0.113.0/24"));
    }

    #[test]
    fn trusted_networks_are_never_throttled() {
        let p = policy(&["10.0.0.0/8", "2001:db8:ff::/48"]);
        assert_eq!(p.network("10.1.2.3"), None);
        assert_eq!(p.network("::ffff:10.1.2.3"), None);
        assert_eq!(p.network("2001:db8:ff:1::5"), None);
        assert!(p.network("11.1.2.3").is_some());
    }

    #[test]
    fn keys_separate_realms_and_networks_and_hold_no_address() {
        let secret = KeySecret::new(vec![7; 32]);
        let p = policy(&[]);
        let a = p.key(&secret, "default", "203.0.113.7").unwrap();
        assert_eq!(Some(&a), p.key(&secret, "default", "203.0.113.7:1").as_ref());
        assert_ne!(Some(&a), p.key(&secret, "other", "203.0.113.7").as_ref());
        // An address and a client_key spelling the same text are different buckets.
        assert_ne!(
            p.key(&secret, "default", "ip:203.0.113.7/32"),
            p.key(&secret, "default", "203.0.113.7")
        );
        assert!(!a.as_key().contains("203"));
    }

    #[test]
    fn an_episode_is_logged_once_and_ends_after_a_quiet_refill() {
        let watch = NetworkWatch::default();
        let secret = KeySecret::new(vec![7; 32]);
        let p =
            NetworkPolicy { bucket: BucketPolicy { capacity: 2, interval_ms: 1 }, ..policy(&[]) };
        let key = p.key(&secret, "default", "203.0.113.7").unwrap();
        for _ in 0..5 {
            watch.throttled("default", &key, &p);
        }
        assert_eq!(watch.open(), 1);
        watch.expire(Instant::now());
        assert_eq!(watch.open(), 1, "one second is the shortest quiet spell");
        watch.expire(Instant::now() + Duration::from_secs(2));
        assert_eq!(watch.open(), 0);
    }
}
