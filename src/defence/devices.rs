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
//! Token layout (45 bytes, then unpadded base64url, RFC 4648 §5: 60 characters):
//!
//! ```text
//! version (1 byte, 2) ‖ issued_at (8 bytes, Unix seconds, big-endian)
//!   ‖ device epoch (4 bytes, big-endian) ‖ nonce (16 random bytes)
//!   ‖ tag (16 bytes: HMAC-SHA-256 truncated, RFC 2104 §5)
//! tag = HMAC-SHA-256(device key, "portcullis device token v2\0" ‖ len(realm) ‖ realm
//!                    ‖ account digest ‖ len(stored hash) ‖ stored hash
//!                    ‖ version ‖ issued_at ‖ device epoch ‖ nonce)
//! ```
//!
//! A token vouches for the **credential** it was issued against: the stored hash the
//! gateway sent with the accepted password is inside the tag, so once the gateway
//! presents another stored hash (the user changed the password, say because the device
//! was stolen) the token checks out no more. And it vouches only while the account's
//! **device epoch** is the one it carries: an operator's `RevokeDevices` (or an
//! `Unlock` for a mitigated attack) raises the epoch in the store, and the count then
//! puts every older token's attempt on the account's own record (docs/devices.md,
//! "Revocation"). Version-1 tokens (before this binding) are untrusted.
//!
//! A **challenge token** (docs/devices.md, "Step-up for unknown devices") has the same
//! layout with version byte 67 (`C`) and the domain `"portcullis challenge token v1\0"`:
//! a realm whose `unknown_device = "step_up"` answers a right password without a valid
//! device token with `VERDICT_CHALLENGE` and one of these instead of a device token;
//! `ConfirmDevice` exchanges it, within [`CHALLENGE_TTL`] and for the same realm,
//! account and stored hash, for a device token under the account's device epoch as the
//! store holds it then. A challenge token's epoch field is the account's device epoch
//! when it was issued: a revocation since (a higher epoch) voids it. Its nonce names its
//! one-use mark in the store ([`AccountKey::challenge`]), so it confirms one device,
//! once. Neither kind passes for the other.
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
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::secret::KeySecret;
use crate::secret::{keyed_mac, update_framed};
use crate::setting::{Problems, check};
use crate::store::keys::AccountKey;

/// Longest `device_token` a request may carry, in bytes; a longer one is
/// `INVALID_ARGUMENT` (a real token is 60 bytes).
pub const MAX_DEVICE_TOKEN_BYTES: usize = 256;

/// How far in the future a token's issue time may lie (another daemon's clock running
/// ahead) and still be accepted.
pub const MAX_CLOCK_SKEW: Duration = Duration::from_secs(300);

const VERSION: u8 = 2;
const NONCE_BYTES: usize = 16;
const TAG_BYTES: usize = 16;
/// Offsets in a token: version, issue time, epoch, nonce.
const EPOCH_AT: usize = 1 + 8;
const NONCE_AT: usize = EPOCH_AT + 4;
const TOKEN_BYTES: usize = NONCE_AT + NONCE_BYTES + TAG_BYTES;
const DOMAIN: &[u8] = b"portcullis device token v2\0";
/// A challenge token's version byte and domain (module docs).
const CHALLENGE_VERSION: u8 = b'C';
const CHALLENGE_DOMAIN: &[u8] = b"portcullis challenge token v1\0";

/// How long a challenge token may be exchanged for a device token (`ConfirmDevice`)
/// after the `VERDICT_CHALLENGE` that issued it: long enough to read a mailed code,
/// short enough that a leaked one is soon worthless.
pub const CHALLENGE_TTL: Duration = Duration::from_secs(15 * 60);

/// `realms.REALM.device_token_ttl`, checked where it is used: 60 s – 366 days (a token
/// outliving a year would outlive every expiry the stores compute). A problem is noted
/// in `problems`, naming the setting.
pub fn checked_token_ttl(realm: &str, ttl: Duration, problems: &mut Problems) -> Duration {
    let year = Duration::from_secs(366 * 24 * 3600);
    let setting = format!("realms.{realm}.device_token_ttl");
    problems.note(check(&setting, ttl, Duration::from_secs(60)..=year));
    ttl
}

