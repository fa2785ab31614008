//! The key secret (docs/architecture.md, "Account keys") and the sub-keys derived from it.
//! One secret keys every account key, attempt id and device bucket (`store::keys`), and,
//! through purpose-bound sub-keys, the device tokens (`devices`), the password
//! fingerprints of spray detection (`spray`) and of refused passwords (`repeat`). Every
//! daemon sharing a store uses the same secret; changing it forgets every count and
//! untrusts every device token.
//!
//! It comes from configuration (`store.key_secret_file` or `PORTCULLIS_KEY_SECRET`,
//! `crate::store::config`), or, for the embedded store when none is configured, from the
//! data directory, where [`KeySecret::load_or_generate`] makes one on first start.

use std::path::{Path, PathBuf};

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// File name of the generated key secret inside the data directory (mode 0600).
pub const SECRET_FILE: &str = "key_secret";

/// The HMAC key for account keys. Every daemon sharing a store uses the same one;
/// changing it forgets every count. `Debug` is redacted.
#[derive(Clone)]
pub struct KeySecret(Vec<u8>);

/// HMAC-SHA-256 under `key`: the secret itself (`KeySecret::mac`) or one of its
/// sub-keys ([`KeySecret::subkey`]).
pub fn keyed_mac(key: &[u8]) -> Hmac<Sha256> {
    // HMAC accepts keys of any length (RFC 2104), so this cannot fail.
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length")
}

/// Adds `part` to `mac` after its length (4 bytes, big-endian), so that consecutive
/// parts cannot run into each other. Every part a caller frames is bounded far below
/// `u32::MAX` (a realm name, an identifier, a store key, a stored hash within its
/// ceiling).
pub fn update_framed(mac: &mut Hmac<Sha256>, part: &[u8]) {
    mac.update(&(part.len() as u32).to_be_bytes());
    mac.update(part);
}

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

    /// Fewest distinct byte values a key secret may have.
    pub const MIN_DISTINCT_BYTES: usize = 8;

    /// Least information a key secret may carry, in bits, by the count of its byte
    /// values (length × the Shannon entropy of its byte frequencies). 32 random hex
    /// digits carry about 110; 40 spaces, or a byte repeated with a few others, far less.
    pub const MIN_ENTROPY_BITS: f64 = 64.0;

    /// Why this secret is too predictable to key the store, or `None`: fewer than
    /// [`Self::MIN_DISTINCT_BYTES`] distinct bytes (40 spaces, 32 NUL bytes, a word
    /// repeated), or less than [`Self::MIN_ENTROPY_BITS`] by its byte counts (one byte
    /// repeated with a few others). Says only counts, never a byte of the secret.
    pub fn weakness(&self) -> Option<String> {
        let mut counts = [0usize; 256];
        for &b in &self.0 {
            counts[usize::from(b)] += 1;
        }
        let distinct = counts.iter().filter(|&&n| n > 0).count();
        if distinct < Self::MIN_DISTINCT_BYTES {
            return Some(format!(
                "it has {distinct} distinct byte values, and it must have at least {}",
                Self::MIN_DISTINCT_BYTES
            ));
        }
        #[allow(clippy::cast_precision_loss, reason = "lengths far below 2^52")]
        let len = self.0.len() as f64;
        #[allow(clippy::cast_precision_loss, reason = "counts far below 2^52")]
        let bits: f64 = counts
            .iter()
            .filter(|&&n| n > 0)
            .map(|&n| {
                let p = n as f64 / len;
                -p * p.log2() * len
            })
            .sum();
        (bits < Self::MIN_ENTROPY_BITS).then(|| {
            format!(
                "its bytes carry about {bits:.0} bits by their frequencies, and it must carry \
                 at least {:.0}",
                Self::MIN_ENTROPY_BITS
            )
        })
    }

    /// Whether the secret is empty (never valid).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// HMAC-SHA-256 keyed with the secret itself: account keys and their suffixes
    /// (`store::keys`) only; every other purpose takes a [`SubKey`].
    pub(crate) fn mac(&self) -> Hmac<Sha256> {
        keyed_mac(&self.0)
    }

    /// The 32-byte sub-key of `purpose`, `HMAC-SHA-256(secret, "portcullis:v1:subkey\0" ‖
    /// label)`: domain-separated from account keys (whose input starts with a 4-byte
    /// length) and from every other purpose, so a value made with one sub-key says
    /// nothing about another. Every daemon sharing the secret derives the same sub-key.
    pub fn subkey(&self, purpose: SubKey) -> [u8; 32] {
        let mut mac = self.mac();
        mac.update(b"portcullis:v1:subkey\0");
        mac.update(purpose.label().as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// The check value the store keeps for this secret ([`KeyCheck`]).
    pub fn store_check(&self) -> KeyCheck {
        KeyCheck(hex::encode(self.subkey(SubKey::StoreCheck)))
    }

    /// The data directory's secret: read from `data_dir/key_secret`, or, on first start,
    /// 32 random bytes written there in hex (mode 0600, the directory owner-only),
    /// with a warning to back it up (losing it forgets every count).
    ///
    /// # Errors
    /// [`SecretError`] naming the path: the directory cannot be created, the file cannot
    /// be read or written.
    pub fn load_or_generate(data_dir: &Path) -> Result<Self, SecretError> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(data_dir)
            .map_err(|source| SecretError::DataDir { path: data_dir.to_owned(), source })?;
        let path = data_dir.join(SECRET_FILE);
        let err = |source| SecretError::File { path: path.clone(), source };
        match std::fs::read(&path) {
            Ok(bytes) => return Ok(Self::from_file_contents(bytes)),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(err(e)),
            Err(_) => {}
        }
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(|e| err(std::io::Error::other(e.to_string())))?;
        let text = hex::encode(raw);
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&path).map_err(err)?;
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(err)?;
        file.sync_all().map_err(err)?;
        // Its value is never logged; its existence matters: losing the file forgets every count.
        tracing::warn!(path = %path.display(), "generated a new key secret: back it up with the data directory");
        Ok(Self::new(text.into_bytes()))
    }
}

