//! The key check's shapes (docs/store.md, "One key secret per store"): what a check
//! does and what a refused daemon says. Each backend proves the check its own way
//! (`redis/key_check.rs` with `lua/key_check.lua` on every new connection and
//! readiness check, `embedded/key_check.rs` when the file is opened).

/// What [`super::error::StoreError::KeyCheckPending`] says: why a daemon that just started does not
/// serve yet.
pub const KEY_CHECK_PENDING: &str = "the store holds no key check value: waiting \
     store.key_check_claim_wait for the daemons already serving it to write theirs back \
     before this daemon writes its own (docs/store.md, \"One key secret per store\")";

/// What [`super::error::StoreError::KeySecretMismatch`] says, to the operator who must act on it.
pub const KEY_SECRET_MISMATCH: &str = "this daemon's key secret is not the one this store is \
     keyed with (its key check value differs), so it would count every account afresh: \
     refusing to serve. Give this daemon the same store.key_secret_file (or \
     PORTCULLIS_KEY_SECRET) as the other daemons of this store; to rotate the key secret \
     on purpose, run `portcullis adopt-key-secret` with the new one (docs/store.md, \
     \"One key secret per store\")";

/// What a key check does ([`crate::secret::KeyCheck`]; docs/store.md, "One key secret
/// per store").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyCheckMode {
    /// Writes the check value when the store has none; else compares.
    Prove,
    /// Overwrites the check value: the operator's rotation step. Every daemon keyed
    /// otherwise stops serving at its next check.
    Adopt,
}

impl KeyCheckMode {
    /// The name the store's script takes.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyCheckMode::Prove => "prove",
            KeyCheckMode::Adopt => "adopt",
        }
    }
}

/// How long a daemon that finds no key check value at start waits for the fleet to
/// write it back, by default (`store.key_check_claim_wait`): three readiness checks.
pub const DEFAULT_KEY_CHECK_CLAIM_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// How long `adopt-key-secret` keeps a Redis store closed between the old key secret and
/// the new: three readiness checks of every daemon (one a second).
pub const ROTATION_PAUSE: std::time::Duration = std::time::Duration::from_secs(3);
