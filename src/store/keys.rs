//! Every store key is built here (docs/architecture.md, "Account keys").
//!
//! An account key is `HMAC-SHA-256(secret, len(realm) ‖ realm ‖ len(id) ‖ id)` with
//! 4-byte big-endian lengths, so `("ab", "c")` and `("a", "bc")` never collide, truncated
//! to 128 bits (RFC 2104 §5: truncation to half the output keeps its strength; the key
//! secret is what keeps an attacker from making two identifiers collide). Its hex digest
//! is the Redis Cluster hash tag, so every key one operation touches is in one slot:
//!
//! ```text
//! portcullis:v2:{<32 hex digest>}:r              the attempt record (hash f, ws, st)
//! portcullis:v2:{<32 hex digest>}:a:<16 hex>     one attempt_id's answer (a retry horizon)
//! portcullis:v2:{<32 hex digest>}:d:<16 hex>     one known device's bucket (hash f, ws, st)
//! portcullis:v2:{<32 hex digest>}:e              the account's device epoch
//! ```
//!
//! Short names, because every made-up identifier an attacker tries costs one record:
//! the `v1` layout (64 hex, `:record`, `:attempt:<32 hex>`) cost 245 bytes of Redis a
//! record and 270 an attempt id; this one 209 and 225 (docs/store.md, "What a record
//! costs"). No key holds an identifier or attempt id in clear.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::normalize::NormalizedIdentifier;

/// Prefix of every key; the version changes when the layout does (v2: the compact
/// layout; a daemon of this version ignores v1 keys, which expire by themselves).
pub const KEY_PREFIX: &str = "portcullis:v2:";

/// Bytes of the account key's HMAC kept (128 bits: 32 hex characters).
const ACCOUNT_DIGEST_BYTES: usize = 16;

/// Bytes kept of an attempt id's or a device nonce's keyed digest (64 bits: 16 hex
/// characters), which only tell apart the few ids and devices of one account.
const SUFFIX_DIGEST_BYTES: usize = 8;

/// The HMAC key for account keys. Every daemon sharing a store uses the same one;
/// changing it forgets every count. `Debug` is redacted.
#[derive(Clone)]
pub struct KeySecret(Vec<u8>);

impl KeySecret {
    /// Shortest accepted secret, in bytes (the HMAC-SHA-256 output size; RFC 2104 §3).
    pub const MIN_BYTES: usize = 32;

    /// Wraps raw secret bytes. Length is checked by configuration validation.
    pub fn new(bytes: Vec<u8>) -> Self {
        Self(bytes)
    }

    /// A secret read from a file: one trailing `\n` (or `\r\n`) is not part of it.
    pub fn from_file_contents(mut bytes: Vec<u8>) -> Self {
        if bytes.ends_with(b"\n") {
            bytes.pop();
            if bytes.ends_with(b"\r") {
                bytes.pop();
            }
        }
        Self(bytes)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether the secret is empty (never valid).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC accepts keys of any length (RFC 2104), so this cannot fail.
        <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0).expect("HMAC takes any key length")
    }

    /// A 32-byte subkey for one purpose, `HMAC-SHA-256(secret, "portcullis:v1:subkey\0" ‖
    /// label)`: domain-separated from account keys (whose input starts with a 4-byte
    /// length) and from every other label, so a value made with one subkey says nothing
    /// about another. Every daemon sharing the secret derives the same subkey.
    pub fn subkey(&self, label: &str) -> [u8; 32] {
        let mut mac = self.mac();
        mac.update(b"portcullis:v1:subkey\0");
        mac.update(label.as_bytes());
        mac.finalize().into_bytes().into()
    }
}

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeySecret(<{} bytes redacted>)", self.0.len())
    }
}

/// The store's name for one account key (realm, normalized identifier): a keyed digest
/// (128 bits), in lowercase hex, used as the Redis Cluster hash tag.
///
/// A key may also name one known device's bucket of that account
/// ([`AccountKey::device`]): the same hash tag, so an operation on it stays single-slot,
/// and a record of its own, so the device is counted apart from untrusted clients.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AccountKey {
    /// Hex digest of (realm, normalized identifier): the hash tag (32 hex).
    digest: String,
    /// `None`: the account's own record; `Some(hex)`: a device bucket's digest (16 hex).
    device: Option<String>,
}

