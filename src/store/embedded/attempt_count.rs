//! The attempt count in the embedded store (`lua/attempt_count/` on Redis): whether a
//! door is open, the count of one attempt in its steps (the bucket it is counted in, a
//! replayed attempt id, a repeat of a refused password, the count itself), a refund, a
//! clear and the operator's read, each one operation of the writer's batch.

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::Entry;
use super::repeat_list;
use super::tables::Tables;
use crate::store::attempt_count::{Attempt, AttemptCountStore, Counted, Inspection};
use crate::store::error::StoreError;
use crate::store::keys::{AccountKey, AttemptKey};
use crate::throttle::repeat_list::RepeatMatch;
use crate::throttle::{self, Policy, Record};

#[async_trait]
impl AttemptCountStore for EmbeddedStore {
    async fn is_open(&self, key: &AccountKey, policy: &Policy) -> Result<bool, StoreError> {
        let (record, policy) = (key.record(), *policy);
        self.submit(false, move |t| {
            Ok(throttle::attempt_count::is_open(&policy, t.record(&record)?.as_ref(), t.now))
        })
        .await
    }

    async fn count(&self, attempt: &Attempt<'_>) -> Result<Counted, StoreError> {
        let key = attempt.key;
        let op = Count {
            record: key.record(),
            device: attempt.device.map(|d| (d.bucket.record(), d.epoch)),
            epoch_key: key.device_epoch(),
            epoch_ttl_ms: attempt.device_epoch_ttl_ms,
            attempt: attempt.attempt_id.map(|k| (k.as_str().to_owned(), k.binding())),
            attempt_ttl_ms: throttle::duration_ms(self.attempt_id_horizon),
            policy: *attempt.policy,
            repeat: attempt.repeat.map(|r| (r.list.as_str().to_owned(), r.fingerprint)),
            read_epoch: attempt.read_epoch,
        };
        self.submit(true, move |t| op.apply(t)).await
    }

    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptKey>,
        window_start_ms: u64,
        allowed: bool,
    ) -> Result<(), StoreError> {
        let attempt = attempt_id.map(|k| k.as_str().to_owned());
        let record = key.record();
        self.submit(true, move |t| refund(t, &record, attempt.as_deref(), window_start_ms, allowed))
            .await
    }

    async fn clear(&self, key: &AccountKey) -> Result<(), StoreError> {
        let record = key.record();
        self.submit(true, move |t| clear(t, &record, None).map(drop)).await
    }

    async fn accept(
        &self,
        bucket: &AccountKey,
        account: &AccountKey,
        epoch_ttl_ms: u64,
    ) -> Result<u64, StoreError> {
        let (record, epoch) = (bucket.record(), (account.device_epoch(), epoch_ttl_ms));
        self.submit(true, move |t| clear(t, &record, Some(&epoch))).await
    }

    async fn inspect(&self, key: &AccountKey) -> Result<Inspection, StoreError> {
        let record = key.record();
        self.submit(false, move |t| Ok(Inspection { record: t.record(&record)?, now_ms: t.now }))
            .await
    }
}

/// One attempt to count, owned by its job.
struct Count {
    record: String,
    /// The device's bucket and its token's epoch, for a device's attempt.
    device: Option<(String, u64)>,
    epoch_key: String,
    epoch_ttl_ms: u64,
    /// The attempt id's key and its request binding (`AttemptKey::bound`).
    attempt: Option<(String, u64)>,
    /// How long the attempt id's answer is kept (`store.attempt_id_horizon`).
    attempt_ttl_ms: u64,
    policy: Policy,
    /// The client's refused-password list on the counted bucket, and the password's
    /// fingerprint.
    repeat: Option<(String, u64)>,
    /// Answer the account's device epoch without a device claim
    /// ([`Attempt::read_epoch`]).
    read_epoch: bool,
}