/// `realms.NAME.unknown_device`: what a right password without a valid device token of
/// the account gets (docs/devices.md, "Step-up for unknown devices").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnknownDevice {
    /// `VERDICT_ACCEPT` with a fresh device token, as for a known device. The default:
    /// the daemon cannot know whether a gateway has a channel for a second factor.
    #[default]
    Allow,
    /// `VERDICT_CHALLENGE` (reason `NEW_DEVICE`) with a challenge token and no device
    /// token; `ConfirmDevice` after the gateway's challenge passed issues the device
    /// token (Clerk, Auth0 "NewDevice" and Cognito ask the same).
    StepUp,
}

/// Issues and checks device tokens with the key derived from the key secret.
#[derive(Clone)]
pub struct DeviceTokens {
    /// Authenticates tokens; derived from the key secret, never the secret itself.
    key: [u8; 32],
    /// Derives device bucket keys (the same secret as account keys).
    secret: KeySecret,
}

/// A token that checked out: the device's bucket of the account it was issued for, and
/// the device epoch it carries (the store decides whether that is still current).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownDevice {
    /// The device's own record, in the account's hash tag.
    pub bucket: AccountKey,
    /// The account's device epoch when the token was issued.
    pub epoch: u64,
}

/// A challenge token that checked out ([`DeviceTokens::check_challenge`]): what
/// `ConfirmDevice` still asks the store (docs/devices.md, "Step-up for unknown devices").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// Where its one use is marked: a keyed digest of its nonce, in the account's hash
    /// tag ([`AccountKey::challenge`]).
    pub used: AccountKey,
    /// The account's device epoch when it was issued: it confirms only while that is
    /// still the account's epoch.
    pub epoch: u64,
}

