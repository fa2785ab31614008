//! The abuse cooldown (`server.abuse_cooldown`): addresses whose connection was closed
//! for abuse are refused at accept for a while.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Most addresses held in an [`AbuseCooldown`] at once; past it, forgotten ones are
/// dropped, and while it stays full a new address is not held (the per-connection
/// limits still apply to it).
const MAX_COOLING_ADDRESSES: usize = 65_536;

/// Most doublings of the cooldown for an address that keeps offending: 2^5 = 32 times
/// `server.abuse_cooldown`.
const MAX_COOLDOWN_DOUBLINGS: u32 = 5;

/// Addresses whose connection was closed for abuse, each with the time until which new
/// connections from it are closed at accept (`server.abuse_cooldown`). An IPv6 address
/// counts by its /64 network, which one host is usually given whole. An address closed
/// for abuse again within one cooldown's length after its last cooldown ended gets twice
/// the last cooldown, up to 32 times the setting: a client that resumes its abuse at
/// every cooldown's end comes back ever more rarely. One clean cooldown's length forgets
/// it.
pub struct AbuseCooldown {
    period: Duration,
    held: Mutex<HashMap<IpAddr, Hold>>,
}

/// The period and how many addresses are held, never the addresses.
impl std::fmt::Debug for AbuseCooldown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.held.lock().map_or(0, |held| held.len());
        f.debug_struct("AbuseCooldown").field("period", &self.period).field("held", &held).finish()
    }
}

/// The key of `ip` in an [`AbuseCooldown`]: an IPv4 address (IPv4-mapped IPv6 included)
/// as it is, an IPv6 address as its /64 network.
fn cooldown_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        v4 => v4,
    }
}

/// One address's cooldown.
#[derive(Debug, Clone, Copy)]
struct Hold {
    /// New connections are refused until then.
    until: Instant,
    /// Length of this cooldown: `period` × 2^doublings.
    length: Duration,
    doublings: u32,
}

impl Hold {
    /// Whether the address is remembered at `now`: cooling down, or within one
    /// cooldown's length after.
    fn remembered(&self, now: Instant) -> bool {
        now < self.until + self.length
    }
}

impl AbuseCooldown {
    /// A cooldown of `period` (zero: none).
    pub fn new(period: Duration) -> Self {
        Self { period, held: Mutex::new(HashMap::new()) }
    }

    /// Holds `ip`: one connection from it was closed for abuse.
    pub(super) fn hold(&self, ip: IpAddr) {
        self.hold_at(ip, Instant::now());
    }

    fn hold_at(&self, ip: IpAddr, now: Instant) {
        if self.period.is_zero() {
            return;
        }
        let ip = cooldown_key(ip);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        let doublings = match held.get(&ip) {
            // Another connection of the same client, closed during its cooldown (it
            // opened before): the same offence.
            Some(last) if now < last.until => return,
            Some(last) if last.remembered(now) => (last.doublings + 1).min(MAX_COOLDOWN_DOUBLINGS),
            _ => 0,
        };
        if !held.contains_key(&ip) && held.len() >= MAX_COOLING_ADDRESSES {
            held.retain(|_, h| h.remembered(now));
            if held.len() >= MAX_COOLING_ADDRESSES {
                return;
            }
        }
        let length = self.period * 2u32.pow(doublings);
        held.insert(ip, Hold { until: now + length, length, doublings });
    }

    /// Whether a new connection from `ip` is to be closed at accept.
    pub(super) fn refuses(&self, ip: IpAddr) -> bool {
        self.refuses_at(ip, Instant::now())
    }

    fn refuses_at(&self, ip: IpAddr, now: Instant) -> bool {
        if self.period.is_zero() {
            return false;
        }
        let ip = cooldown_key(ip);
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        match held.get(&ip) {
            Some(h) if now < h.until => true,
            Some(h) if !h.remembered(now) => {
                held.remove(&ip);
                false
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn v4(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn an_abusive_address_is_refused_for_the_cooldown_and_others_are_not() {
        let cooldown = AbuseCooldown::new(SECOND);
        let t0 = Instant::now();
        cooldown.hold_at(v4(1), t0);
        assert!(cooldown.refuses_at(v4(1), t0 + SECOND / 2));
        assert!(!cooldown.refuses_at(v4(2), t0 + SECOND / 2));
        assert!(!cooldown.refuses_at(v4(1), t0 + SECOND));
        // The IPv4-mapped IPv6 form of the address is the same client.
        cooldown.hold_at(v4(3), t0);
        let mapped: IpAddr = "::ffff:10.0.0.3".parse().unwrap();
        assert!(cooldown.refuses_at(mapped, t0 + SECOND / 2));
        // IPv6 by /64: another address in the network is the same client, another
        // network is not.
        cooldown.hold_at("2001:db8:1:2::1".parse().unwrap(), t0);
        assert!(cooldown.refuses_at("2001:db8:1:2:ffff::9".parse().unwrap(), t0));
        assert!(!cooldown.refuses_at("2001:db8:1:3::1".parse().unwrap(), t0));
        // Its Debug shows no address.
        let debug = format!("{cooldown:?}");
        assert!(!debug.contains("10.0.0") && !debug.contains("2001"), "{debug}");
    }

    #[test]
    fn repeated_abuse_doubles_the_cooldown_up_to_32_times_and_a_clean_spell_forgets_it() {
        let cooldown = AbuseCooldown::new(SECOND);
        let mut now = Instant::now();
        let mut lengths = Vec::new();
        for _ in 0..8 {
            cooldown.hold_at(v4(1), now);
            // Another connection closed during the cooldown changes nothing.
            cooldown.hold_at(v4(1), now + Duration::from_millis(10));
            let mut length = Duration::ZERO;
            while cooldown.refuses_at(v4(1), now + length) {
                length += SECOND / 4;
            }
            lengths.push(length.as_secs());
            // Abuse again as soon as the cooldown ends.
            now += length;
        }
        assert_eq!(lengths, [1, 2, 4, 8, 16, 32, 32, 32]);
        // A clean spell as long as the last cooldown: back to one period.
        now += Duration::from_secs(33);
        assert!(!cooldown.refuses_at(v4(1), now));
        cooldown.hold_at(v4(1), now);
        assert!(cooldown.refuses_at(v4(1), now + SECOND / 2));
        assert!(!cooldown.refuses_at(v4(1), now + SECOND));
    }

    #[test]
    fn a_zero_cooldown_refuses_nothing() {
        let cooldown = AbuseCooldown::new(Duration::ZERO);
        let t0 = Instant::now();
        cooldown.hold_at(v4(1), t0);
        assert!(!cooldown.refuses_at(v4(1), t0));
    }
}