impl Count {
    /// `record_attempt.lua`'s steps: the bucket, a replay, a repeat, the count.
    fn apply(&self, t: &mut Tables<'_, '_>) -> Result<Counted, StoreError> {
        let id = AttemptId {
            key: self.attempt.as_ref().map(|(k, _)| k.as_str()),
            binding: self.attempt.as_ref().map_or(0, |(_, b)| *b),
            ttl_ms: self.attempt_ttl_ms,
        };
        let (counted, trusted, epoch) = counted_in(
            t,
            &self.record,
            self.device.as_ref(),
            (&self.epoch_key, self.read_epoch),
            self.epoch_ttl_ms,
        )?;
        let with_epoch = |c: Counted| Counted { epoch, ..c };
        if let Some(replay) = replay(t, id)? {
            return Ok(with_epoch(replay));
        }
        let current = t.record(counted)?;
        let (policy, repeat_claim) = (&self.policy, self.repeat.as_ref());
        if let Some(r) = repeat(t, counted, current, repeat_claim, policy, trusted, id)? {
            return Ok(with_epoch(r));
        }
        let device_ttl_ms = trusted.then_some(self.epoch_ttl_ms);
        count(t, counted, current, (policy, repeat_claim), device_ttl_ms, id).map(with_epoch)
    }
}

/// Where an attempt id's answer is kept, its request binding, and for how long.
#[derive(Clone, Copy)]
struct AttemptId<'k> {
    key: Option<&'k str>,
    binding: u64,
    ttl_ms: u64,
}

/// Where the attempt is counted: a device's bucket only under the account's current
/// epoch, which is then kept `epoch_ttl_ms` more (record_attempt.lua); an attempt
/// without a token reads no epoch unless `read_epoch` asks (and then only reads it).
/// Answers the key, whether it is the device's, and the epoch read (0: none read).
fn counted_in<'k>(
    t: &mut Tables<'_, '_>,
    record: &'k str,
    device: Option<&'k (String, u64)>,
    (epoch_key, read_epoch): (&str, bool),
    epoch_ttl_ms: u64,
) -> Result<(&'k str, bool, u64), StoreError> {
    let Some((bucket, token_epoch)) = device else {
        let epoch = if read_epoch { t.epoch(epoch_key)? } else { 0 };
        return Ok((record, false, epoch));
    };
    let epoch = t.epoch(epoch_key)?;
    if epoch > 0 {
        t.put(epoch_key, Entry::Epoch { epoch, expires_ms: t.now + epoch_ttl_ms })?;
    }
    Ok(if *token_epoch == epoch { (bucket, true, epoch) } else { (record, false, epoch) })
}

/// A replayed attempt id: its first answer, counting nothing; with another request
/// than the first call's (another binding), [`StoreError::AttemptIdReused`].
fn replay(t: &mut Tables<'_, '_>, id: AttemptId<'_>) -> Result<Option<Counted>, StoreError> {
    let Some(key) = id.key else { return Ok(None) };
    let Some(Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms }) =
        t.get(key)?
    else {
        return Ok(None);
    };
    if binding != 0 && binding != id.binding {
        return Err(StoreError::AttemptIdReused);
    }
    let replays = replays + 1;
    let entry = Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms };
    t.put(key, entry)?;
    Ok(Some(Counted {
        allowed,
        locked_now: false,
        failures: 0,
        window_start_ms,
        replays,
        trusted: false,
        repeat: false,
        recheck: false,
        reached_ceiling: false,
        epoch: 0,
        consecutive_added: false,
    }))
}

/// A repeat of a refused password in the record's window: not counted; forgiven
/// unseen once, then compared (record_attempt.lua, src/throttle/attempt_count.rs::forgive,
/// src/throttle/repeat_list.rs). `None`: no repeat.
fn repeat(
    t: &mut Tables<'_, '_>,
    counted: &str,
    current: Option<Record>,
    repeat: Option<&(String, u64)>,
    policy: &Policy,
    trusted: bool,
    id: AttemptId<'_>,
) -> Result<Option<Counted>, StoreError> {
    let now = t.now;
    let (Some(r), Some((list, fingerprint))) = (current, repeat) else { return Ok(None) };
    let Some(out) = throttle::attempt_count::forgive(policy, &r, now) else { return Ok(None) };
    let Some((mut held, list_expires_ms)) = repeat_list::list_of(t, list, r.window_start_ms)?
    else {
        return Ok(None);
    };
    let Some(found) = held.claim(*fingerprint) else { return Ok(None) };
    if found == RepeatMatch::Forgiven {
        repeat_list::put_list(t, list, r.window_start_ms, &held, list_expires_ms)?;
    }
    let expires_ms = t.get(counted)?.map_or(now, |e| e.expires_ms());
    t.put(counted, Entry::Record { record: out.record, expires_ms })?;
    keep_answer(t, id, out.allowed, r.window_start_ms)?;
    Ok(Some(Counted {
        allowed: out.allowed,
        locked_now: false,
        failures: r.failures,
        window_start_ms: r.window_start_ms,
        replays: 0,
        trusted,
        repeat: true,
        recheck: found == RepeatMatch::Recheck,
        reached_ceiling: false,
        epoch: 0,
        consecutive_added: false,
    }))
}

