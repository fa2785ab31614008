//! Repeated wrong passwords (docs/throttle.md, "Repeated passwords"): a password this
//! client was already refused with, tried again, is not a new guess (NIST SP 800-63B
//! bounds *guesses*), so it is not counted again. The classic helpdesk lockout is a
//! phone or a mail client retrying the user's *old* password after a change.
//!
//! Each bucket (an account's record, or a known device's) keeps, per client, the short
//! list of passwords that client was refused with in the current window, each only as a
//! keyed fingerprint: `HMAC-SHA-256(subkey("repeat"), …)` over the realm, the bucket,
//! the client and the password, truncated to `repeat_fingerprint_bytes`. The count reads
//! the list in the same atomic step ([`crate::store::attempt_count::Attempt::repeat`]); a comparison
//! that fails adds to it ([`crate::store::repeat_list::RepeatListStore::note_repeat`]).
//!
//! The list is per (bucket, client), so no other client can learn from it whether
//! someone tried a password: an attacker on his own addresses finds only his own
//! refused guesses there, never the user's typos. The client is its network
//! ([`crate::defence::client_network::NetworkPolicy::scope`]: an address at the realm's prefix), so a
//! phone whose IPv6 privacy address rotates within its /64 stays one client. With a
//! device token too: a token can be stolen or revoked, and a list per token would be
//! shared by everyone holding it. The list is bound to the window of the bucket the
//! attempt was counted in (the device's, or the account's).

use hmac::Mac;

use crate::secret::{KeySecret, SubKey, keyed_mac, update_framed};
use crate::setting::{Problems, check};
use crate::store::keys::{AccountKey, RepeatKey};

/// A realm's repeat settings, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepeatPolicy {
    /// Refused passwords kept per client and bucket (`repeat_list_length`, 0–16; 0:
    /// every attempt counts).
    pub list_length: u32,
    /// Bytes kept of each fingerprint (`repeat_fingerprint_bytes`, 2–8).
    pub fingerprint_bytes: u8,
}

impl RepeatPolicy {
    /// `realms.REALM`'s repeat settings, checked where they are used:
    /// `repeat_list_length` 0–16 fingerprints, `repeat_fingerprint_bytes` 2–8. Each
    /// problem is noted in `problems`, naming `realms.REALM.FIELD`.
    pub fn checked(
        realm: &str,
        (list_length, fingerprint_bytes): (u32, u8),
        problems: &mut Problems,
    ) -> Self {
        let key = |field: &str| format!("realms.{realm}.{field}");
        problems.note(check(&key("repeat_list_length"), list_length, 0..=16));
        problems.note(check(&key("repeat_fingerprint_bytes"), fingerprint_bytes, 2..=8));
        Self { list_length, fingerprint_bytes }
    }

    /// Whether repeats are forgiven at all.
    pub fn is_on(&self) -> bool {
        self.list_length > 0
    }
}

/// Derives the lists' keys and the fingerprints: one sub-key of the key secret that
/// serves no other purpose, so every daemon of a fleet derives the same values and no
/// other value says anything about them. `Debug` is redacted.
#[derive(Clone)]
pub struct RepeatFingerprints {
    key: [u8; 32],
    secret: KeySecret,
}

impl std::fmt::Debug for RepeatFingerprints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RepeatFingerprints(<key redacted>)")
    }
}

impl RepeatFingerprints {
    /// Keyed by `secret.subkey(SubKey::Repeat)`.
    pub fn new(secret: &KeySecret) -> Self {
        Self { key: secret.subkey(SubKey::Repeat), secret: secret.clone() }
    }

    /// The list of the client `scope` on `bucket`.
    pub fn list(&self, bucket: &AccountKey, scope: &str) -> RepeatKey {
        bucket.repeats(&self.secret, scope)
    }

    /// `password`'s fingerprint on the list `list` (which names the realm's bucket and
    /// the client) in `realm`, against the stored hash `stored_hash` (the PHC string the
    /// gateway sent; empty for an unknown identifier): `HMAC(key, "repeat\0" ‖ len(realm)
    /// ‖ realm ‖ len(list) ‖ list ‖ len(stored_hash) ‖ stored_hash ‖ password)`, its
    /// first `bytes` bytes as a big-endian number. The stored hash is bound in so that a
    /// repeat is forgiven only while its refusal still holds: after a password change,
    /// the old list matches nothing, and a password refused before the change is
    /// compared again. The same password has another fingerprint on every other list, so
    /// a store dump cannot tell where one password was tried twice; without the key
    /// secret no value says anything about a password.
    pub fn fingerprint(
        &self,
        realm: &str,
        list: &RepeatKey,
        stored_hash: &str,
        password: &[u8],
        bytes: u8,
    ) -> u64 {
        let mut mac = keyed_mac(&self.key);
        mac.update(b"repeat\0");
        for part in [realm.as_bytes(), list.as_str().as_bytes(), stored_hash.as_bytes()] {
            update_framed(&mut mac, part);
        }
        mac.update(password);
        let digest = mac.finalize().into_bytes();
        let n = usize::from(bytes.clamp(2, 8));
        digest[..n].iter().fold(0u64, |acc, b| (acc << 8) | u64::from(*b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::{Normalization, normalize};

    fn setup() -> (RepeatFingerprints, AccountKey) {
        let secret = KeySecret::new(vec![9; 32]);
        let id = normalize(Normalization::Email, "alice@example.com").unwrap();
        (RepeatFingerprints::new(&secret), AccountKey::new(&secret, "default", &id))
    }

    #[test]
    fn fingerprints_are_truncated_and_differ_by_list_stored_hash_and_password() {
        let (f, account) = setup();
        let phone = f.list(&account, "ip:203.0.113.7/32");
        let other = f.list(&account, "ip:198.51.100.1/32");
        let fp = |list: &RepeatKey, hash: &str, password: &[u8], bytes: u8| {
            f.fingerprint("default", list, hash, password, bytes)
        };
        let a = fp(&phone, "$2b$04$h1", b"old password", 4);
        assert!(a < 1 << 32);
        assert_eq!(a, fp(&phone, "$2b$04$h1", b"old password", 4), "deterministic");
        assert_ne!(a, fp(&other, "$2b$04$h1", b"old password", 4), "per client");
        assert_ne!(a, fp(&phone, "$2b$04$h2", b"old password", 4), "per stored hash");
        assert_ne!(a, fp(&phone, "$2b$04$h1", b"old passw0rd", 4));
        assert!(fp(&phone, "", b"x", 2) < 1 << 16);
        assert_eq!(fp(&phone, "", b"x", 8) >> 48, fp(&phone, "", b"x", 2));
        assert!(!format!("{f:?}").contains('9'));
    }
}
