//! The count of one attempt in the embedded store (`record_attempt.lua` on Redis), in
//! its steps: the bucket it is counted in, a replayed attempt id, a repeat of a refused
//! password, and the count itself.

use super::entry::Entry;
use super::writer::Tables;
use crate::store::{Counted, StoreError};
use crate::throttle::repeat_list::RepeatMatch;
use crate::throttle::{self, Policy, Record};

/// Where an attempt id's answer is kept, its request binding, and for how long.
#[derive(Clone, Copy)]
pub(super) struct AttemptId<'k> {
    pub(super) key: Option<&'k str>,
    pub(super) binding: u64,
    pub(super) ttl_ms: u64,
}

impl Tables<'_, '_> {
    /// Where the attempt is counted: a device's bucket only under the account's current
    /// epoch, which is then kept `epoch_ttl_ms` more (record_attempt.lua); an attempt
    /// without a token reads no epoch unless `read_epoch` asks (and then only reads it).
    /// Answers the key, whether it is the device's, and the epoch read (0: none read).
    pub(super) fn counted_in<'k>(
        &mut self,
        record: &'k str,
        device: Option<&'k (String, u64)>,
        (epoch_key, read_epoch): (&str, bool),
        epoch_ttl_ms: u64,
    ) -> Result<(&'k str, bool, u64), StoreError> {
        let Some((bucket, token_epoch)) = device else {
            let epoch = if read_epoch { self.epoch(epoch_key)? } else { 0 };
            return Ok((record, false, epoch));
        };
        let epoch = self.epoch(epoch_key)?;
        if epoch > 0 {
            self.put(epoch_key, Entry::Epoch { epoch, expires_ms: self.now + epoch_ttl_ms })?;
        }
        Ok(if *token_epoch == epoch { (bucket, true, epoch) } else { (record, false, epoch) })
    }

    /// A replayed attempt id: its first answer, counting nothing; with another request
    /// than the first call's (another binding), [`StoreError::AttemptIdReused`].
    pub(super) fn replay(&mut self, id: AttemptId<'_>) -> Result<Option<Counted>, StoreError> {
        let Some(key) = id.key else { return Ok(None) };
        let Some(Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms }) =
            self.get(key)?
        else {
            return Ok(None);
        };
        if binding != 0 && binding != id.binding {
            return Err(StoreError::AttemptIdReused);
        }
        let replays = replays + 1;
        let entry = Entry::Attempt { allowed, window_start_ms, replays, binding, expires_ms };
        self.put(key, entry)?;
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
    pub(super) fn repeat(
        &mut self,
        counted: &str,
        current: Option<Record>,
        repeat: Option<&(String, u64)>,
        policy: &Policy,
        trusted: bool,
        id: AttemptId<'_>,
    ) -> Result<Option<Counted>, StoreError> {
        let now = self.now;
        let (Some(r), Some((list, fingerprint))) = (current, repeat) else { return Ok(None) };
        let Some(out) = throttle::attempt_count::forgive(policy, &r, now) else { return Ok(None) };
        let Some((mut held, list_expires_ms)) = self.list_of(list, r.window_start_ms)? else {
            return Ok(None);
        };
        let Some(found) = held.claim(*fingerprint) else { return Ok(None) };
        if found == RepeatMatch::Forgiven {
            self.put_list(list, r.window_start_ms, &held, list_expires_ms)?;
        }
        let expires_ms = self.get(counted)?.map_or(now, |e| e.expires_ms());
        self.put(counted, Entry::Record { record: out.record, expires_ms })?;
        self.keep_answer(id, out.allowed, r.window_start_ms)?;
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
    pub(super) fn count(
        &mut self,
        counted: &str,
        current: Option<Record>,
        (policy, repeat): (&Policy, Option<&(String, u64)>),
        device_ttl_ms: Option<u64>,
        id: AttemptId<'_>,
    ) -> Result<Counted, StoreError> {
        let now = self.now;
        let trusted = device_ttl_ms.is_some();
        let listed = match (current, repeat) {
            (Some(_), Some((list, fingerprint))) => self.lists(list, *fingerprint)?,
            _ => false,
        };
        let out = if listed {
            throttle::attempt_count::attempt_listed(policy, current, now)
        } else {
            throttle::attempt_count::attempt(policy, current, now)
        };
        let expires_ms = match (throttle::attempt_count::expiry_ms(policy, &out.record, now), device_ttl_ms) {
            (throttle::KEPT_UNTIL_CLEARED_MS, Some(ttl)) => now.saturating_add(ttl),
            (expires_ms, _) => expires_ms,
        };
        self.put(counted, Entry::Record { record: out.record, expires_ms })?;
        self.keep_answer(id, out.allowed, out.record.window_start_ms)?;
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
        &mut self,
        id: AttemptId<'_>,
        allowed: bool,
        window_start_ms: u64,
    ) -> Result<(), StoreError> {
        let Some(key) = id.key else { return Ok(()) };
        let expires_ms = self.now + id.ttl_ms;
        let binding = id.binding;
        self.put(key, Entry::Attempt { allowed, window_start_ms, replays: 0, binding, expires_ms })
    }
}
