//! The key check on Redis (docs/store.md, "One key secret per store"): every new
//! connection proves the daemon's key secret before the pool hands it out (so a
//! reconnect after a restart, a failover or a dropped socket proves it again), and every
//! readiness check proves it once more (so a rotation by `portcullis adopt-key-secret`,
//! or a cluster node that lost the value, is seen within a health interval). While the
//! last proof found another value, every operation is refused
//! ([`StoreError::KeySecretMismatch`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::{ErrorKind, RedisError};

use super::scripts::key_check;
use crate::secret::KeyCheck;
use crate::store::error::StoreError;
use crate::store::key_check::{KEY_CHECK_PENDING, KEY_SECRET_MISMATCH, KeyCheckMode};
use crate::store::keys::KEY_CHECK;

/// One store's key check: the value this daemon proves (none: a store opened without
/// one, by tests and tools that write nothing a daemon reads), and the last outcome.
#[derive(Default)]
pub(super) struct KeyProof {
    /// Set once by [`super::RedisStore::with_key_check`], before the first connection.
    check: OnceLock<KeyCheck>,
    /// How long a daemon that has never proven its value waits, once it finds none in
    /// the store, before it writes its own ([`super::RedisStore::with_claim_wait`]):
    /// a store just flushed is claimed back by the daemons already serving it (each
    /// writes its value again at its next readiness check), never by a daemon that
    /// starts keyed otherwise. In ms; 0: at once.
    claim_wait_ms: AtomicU64,
    /// When this daemon, never proven yet, first found no value in the store.
    empty_since: Mutex<Option<Instant>>,
    /// Set for good once a proof matched: from then on a store that lost its value gets
    /// this daemon's back at once (it serves the fleet that value belongs to).
    proven: AtomicBool,
    /// Set while the last proof found another daemon's value.
    mismatch: AtomicBool,
    /// Set while this daemon waits for the fleet to write the value back
    /// (`claim_wait`).
    pending: AtomicBool,
    /// Set for good once a proof found another value: from then on this daemon never
    /// writes its own into a store that holds none (after a `DEL` or a flush, a daemon
    /// that was refused must not claim the store from the others); only
    /// `portcullis adopt-key-secret` makes it serve.
    seen_other: AtomicBool,
}

/// What one proof found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Proof {
    /// The store holds this daemon's value: it serves.
    Held,
    /// The store holds another value (or nothing after this daemon saw another): refused.
    Other,
    /// The store holds no value and this daemon, never proven, waits for the fleet to
    /// write it back before it writes its own: refused for now.
    Pending,
}

impl KeyProof {
    /// Sets the value to prove; a second call changes nothing.
    pub fn set(&self, check: KeyCheck) {
        let _ = self.check.set(check);
    }

    /// Sets how long an unproven daemon waits before it claims an empty store.
    pub fn set_claim_wait(&self, wait: Duration) {
        self.claim_wait_ms.store(crate::throttle::duration_ms(wait), Ordering::Relaxed);
    }

    /// Whether the last proof found another value.
    pub fn refused(&self) -> bool {
        self.mismatch.load(Ordering::Relaxed)
    }