impl AccountKey {
    /// Derives the key; `realm` is the configured realm name.
    pub fn new(secret: &KeySecret, realm: &str, identifier: &NormalizedIdentifier) -> Self {
        let mut mac = secret.mac();
        for part in [realm.as_bytes(), identifier.as_str().as_bytes()] {
            // Both parts are bounded (64 and 320 bytes), far below u32::MAX.
            mac.update(&(part.len() as u32).to_be_bytes());
            mac.update(part);
        }
        let digest = mac.finalize().into_bytes();
        Self { digest: hex::encode(&digest[..ACCOUNT_DIGEST_BYTES]), device: None }
    }

    /// The bucket of one known device of this account (OWASP device cookies): its record
    /// is `portcullis:v2:{<digest>}:d:<16 hex>`, where the suffix is a keyed digest
    /// of the device token's nonce, so the stored key reveals neither the token nor the
    /// identifier. Attempt ids stay in the account's namespace: a replay is a replay in
    /// whichever bucket it first counted.
    pub fn device(&self, secret: &KeySecret, nonce: &[u8]) -> Self {
        let mut mac = secret.mac();
        // Domain separation from account keys and attempt ids.
        mac.update(b"device\0");
        mac.update(nonce);
        let digest = mac.finalize().into_bytes();
        let device = hex::encode(&digest[..SUFFIX_DIGEST_BYTES]);
        Self { digest: self.digest.clone(), device: Some(device) }
    }

    /// The record's key: `portcullis:v2:{<digest>}:r` for the account,
    /// `portcullis:v2:{<digest>}:d:<16 hex>` for a device bucket.
    pub fn record(&self) -> String {
        match &self.device {
            None => format!("{KEY_PREFIX}{{{}}}:r", self.digest),
            Some(device) => format!("{KEY_PREFIX}{{{}}}:d:{device}", self.digest),
        }
    }

    /// `portcullis:v2:{<digest>}:e`: the account's device epoch (docs/devices.md,
    /// "Revocation"), in the same hash tag as its record and device buckets.
    pub fn device_epoch(&self) -> String {
        format!("{KEY_PREFIX}{{{}}}:e", self.digest)
    }

    /// Whether this key names a device bucket rather than the account's record.
    pub fn is_device(&self) -> bool {
        self.device.is_some()
    }

    /// `portcullis:v2:{<digest>}:a:<16 hex>`: the stored answer of one `attempt_id`, in
    /// the same hash tag as the record.
    pub fn attempt(&self, secret: &KeySecret, attempt_id: &AttemptId) -> String {
        let mut mac = secret.mac();
        // Domain separation from account keys, whose first byte is a length.
        mac.update(b"attempt_id\0");
        mac.update(attempt_id.0.as_bytes());
        let digest = mac.finalize().into_bytes();
        let suffix = hex::encode(&digest[..SUFFIX_DIGEST_BYTES]);
        format!("{KEY_PREFIX}{{{}}}:a:{suffix}", self.digest)
    }

    /// The hex digest (the hash tag's contents).
    pub fn digest(&self) -> &str {
        &self.digest
    }
}

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bucket = if self.device.is_some() { ", device" } else { "" };
        write!(f, "AccountKey({}…{bucket})", &self.digest[..8])
    }
}

/// A gateway-chosen id that makes a retried attempt idempotent (docs/architecture.md): 1–128
/// bytes of printable ASCII, e.g. a UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptId(String);

/// Longest `attempt_id`, in bytes.
pub const MAX_ATTEMPT_ID_BYTES: usize = 128;

