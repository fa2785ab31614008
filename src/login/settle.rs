//! The settle step of one `Verify` (the rule of [`crate::login`]'s module docs):
//! every way out of a counted call goes through [`Held::settle`], which gives back what
//! the call holds by one rule, written once in [`End`]: the network's token goes back
//! unless a comparison ran and failed; the account's count goes back only when this call
//! added it ([`Counted::added`]) and was stopped before any comparison by something that
//! is no guess at the account (its network, the CPU budget).

use super::signals::Turn;
use crate::realm::Realm;
use crate::store::Store;
use crate::store::attempt_count::Counted;
use crate::store::error::StoreError;
use crate::store::keys::{AccountKey, AttemptKey};

/// How a counted call ended: what [`Held::settle`] gives back. The rule is written here
/// and nowhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// Stopped before any comparison by something that is no guess at the account: its
    /// network throttled in a `reject` realm, or, for a revoked device, its network's
    /// bucket unreachable or the untrusted queue full.
    NotAGuess,
    /// The CPU budget refused the comparison after the count (a wait too long, or the
    /// caller's deadline): no guess at the account either.
    Unadmitted,
    /// Answered without a comparison as a guess at the account: a closed door, a
    /// replay, a sprayed password in a `reject` realm, a forgiven repeat.
    Unhashed,
    /// A comparison ran: it matched, or it failed (or did not complete).
    Compared {
        /// The password matched.
        matched: bool,
    },
}

impl End {
    /// The network's token goes back unless a comparison ran and failed: only a failed
    /// comparison is its network's failure (a closed door, a replay, a refusal of the
    /// CPU budget, a sprayed password refused unhashed, a forgiven repeat and a match
    /// are not). A call that holds no token gives back nothing.
    pub(super) fn gives_token_back(self) -> bool {
        self != End::Compared { matched: false }
    }

    /// The window start a refund names, or `None`: no refund. Only a count this call
    /// added ([`Counted::added`]), and only when no comparison was reached and the stop
    /// was no guess at the account: a replay's or a repeat's count was paid for by an
    /// earlier call, and a closed door, a replay, a sprayed password and a comparison
    /// stay counted. The one thing forgotten besides: a CPU refusal of a call that
    /// added nothing (a recheck) forgets its attempt_id alone (a window no record holds
    /// gives back no failure), so a retry is compared afresh instead of replaying the
    /// refusal.
    fn refund(self, counted: &Counted) -> Option<u64> {
        match self {
            End::NotAGuess if counted.added() => Some(counted.window_start_ms),
            End::Unadmitted if counted.added() => Some(counted.window_start_ms),
            End::Unadmitted => Some(NO_WINDOW),
            End::NotAGuess | End::Unhashed | End::Compared { .. } => None,
        }
    }
}

/// A window start no record holds (above `crate::throttle::MAX_STORED_TIME_MS`): a
/// refund naming it gives back no failure and only forgets the attempt id.
const NO_WINDOW: u64 = u64::MAX;

/// What a counted call holds until it ends: the count's answer and where it was
/// counted, and its turn at the network's bucket.
pub(super) struct Held<'a> {
    pub(super) store: &'a dyn Store,
    pub(super) realm: &'a Realm,
    /// Where the attempt was counted: the device's bucket, or (no token, or a revoked
    /// one) the account's own record.
    pub(super) bucket: &'a AccountKey,
    pub(super) attempt: Option<&'a AttemptKey>,
    pub(super) counted: Counted,
    pub(super) turn: Turn,
}

impl Held<'_> {
    /// Gives back what [`End`] says, the token and the refund in one round trip.
    ///
    /// # Errors
    /// The store's error (the caller denies).
    pub(super) async fn settle(&mut self, end: End) -> Result<(), StoreError> {
        let Held { store, realm, bucket, attempt, counted, turn } = self;
        let (store, realm, bucket, attempt) = (*store, *realm, *bucket, *attempt);
        let refund = async {
            match end.refund(counted) {
                Some(window) => {
                    store
                        .refund(
                            bucket,
                            attempt,
                            (window, counted.consecutive_added),
                            counted.shadow.as_ref(),
                        )
                        .await
                }
                None => Ok(()),
            }
        };
        let give_back = async {
            if end.gives_token_back() { turn.give_back(store, realm).await } else { Ok(()) }
        };
        let (refunded, given) = tokio::join!(refund, give_back);
        refunded?;
        given
    }
}
