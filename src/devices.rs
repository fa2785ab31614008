//! Known devices (OWASP, "Slow Down Online Guessing Attacks with Device Cookies"): a
//! browser that once logged in to an account carries a token that tells it apart from
//! untrusted clients. `docs/devices.md` explains the protocol and its limits.
//!
//! A **device token** is issued on every `VERDICT_ACCEPT` and sent back by the gateway in
//! later `Verify` calls for the same account. A token that checks out for *this* realm and
//! account key moves the attempt to the device's own bucket
//! ([`AccountKey::device`]) and to the CPU budget's trusted lane; anything else (absent,
//! expired, forged, another account's or realm's) leaves the call untrusted, counted on
//! the account as before. Nothing here changes an answer: a wrong password is the same
//! reject whatever the token.
//!
//! Token layout (41 bytes, then unpadded base64url, RFC 4648 §5: 55 characters):
//!
//! ```text
//! version (1 byte, 1) ‖ issued_at (8 bytes, Unix seconds, big-endian) ‖ nonce (16 random bytes)
//!   ‖ tag (16 bytes: HMAC-SHA-256 truncated, RFC 2104 §5)
//! tag = HMAC-SHA-256(device key, "portcullis device token v1\0" ‖ len(realm) ‖ realm
//!                    ‖ account digest (32 bytes) ‖ version ‖ issued_at ‖ nonce)
//! ```
//!
//! The device key is [`KeySecret::subkey`]`("device-token")`, so every daemon sharing
//! the store (and so the key secret) accepts every other's tokens, and a token made with
//! it is no account key, attempt key or spray fingerprint. The token carries no
//! identifier and no digest of one: it binds to the account only through the tag. The
//! issue time is the issuing daemon's clock; a check allows [`MAX_CLOCK_SKEW`] into the
//! future for daemons whose clocks disagree.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::store::keys::{AccountKey, KeySecret};

/// Longest `device_token` a request may carry, in bytes; a longer one is
/// `INVALID_ARGUMENT` (a real token is 55 bytes).
pub const MAX_DEVICE_TOKEN_BYTES: usize = 256;

/// How far in the future a token's issue time may lie (another daemon's clock running
/// ahead) and still be accepted.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

const VERSION: u8 = 1;
const NONCE_BYTES: usize = 16;
const TAG_BYTES: usize = 16;
const TOKEN_BYTES: usize = 1 + 8 + NONCE_BYTES + TAG_BYTES;
const DOMAIN: &[u8] = b"portcullis device token v1\0";

/// Issues and checks device tokens with the key derived from the key secret.
#[derive(Clone)]
pub struct DeviceTokens {
    /// Authenticates tokens; derived from the key secret, never the secret itself.
    key: [u8; 32],
    /// Derives device bucket keys (the same secret as account keys).
    secret: KeySecret,
}

/// A token that checked out: the device's bucket of the account it was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownDevice {
    /// The device's own record, in the account's hash tag.
    pub bucket: AccountKey,
}

/// Why a device token could not be made (the system's random source failed).
#[derive(Debug, thiserror::Error)]
#[error("no random nonce for a device token: {0}")]
pub struct IssueError(String);

impl std::fmt::Debug for DeviceTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceTokens(<key redacted>)")
    }
}

impl DeviceTokens {
    /// Derives the token key from `secret`.
    pub fn new(secret: &KeySecret) -> Self {
        Self { key: secret.subkey("device-token"), secret: secret.clone() }
    }

    fn tag(&self, realm: &str, account: &AccountKey, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes any key length");
        mac.update(DOMAIN);
        // Realm names are at most 64 bytes (configuration), far below u32::MAX.
        mac.update(&(realm.len() as u32).to_be_bytes());
        mac.update(realm.as_bytes());
        mac.update(account.digest().as_bytes());
        mac.update(body);
        mac
    }

    /// A fresh token for `account` in `realm`, issued now.
    ///
    /// # Errors
    /// [`IssueError`] when the random source fails.
    pub fn issue(&self, realm: &str, account: &AccountKey) -> Result<String, IssueError> {
        self.issue_at(realm, account, SystemTime::now())
    }