/// Counts the attempt on `counted`'s record (`current`) and keeps its id's answer.
/// `device_ttl_ms`: the attempt is counted in a device's bucket, which at its ceiling
/// is kept that long (as long as a token that reaches it may live), not for good.
/// `repeat`: the client's list and the password's fingerprint; one listed from an
/// earlier window adds no consecutive failure ([`throttle::attempt_count::attempt_listed`]).
fn count(
    t: &mut Tables<'_, '_>,
    counted: &str,
    current: Option<Record>,
    (policy, repeat): (&Policy, Option<&(String, u64)>),
    device_ttl_ms: Option<u64>,
    id: AttemptId<'_>,
) -> Result<Counted, StoreError> {
    let now = t.now;
    let trusted = device_ttl_ms.is_some();
    let listed = match (current, repeat) {
        (Some(_), Some((list, fingerprint))) => repeat_list::lists(t, list, *fingerprint)?,
        _ => false,
    };
    let out = if listed {
        throttle::attempt_count::attempt_listed(policy, current, now)
    } else {
        throttle::attempt_count::attempt(policy, current, now)
    };
    let expires_ms =
        match (throttle::attempt_count::expiry_ms(policy, &out.record, now), device_ttl_ms) {
            (throttle::KEPT_UNTIL_CLEARED_MS, Some(ttl)) => now.saturating_add(ttl),
            (expires_ms, _) => expires_ms,
        };
    t.put(counted, Entry::Record { record: out.record, expires_ms })?;
    keep_answer(t, id, out.allowed, out.record.window_start_ms)?;
    Ok(Counted {
        allowed: out.allowed,
        locked_now: out.locked_now(policy),
        failures: out.record.failures,
        window_start_ms: out.record.window_start_ms,
        replays: 0,
        trusted,
        repeat: false,
        recheck: false,
        reached_ceiling: out.reached_ceiling(policy),
        epoch: 0,
        consecutive_added: out.added,
    })
}

/// Keeps a first call's answer under its attempt id, if it has one.
fn keep_answer(
    t: &mut Tables<'_, '_>,
    id: AttemptId<'_>,
    allowed: bool,
    window_start_ms: u64,
) -> Result<(), StoreError> {
    let Some(key) = id.key else { return Ok(()) };
    let expires_ms = t.now + id.ttl_ms;
    let binding = id.binding;
    t.put(key, Entry::Attempt { allowed, window_start_ms, replays: 0, binding, expires_ms })
}

/// `ClearAttempts`, or a `Verify` accept: deletes the record; an accept's `epoch`
/// (the account's device epoch key, and how long to keep it) is read, kept so long
/// when there is one, and answered (0 for a plain clear).
fn clear(
    t: &mut Tables<'_, '_>,
    record: &str,
    epoch: Option<&(String, u64)>,
) -> Result<u64, StoreError> {
    t.remove(record)?;
    let Some((epoch_key, ttl_ms)) = epoch else { return Ok(0) };
    let current = t.epoch(epoch_key)?;
    if current > 0 {
        t.put(epoch_key, Entry::Epoch { epoch: current, expires_ms: t.now + ttl_ms })?;
    }
    Ok(current)
}

/// Gives back one failure of the window that started at `window_start_ms` (and its
/// consecutive failure when the attempt was `allowed`), and forgets the attempt id.
fn refund(
    t: &mut Tables<'_, '_>,
    record: &str,
    attempt: Option<&str>,
    window_start_ms: u64,
    allowed: bool,
) -> Result<(), StoreError> {
    if let Some(attempt) = attempt {
        t.remove(attempt)?;
    }
    if let Some(Entry::Record { record: r, expires_ms }) = t.get(record)?
        && let Some(r) = throttle::attempt_count::refund(Some(r), window_start_ms, allowed)
    {
        // The expiry stays: it was pushed by the attempt being refunded.
        t.put(record, Entry::Record { record: r, expires_ms })?;
    }
    Ok(())
}