/// What a device token vouches for: an account key of a realm, and the credential (the
/// stored hash) the password matched.
#[derive(Debug, Clone, Copy)]
pub struct Grant<'a> {
    /// The configured realm name.
    pub realm: &'a str,
    /// The account key.
    pub account: &'a AccountKey,
    /// The stored hash (PHC string or bcrypt hash) the gateway sent; never stored or
    /// logged, only authenticated inside the token's tag.
    pub stored_hash: &'a str,
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
        Self { key: secret.subkey(crate::secret::SubKey::DeviceToken), secret: secret.clone() }
    }

    fn tag(&self, domain: &[u8], grant: &Grant<'_>, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = keyed_mac(&self.key);
        mac.update(domain);
        // Realm names are at most 64 bytes (configuration), stored hashes far below
        // u32::MAX (the request's size limit).
        update_framed(&mut mac, grant.realm.as_bytes());
        mac.update(grant.account.digest().as_bytes());
        update_framed(&mut mac, grant.stored_hash.as_bytes());
        mac.update(body);
        mac
    }

    /// A fresh token for `grant`, issued now under device epoch `epoch` (the account's
    /// current one, as the count read it).
    ///
    /// # Errors
    /// [`IssueError`] when the random source fails.
    pub fn issue(&self, grant: &Grant<'_>, epoch: u64) -> Result<String, IssueError> {
        self.issue_at(grant, epoch, SystemTime::now())
    }

    /// A fresh token issued at `issued_at` (tests make expired tokens with it).
    ///
    /// # Errors
    /// [`IssueError`] when the random source fails or `epoch` does not fit 32 bits.
    pub fn issue_at(
        &self,
        grant: &Grant<'_>,
        epoch: u64,
        issued_at: SystemTime,
    ) -> Result<String, IssueError> {
        self.mint((VERSION, DOMAIN), grant, epoch, issued_at)
    }

    /// The credential `grant` names, as the breached count binds to it
    /// ([`AccountKey::credential`]).
    pub fn credential(&self, grant: &Grant<'_>) -> u64 {
        grant.account.credential(&self.secret, grant.stored_hash)
    }

    /// A challenge token for `grant` (module docs), issued under the account's device
    /// epoch `epoch` as the count read it: what a step-up realm answers a right password
    /// from an unknown device with.
    ///
    /// # Errors
    /// [`IssueError`] when the random source fails or `epoch` does not fit 32 bits.
    pub fn issue_challenge(&self, grant: &Grant<'_>, epoch: u64) -> Result<String, IssueError> {
        self.mint((CHALLENGE_VERSION, CHALLENGE_DOMAIN), grant, epoch, SystemTime::now())
    }

    /// `token` if it is a challenge token of this key secret for exactly this realm,
    /// account key and stored hash, younger than [`CHALLENGE_TTL`] at `now` (a device
    /// token, or anything else, is not): its one-use mark and the epoch it was issued
    /// under, which the store still has to accept.
    pub fn check_challenge(
        &self,
        token: &str,
        grant: &Grant<'_>,
        now: SystemTime,
    ) -> Option<Challenge> {
        let body =
            self.open((CHALLENGE_VERSION, CHALLENGE_DOMAIN), token, grant, CHALLENGE_TTL, now)?;
        let epoch = u32::from_be_bytes(body[EPOCH_AT..NONCE_AT].try_into().ok()?);
        Some(Challenge {
            used: grant.account.challenge(&self.secret, &body[NONCE_AT..]),
            epoch: u64::from(epoch),
        })
    }

    /// A token of kind `(version, domain)`: the layout of the module docs.
    fn mint(
        &self,
        (version, domain): (u8, &[u8]),
        grant: &Grant<'_>,
        epoch: u64,
        issued_at: SystemTime,
    ) -> Result<String, IssueError> {
        let epoch =
            u32::try_from(epoch).map_err(|_| IssueError("device epoch over 2^32".into()))?;
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|e| IssueError(e.to_string()))?;
        let seconds = issued_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let mut token = Vec::with_capacity(TOKEN_BYTES);
        token.push(version);
        token.extend_from_slice(&seconds.to_be_bytes());
        token.extend_from_slice(&epoch.to_be_bytes());
        token.extend_from_slice(&nonce);
        let tag = self.tag(domain, grant, &token).finalize().into_bytes();
        token.extend_from_slice(&tag[..TAG_BYTES]);
        Ok(URL_SAFE_NO_PAD.encode(token))
    }

    /// Checks `token` for `grant` at `now`: `Some` only for a token this key secret
    /// issued for exactly this realm, account key and stored hash, within `ttl` of its
    /// issue time. Everything else (empty, malformed, forged, expired, issued too far in
    /// the future, another account's, realm's or credential's, a version-1 token) is
    /// `None`: an untrusted call, never an error. The tag is compared in constant time.
    /// Whether the token's device epoch is still the account's is the store's to say
    /// ([`crate::store::attempt_count::Attempt::device`]).
    pub fn check(
        &self,
        token: &str,
        grant: &Grant<'_>,
        ttl: Duration,
        now: SystemTime,
    ) -> Option<KnownDevice> {
        let body = self.open((VERSION, DOMAIN), token, grant, ttl, now)?;
        let epoch = u32::from_be_bytes(body[EPOCH_AT..NONCE_AT].try_into().ok()?);
        Some(KnownDevice {
            bucket: grant.account.device(&self.secret, &body[NONCE_AT..]),
            epoch: u64::from(epoch),
        })
    }

    /// The body of a token of kind `(version, domain)` that checks out for `grant` and
    /// is younger than `ttl` at `now`; `None` otherwise. The tag is compared in constant
    /// time.
    fn open(
        &self,
        (version, domain): (u8, &[u8]),
        token: &str,
        grant: &Grant<'_>,
        ttl: Duration,
        now: SystemTime,
    ) -> Option<Vec<u8>> {
        if token.is_empty() || token.len() > MAX_DEVICE_TOKEN_BYTES || grant.stored_hash.is_empty()
        {
            return None;
        }
        let mut raw = URL_SAFE_NO_PAD.decode(token).ok()?;
        if raw.len() != TOKEN_BYTES || raw[0] != version {
            return None;
        }
        let (body, tag) = raw.split_at(TOKEN_BYTES - TAG_BYTES);
        self.tag(domain, grant, body).verify_truncated_left(tag).ok()?;
        let seconds = u64::from_be_bytes(body[1..EPOCH_AT].try_into().ok()?);
        let issued = UNIX_EPOCH.checked_add(Duration::from_secs(seconds))?;
        let fresh = match now.duration_since(issued) {
            Ok(age) => age < ttl,
            Err(ahead) => ahead.duration() <= MAX_CLOCK_SKEW,
        };
        raw.truncate(TOKEN_BYTES - TAG_BYTES);
        fresh.then_some(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::{Normalization, normalize};

    const TTL: Duration = Duration::from_secs(90 * 24 * 3600);
    const HASH: &str = "$2b$04$0123456789012345678901uX6mlVUI1D4p.w3Xq1bUq3wCDiE5kK2";

    fn secret() -> KeySecret {
        KeySecret::new(b"0123456789abcdef0123456789abcdef".to_vec())
    }

    fn account(realm: &str, id: &str) -> AccountKey {
        AccountKey::new(&secret(), realm, &normalize(Normalization::Exact, id).unwrap())
    }

    fn check_with(
        tokens: &DeviceTokens,
        token: &str,
        realm: &str,
        id: &str,
        hash: &str,
    ) -> Option<KnownDevice> {
        let account = account(realm, id);
        let grant = Grant { realm, account: &account, stored_hash: hash };
        tokens.check(token, &grant, TTL, SystemTime::now())
    }

    fn check(tokens: &DeviceTokens, token: &str, realm: &str, id: &str) -> Option<KnownDevice> {
        check_with(tokens, token, realm, id, HASH)
    }

    fn issue(tokens: &DeviceTokens, realm: &str, account: &AccountKey, epoch: u64) -> String {
        tokens.issue(&Grant { realm, account, stored_hash: HASH }, epoch).unwrap()
    }

    #[test]
    fn a_token_checks_out_for_its_own_account_and_credential_only() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice");
        let token = issue(&tokens, "default", &alice, 0);
        assert_eq!(token.len(), 60);
        let known = check(&tokens, &token, "default", "alice").expect("own account");
        assert!(known.bucket.is_device());
        assert_eq!(known.epoch, 0);
        assert!(known.bucket.record().contains(alice.digest()));
        assert_eq!(check(&tokens, &token, "default", "mallory"), None);
        assert_eq!(check(&tokens, &token, "other", "alice"), None);
        let stranger = DeviceTokens::new(&KeySecret::new(vec![9; 32]));
        assert_eq!(check(&stranger, &token, "default", "alice"), None);
        // Another stored hash (the password was changed, or rehashed): untrusted.
        let changed = "$2b$04$0123456789012345678901uX6mlVUI1D4p.w3Xq1bUq3wCDiE5kK3";
        assert_eq!(check_with(&tokens, &token, "default", "alice", changed), None);
        assert_eq!(check_with(&tokens, &token, "default", "alice", ""), None);
    }

    #[test]
    fn a_challenge_token_is_no_device_token_and_binds_like_one() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice");
        let grant = Grant { realm: "default", account: &alice, stored_hash: HASH };
        let challenge = tokens.issue_challenge(&grant, 3).unwrap();
        let checked = tokens.check_challenge(&challenge, &grant, SystemTime::now()).unwrap();
        assert_eq!(checked.epoch, 3, "issued under epoch 3");
        let again = tokens.issue_challenge(&grant, 3).unwrap();
        let other_use = tokens.check_challenge(&again, &grant, SystemTime::now()).unwrap().used;
        assert_ne!(checked.used.record(), other_use.record(), "each challenge its own mark");
        assert!(!checked.used.record().contains("alice"));
        assert_eq!(check(&tokens, &challenge, "default", "alice"), None, "not a device token");
        let device = issue(&tokens, "default", &alice, 0);
        assert!(tokens.check_challenge(&device, &grant, SystemTime::now()).is_none());
        let bob = account("default", "bob");
        let other = Grant { realm: "default", account: &bob, stored_hash: HASH };
        assert!(tokens.check_challenge(&challenge, &other, SystemTime::now()).is_none());
        let changed = Grant { stored_hash: "$2b$04$other", ..grant };
        assert!(tokens.check_challenge(&challenge, &changed, SystemTime::now()).is_none());
        let later = SystemTime::now() + CHALLENGE_TTL + Duration::from_secs(1);
        assert!(tokens.check_challenge(&challenge, &grant, later).is_none(), "expired");
    }

    #[test]
    fn a_token_carries_the_epoch_it_was_issued_under() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice");
        let token = issue(&tokens, "default", &alice, 7);
        assert_eq!(check(&tokens, &token, "default", "alice").unwrap().epoch, 7);
        let grant = Grant { realm: "default", account: &alice, stored_hash: HASH };
        assert!(tokens.issue(&grant, u64::from(u32::MAX) + 1).is_err());
    }

    #[test]
    fn every_token_names_its_own_bucket() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice");
        let a = issue(&tokens, "default", &alice, 0);
        let b = issue(&tokens, "default", &alice, 0);
        assert_ne!(a, b);
        assert_ne!(
            check(&tokens, &a, "default", "alice").unwrap().bucket,
            check(&tokens, &b, "default", "alice").unwrap().bucket
        );
    }

    #[test]
    fn tampered_malformed_and_version_1_tokens_are_untrusted() {
        let tokens = DeviceTokens::new(&secret());
        let token = issue(&tokens, "default", &account("default", "alice"), 0);
        let mut raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        for i in 0..raw.len() {
            raw[i] ^= 1;
            let bad = URL_SAFE_NO_PAD.encode(&raw);
            assert_eq!(check(&tokens, &bad, "default", "alice"), None, "byte {i}");
            raw[i] ^= 1;
        }
        for bad in ["", "x", "!!!!", &token[..59], &format!("{token}A"), &"A".repeat(300)] {
            assert_eq!(check(&tokens, bad, "default", "alice"), None, "{bad:?}");
        }
        // A well-formed 41-byte version-1 token (before the credential binding).
        let mut v1 = vec![1u8];
        v1.extend_from_slice(&[0; 40]);
        assert_eq!(check(&tokens, &URL_SAFE_NO_PAD.encode(v1), "default", "alice"), None);
    }

    #[test]
    fn tokens_expire_after_their_ttl_and_tolerate_small_skew() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice");
        let grant = Grant { realm: "default", account: &alice, stored_hash: HASH };
        let now = SystemTime::now();
        let at = |t: SystemTime| tokens.issue_at(&grant, 0, t).unwrap();
        let ok = |token: &str| tokens.check(token, &grant, TTL, now).is_some();
        assert!(ok(&at(now - TTL + Duration::from_secs(60))));
        assert!(!ok(&at(now - TTL - Duration::from_secs(1))));
        assert!(ok(&at(now + MAX_CLOCK_SKEW - Duration::from_secs(1))));
        assert!(!ok(&at(now + MAX_CLOCK_SKEW + Duration::from_secs(60))));
    }

    #[test]
    fn tokens_carry_no_identifier_digest_or_hash() {
        let tokens = DeviceTokens::new(&secret());
        let alice = account("default", "alice@example.com");
        let token = issue(&tokens, "default", &alice, 0);
        let raw = URL_SAFE_NO_PAD.decode(&token).unwrap();
        let digest = hex::decode(alice.digest()).unwrap();
        assert!(!token.contains("alice"));
        assert!(!raw.windows(8).any(|w| digest.windows(8).any(|d| d == w)));
        assert!(!raw.windows(8).any(|w| HASH.as_bytes().windows(8).any(|d| d == w)));
        // Debug shows no key material in any form (hex or a derived byte list).
        assert_eq!(format!("{tokens:?}"), "DeviceTokens(<key redacted>)");
    }
}