/// The keyed check value a store keeps so that every daemon sharing it proves it holds
/// the same key secret before it serves (docs/store.md, "One key secret per store"):
/// the secret's [`SubKey::StoreCheck`] sub-key, 64 hex digits. It serves no other
/// purpose, so the value says nothing about the secret or any other sub-key (HMAC is a
/// pseudo-random function); it is not the secret, nor an unkeyed digest of it. Two
/// secrets give two values, so a daemon keyed differently finds another value there.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyCheck(String);

impl KeyCheck {
    /// The value as stored: 64 lowercase hex digits.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value that closes a store to every key secret while it is rotated
    /// (`portcullis adopt-key-secret`): 64 zeros, which no key secret's sub-key is (an
    /// HMAC-SHA-256 output of all zeros has probability 2^-256).
    pub fn closed() -> Self {
        KeyCheck("0".repeat(64))
    }

    /// Whether `stored` (what the store holds) is this value, compared in constant time.
    pub fn matches(&self, stored: &[u8]) -> bool {
        use subtle::ConstantTimeEq;
        stored.len() == self.0.len() && bool::from(stored.ct_eq(self.0.as_bytes()))
    }
}

impl std::fmt::Debug for KeyCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyCheck(<redacted>)")
    }
}

impl std::fmt::Debug for KeySecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeySecret(<{} bytes redacted>)", self.0.len())
    }
}

/// What a sub-key of the key secret is for ([`KeySecret::subkey`]). Each purpose has its
/// own, so no value made for one says anything about another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubKey {
    /// Device tokens' tags (`crate::defence::devices`).
    DeviceToken,
    /// Password fingerprints of spray detection (`crate::defence::spray`).
    Spray,
    /// Fingerprints of refused passwords, per account and client (`crate::defence::repeats`).
    Repeat,
    /// The store's key check value ([`KeySecret::store_check`]).
    StoreCheck,
}

impl SubKey {
    /// The label the sub-key is derived with; fixed, since changing it changes every
    /// value made with the sub-key.
    fn label(self) -> &'static str {
        match self {
            SubKey::DeviceToken => "device-token",
            SubKey::Spray => "spray",
            SubKey::Repeat => "repeat",
            SubKey::StoreCheck => "store-check",
        }
    }
}

/// Why the data directory's key secret could not be had. Names the path, never the
/// secret.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("data directory {path:?} cannot be created or written")]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("key secret file {path:?} cannot be read or created")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> KeySecret {
        KeySecret::new(b"0123456789abcdef0123456789abcdef".to_vec())
    }

    #[test]
    fn subkeys_are_separated_by_purpose() {
        assert_ne!(secret().subkey(SubKey::DeviceToken), secret().subkey(SubKey::Spray));
        assert_eq!(secret().subkey(SubKey::DeviceToken), secret().subkey(SubKey::DeviceToken));
    }

    #[test]
    fn the_store_check_differs_by_secret_and_from_every_other_subkey() {
        let check = secret().store_check();
        assert_eq!(check.as_str().len(), 64);
        assert!(check.matches(secret().store_check().as_str().as_bytes()));
        let other = KeySecret::new(b"0123456789abcdef0123456789abcdeF".to_vec()).store_check();
        assert!(!check.matches(other.as_str().as_bytes()));
        assert!(!check.matches(&check.as_str().as_bytes()[..63]));
        for purpose in [SubKey::DeviceToken, SubKey::Spray, SubKey::Repeat] {
            assert_ne!(check.as_str(), hex::encode(secret().subkey(purpose)));
        }
        assert!(!check.as_str().contains(&hex::encode(b"0123456789abcdef")));
        assert!(!format!("{check:?}").contains(&check.as_str()[..8]));
    }

    #[test]
    fn secret_file_trailing_newline_is_ignored() {
        assert_eq!(KeySecret::from_file_contents(b"abc\n".to_vec()).len(), 3);
        assert_eq!(KeySecret::from_file_contents(b"abc\r\n".to_vec()).len(), 3);
        assert!(!format!("{:?}", secret()).contains("0123"));
    }

    #[test]
    fn a_generated_secret_is_kept_owner_only() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let first = KeySecret::load_or_generate(&data).unwrap();
        assert_eq!(first.len(), 64);
        let again = KeySecret::load_or_generate(&data).unwrap();
        assert_eq!(again.subkey(SubKey::Spray), first.subkey(SubKey::Spray));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(data.join(SECRET_FILE)).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