impl AttemptId {
    /// `Ok(None)` for an empty id (the attempt is not deduplicated).
    ///
    /// # Errors
    /// A message naming the field when the id is too long or not printable ASCII.
    pub fn parse(raw: &str) -> Result<Option<Self>, &'static str> {
        if raw.is_empty() {
            Ok(None)
        } else if raw.len() > MAX_ATTEMPT_ID_BYTES {
            Err("attempt_id is longer than 128 bytes")
        } else if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            Err("attempt_id must be printable ASCII without spaces")
        } else {
            Ok(Some(Self(raw.to_owned())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::normalize::{Normalization, normalize};

    fn secret() -> KeySecret {
        KeySecret::new(b"0123456789abcdef0123456789abcdef".to_vec())
    }

    fn key(realm: &str, id: &str) -> AccountKey {
        AccountKey::new(&secret(), realm, &normalize(Normalization::Exact, id).unwrap())
    }

    #[test]
    fn key_format_is_pinned() {
        let k = key("default", "alice@example.com");
        let record = k.record();
        assert_eq!(record, format!("portcullis:v2:{{{}}}:r", k.digest()));
        // Pinned (and checked with Python's hmac module: the first 128 bits of the
        // HMAC) so a change of derivation, which forgets every count, is deliberate.
        assert_eq!(k.digest(), "6213abbd6884a4636012888f626bf820");
        let id = AttemptId::parse("6f1c0f9e-3f1e-4b8e-9a55-0c0ffee00001").unwrap().unwrap();
        let attempt = k.attempt(&secret(), &id);
        assert!(attempt.starts_with(&format!("portcullis:v2:{{{}}}:a:", k.digest())));
        assert_eq!(attempt.len(), record.len() - "r".len() + "a:".len() + 16);
        assert_eq!(k.device_epoch(), format!("portcullis:v2:{{{}}}:e", k.digest()));
    }

    #[test]
    fn keys_carry_no_identifier_and_separate_realms() {
        let k = key("default", "alice@example.com");
        assert!(!k.record().contains("alice"));
        assert_ne!(key("ab", "c"), key("a", "bc"));
        assert_ne!(key("a", "b"), key("b", "a"));
        let other = KeySecret::new(b"fedcba9876543210fedcba9876543210".to_vec());
        let id = normalize(Normalization::Exact, "alice").unwrap();
        assert_ne!(AccountKey::new(&secret(), "r", &id), AccountKey::new(&other, "r", &id));
    }

    #[test]
    fn device_buckets_share_the_hash_tag_and_not_the_record() {
        let k = key("default", "alice@example.com");
        let d = k.device(&secret(), &[7; 16]);
        assert!(d.is_device() && !k.is_device());
        let record = d.record();
        assert!(record.starts_with(&format!("portcullis:v2:{{{}}}:d:", k.digest())));
        assert_eq!(record.len(), "portcullis:v2:{".len() + 32 + "}:d:".len() + 16);
        assert_ne!(record, k.record());
        assert_ne!(d, k.device(&secret(), &[8; 16]));
        let id = AttemptId::parse("x").unwrap().unwrap();
        assert_eq!(d.attempt(&secret(), &id), k.attempt(&secret(), &id));
    }

    #[test]
    fn subkeys_are_separated_by_label() {
        assert_ne!(secret().subkey("device-token"), secret().subkey("spray"));
        assert_eq!(secret().subkey("device-token"), secret().subkey("device-token"));
    }

    #[test]
    fn attempt_ids_are_validated() {
        assert_eq!(AttemptId::parse(""), Ok(None));
        assert!(AttemptId::parse(&"a".repeat(128)).unwrap().is_some());
        assert!(AttemptId::parse(&"a".repeat(129)).is_err());
        assert!(AttemptId::parse("has space").is_err());
        assert!(AttemptId::parse("ünï").is_err());
    }

    #[test]
    fn secret_file_trailing_newline_is_ignored() {
        assert_eq!(KeySecret::from_file_contents(b"abc\n".to_vec()).len(), 3);
        assert_eq!(KeySecret::from_file_contents(b"abc\r\n".to_vec()).len(), 3);
        assert!(!format!("{:?}", secret()).contains("0123"));
    }
}