    /// A fresh token issued at `issued_at` (tests make expired tokens with it).
    ///
    /// # Errors
    /// [`IssueError`] when the random source fails.
    pub fn issue_at(
        &self,
        realm: &str,
        account: &AccountKey,
        issued_at: SystemTime,
    ) -> Result<String, IssueError> {
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|e| IssueError(e.to_string()))?;
        let seconds = issued_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut token = Vec::with_capacity(TOKEN_BYTES);
        token.push(VERSION);
        token.extend_from_slice(&seconds.to_be_bytes());
        token.extend_from_slice(&nonce);
        let tag = self.tag(realm, account, &token).finalize().into_bytes();
        token.extend_from_slice(&tag[..TAG_BYTES]);
        Ok(URL_SAFE_NO_PAD.encode(token))
    }

    /// Checks `token` for `account` in `realm` at `now`: `Some` only for a token this
    /// key secret issued for exactly this realm and account key, within `ttl` of its
    /// issue time. Everything else (empty, malformed, forged, expired, issued too far in
    /// the future, another account's or realm's) is `None`: an untrusted call, never an
    /// error. The tag is compared in constant time.
    pub fn check(
        &self,
        token: &str,
        realm: &str,
        account: &AccountKey,
        ttl: Duration,
        now: SystemTime,
    ) -> Option<KnownDevice> {
        if token.is_empty() || token.len() > MAX_DEVICE_TOKEN_BYTES {
            return None;
        }
        let raw = URL_SAFE_NO_PAD.decode(token).ok()?;
        if raw.len() != TOKEN_BYTES || raw[0] != VERSION {
            return None;
        }
        let (body, tag) = raw.split_at(TOKEN_BYTES - TAG_BYTES);
        self.tag(realm, account, body).verify_truncated_left(tag).ok()?;
        let seconds = u64::from_be_bytes(body[1..9].try_into().ok()?);
        let issued = UNIX_EPOCH.checked_add(Duration::from_secs(seconds))?;
        let fresh = match now.duration_since(issued) {
            Ok(age) => age < ttl,
            Err(ahead) => ahead.duration() <= MAX_CLOCK_SKEW,
        };
        fresh.then(|| KnownDevice { bucket: account.device(&self.secret, &body[9..]) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::{Normalization, normalize};

    const TTL: Duration = Duration::from_secs(90 * 24 * 3600);

    fn secret() -> KeySecret {
        KeySecret::new(b"0123456789abcdef0123456789abcdef".to_vec())
    }

    fn account(realm: &str, id: &str) -> AccountKey {
        AccountKey::new(&secret(), realm, &normalize(Normalization::Exact, id).unwrap())
    }

    fn check(tokens: &DeviceTokens, token: &str, realm: &str, id: &str) -> Option<KnownDevice> {
        tokens.check(token, realm, &account(realm, id), TTL, SystemTime::now())
    }

    #[test]
    fn a_token_checks_out_for_its_own_account_only() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice");
        let token = tokens.issue("default", &alice).unwrap();
        assert_eq!(token.len(), 55);
        let known = check(&tokens, &token, "default", "alice").expect("own account");
        assert!(known.bucket.is_device());
        assert!(known.bucket.record().contains(alice.digest()));
        assert_eq!(check(&tokens, &token, "default", "mallory"), None);
        assert_eq!(check(&tokens, &token, "other", "alice"), None);
        let stranger = DeviceTokens::new(&KeySecret::new(vec![9; 32]));
        assert_eq!(check(&stranger, &token, "default", "alice"), None);
    }

    #[test]
    fn every_token_names_its_own_bucket() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice");
        let a = tokens.issue("default", &alice).unwrap();
        let b = tokens.issue("default", &alice).unwrap();
        assert_ne!(a, b);
        assert_ne!(
            check(&tokens, &a, "default", "alice").unwrap().bucket,
            check(&tokens, &b, "default", "alice").unwrap().bucket
        );
    }

    #[test]
    fn tampered_and_malformed_tokens_are_untrusted() {
        let tokens = DeviceTokens::new(&secret());
        let token = tokens.issue("default", &account("default", "alice")).unwrap();
        let mut raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in 0..raw.len() {
            raw[i] ^= 1;
            let bad = URL_SAFE_NO_PAD.encode(&raw);
            assert_eq!(check(&tokens, &bad, "default", "alice"), None, "byte {i}");
            raw[i] ^= 1;
        }
        for bad in ["", "x", "!!!!", &token[..54], &format!("{token}A"), &"A".repeat(300)] {
            assert_eq!(check(&tokens, bad, "default", "alice"), None, "{bad:?}");
        }
    }

    #[test]
    fn tokens_expire_after_their_ttl_and_tolerate_small_skew() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice");
        let now = SystemTime::now();
        let at = |t: SystemTime| tokens.issue_at("default", &alice, t).unwrap();
        let ok = |token: &str| tokens.check(token, "default", &alice, TTL, now).is_some();
        assert!(ok(&at(now - TTL + Duration::from_secs(60))));
        assert!(!ok(&at(now - TTL - Duration::from_secs(1))));
        assert!(ok(&at(now + MAX_CLOCK_SKEW - Duration::from_secs(1))));
        assert!(!ok(&at(now + MAX_CLOCK_SKEW + Duration::from_secs(60))));
    }

    #[test]
    fn tokens_carry_no_identifier_or_digest() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice@example.com");
        let token = tokens.issue("default", &alice).unwrap();
        let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        let digest = hex::decode(alice.digest()).unwrap();
        assert!(!token.contains("alice"));
        assert!(!raw.windows(8).any(|w| digest.windows(8).any(|d| d == w)));
        // Debug shows no key material in any form (hex or a derived byte list).
        assert_eq!(format!("{tokens:?}"), "DeviceTokens(<key redacted>)");
    }
}