    /// Runs the key check in `mode` on `conn` when a value is set (a `GET`, and
    /// `key_check.lua` only when the store holds none and this daemon may write its
    /// value), and records the outcome.
    ///
    /// # Errors
    /// The script's [`RedisError`] (the outcome is then left as it was).
    pub async fn run<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        mode: KeyCheckMode,
    ) -> Result<Proof, RedisError> {
        let Some(check) = self.check.get() else {
            return Ok(Proof::Held);
        };
        // A read first: the script, which writes, is needed only while the store holds no
        // value (its first daemon, or a store that lost its data), so a readiness check
        // costs one GET, as cheap as the PING it sits beside.
        let read = match mode {
            KeyCheckMode::Prove => redis::cmd("GET").arg(KEY_CHECK).query_async(conn).await,
            KeyCheckMode::Adopt => Ok(None),
        };
        let held: Option<Vec<u8>> = match read {
            Ok(held) => held,
            // Another type there: no daemon's value, so a refusal, never an error that
            // leaves the last outcome (and the serving) as it was.
            Err(e) if is_wrong_type(&e) => {
                self.refuse_for_good();
                return Ok(Proof::Other);
            }
            Err(e) => return Err(e),
        };
        let held = match held {
            Some(held) => held,
            None if self.seen_other.load(Ordering::Relaxed) => {
                self.refuse_for_good();
                return Ok(Proof::Other);
            }
            None if mode == KeyCheckMode::Prove && self.must_wait() => {
                self.pending.store(true, Ordering::Relaxed);
                return Ok(Proof::Pending);
            }
            None => invoke(conn, check, mode).await?,
        };
        self.pending.store(false, Ordering::Relaxed);
        if check.matches(&held) {
            self.proven.store(true, Ordering::Relaxed);
            self.mismatch.store(false, Ordering::Relaxed);
            Ok(Proof::Held)
        } else {
            self.refuse_for_good();
            Ok(Proof::Other)
        }
    }

    /// Whether a daemon that finds no value must wait before it writes its own: never
    /// proven, and less than `claim_wait` since it first found the store empty.
    fn must_wait(&self) -> bool {
        if self.proven.load(Ordering::Relaxed) {
            return false;
        }
        let wait = Duration::from_millis(self.claim_wait_ms.load(Ordering::Relaxed));
        let mut since = self.empty_since.lock().unwrap_or_else(PoisonError::into_inner);
        let since = *since.get_or_insert_with(Instant::now);
        since.elapsed() < wait
    }

    fn refuse_for_good(&self) {
        self.seen_other.store(true, Ordering::Relaxed);
        self.mismatch.store(true, Ordering::Relaxed);
        self.pending.store(false, Ordering::Relaxed);
    }

    /// As [`Self::run`] for a new connection: anything but [`Proof::Held`] is an error,
    /// so the pool does not hand the connection out.
    pub async fn on_connect<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> Result<(), RedisError> {
        match self.run(conn, KeyCheckMode::Prove).await? {
            Proof::Held => Ok(()),
            Proof::Other => Err(RedisError::from((
                ErrorKind::Client,
                "key check failed",
                KEY_SECRET_MISMATCH.into(),
            ))),
            Proof::Pending => Err(RedisError::from((
                ErrorKind::Client,
                "key check pending",
                KEY_CHECK_PENDING.into(),
            ))),
        }
    }

    /// [`StoreError::KeySecretMismatch`] while the last proof found another value,
    /// [`StoreError::KeyCheckPending`] while this daemon waits to claim an empty store.
    pub fn refuse(&self) -> Result<(), StoreError> {
        if self.refused() {
            Err(StoreError::KeySecretMismatch)
        } else if self.pending.load(Ordering::Relaxed) {
            Err(StoreError::KeyCheckPending)
        } else {
            Ok(())
        }
    }
}

/// Whether `e` is Redis saying the key holds another type (`WRONGTYPE`): something no
/// daemon wrote there. Every other error (a dropped connection, `LOADING` while Redis
/// reads its data back, an ACL refusal) leaves the outcome as it was: the call fails, and
/// the next check decides.
fn is_wrong_type(e: &RedisError) -> bool {
    e.code() == Some("WRONGTYPE")
}

/// One `key_check.lua` call with `check` in `mode`: answers the value the store holds
/// after it.
///
/// # Errors
/// The script's [`RedisError`].
pub(super) async fn invoke<C: ConnectionLike + Send>(
    conn: &mut C,
    check: &KeyCheck,
    mode: KeyCheckMode,
) -> Result<Vec<u8>, RedisError> {
    let keys = key_check::Keys { check_value: KEY_CHECK.to_owned() };
    let args = key_check::Args { check: check.as_str().to_owned(), mode: mode.as_str() };
    key_check::call(&keys, &args).invoke_async(conn).await
}
