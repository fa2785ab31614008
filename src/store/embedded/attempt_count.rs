//! The attempt count in the embedded store (`lua/attempt_count/` on Redis): whether a
//! door is open, the count of one attempt in its steps (the bucket it is counted in, a
//! replayed attempt id, a repeat of a refused password, the count itself), a refund, a
//! clear and the operator's read, each one operation of the writer's batch.

use async_trait::async_trait;

use super::EmbeddedStore;
use super::candidate_report::{forget_candidate, refund_candidate, shadow};
use super::entry::{Entry, MAX_DEVICE_LANES, MAX_NETWORKS};
use super::repeat_list;
use super::tables::Tables;
use crate::store::attempt_count::{
    Attempt, AttemptCountStore, Counted, DeviceLanes, Inspection, Shadow,
};
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
            networks: attempt.network.map(|tag| {
                let device = attempt.device.map(|d| d.bucket.networks());
                (key.networks(), device, tag)
            }),
            device_index: attempt.device.map(|d| {
                let (index, _, tag) = d.bucket.device_index();
                (index, tag.and_then(|t| u64::from_str_radix(t, 16).ok()).unwrap_or(0))
            }),
            candidate: attempt.candidate.and_then(|p| Some((key.candidate_record()?, *p))),
            device_candidate: attempt
                .candidate
                .and(attempt.device)
                .and_then(|claim| claim.bucket.candidate_record()),
        };
        self.submit(true, move |t| op.apply(t)).await
    }

    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptKey>,
        (window_start_ms, allowed): (u64, bool),
        candidate: Option<&Shadow>,
    ) -> Result<(), StoreError> {
        let attempt = attempt_id.map(|k| k.as_str().to_owned());
        let record = key.record();
        let candidate = candidate.and_then(|c| Some((key.candidate_record()?, *c)));
        self.submit(true, move |t| {
            // The candidate record, read (and checked) before anything is written.
            let shadow = match &candidate {
                Some((key, c)) => Some((key.as_str(), t.record(key)?, c)),
                None => None,
            };
            refund(t, &record, attempt.as_deref(), window_start_ms, allowed)?;
            match shadow {
                Some((key, held, c)) => refund_candidate(t, key, held, c),
                None => Ok(()),
            }
        })
        .await
    }

    async fn clear(&self, key: &AccountKey) -> Result<bool, StoreError> {
        let (record, networks, candidate) = (key.record(), key.networks(), key.candidate_record());
        self.submit(true, move |t| {
            clear(t, &record, &networks, None)?;
            candidate.map_or(Ok(false), |c| forget_candidate(t, &c))
        })
        .await
    }

    async fn accept(
        &self,
        bucket: &AccountKey,
        account: &AccountKey,
        epoch_ttl_ms: u64,
    ) -> Result<u64, StoreError> {
        let (record, networks) = (bucket.record(), bucket.networks());
        let (epoch, candidate) =
            ((account.device_epoch(), epoch_ttl_ms), bucket.candidate_record());
        self.submit(true, move |t| {
            if let Some(c) = &candidate {
                forget_candidate(t, c)?;
            }
            clear(t, &record, &networks, Some(&epoch))
        })
        .await
    }

    async fn inspect(&self, key: &AccountKey, policy: &Policy) -> Result<Inspection, StoreError> {
        let (record, networks, policy) = (key.record(), key.networks(), *policy);
        let login = !key.is_device() && key.flow_of().is_none();
        let (index, prefix, _) = key.device_index();
        let lanes = login.then_some((index, prefix));
        // The login's candidate record only, as on Redis (a device bucket's lane and a
        // flow's record read no candidate door).
        let candidate = key.candidate_record().filter(|_| login);
        self.submit(false, move |t| {
            let sets = (networks.as_str(), lanes.as_ref(), candidate.as_deref());
            inspect(t, &record, sets, &policy)
        })
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
    /// The account record's network set, the device bucket's (with a device claim),
    /// and the client network's tag ([`Attempt::network`]).
    networks: Option<(String, Option<String>, u64)>,
    /// The account's device index and the device's tag, with a device claim.
    device_index: Option<(String, u64)>,
    /// The account's candidate record and the realm's candidate policy
    /// ([`Attempt::candidate`]).
    candidate: Option<(String, Policy)>,
    /// The device bucket's candidate record, with a device claim and a candidate: used
    /// in the account's place when the attempt is counted in the device's bucket.
    device_candidate: Option<String>,
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
        // The candidate's record of the counted record, read (and checked) before
        // anything is written, as record_attempt.lua does: a corrupt one fails the call
        // with nothing counted.
        let candidate = self.candidate.as_ref().and_then(|(account, policy)| {
            let key = if trusted { self.device_candidate.as_ref()? } else { account };
            Some((key, policy))
        });
        if let Some((key, _)) = candidate {
            t.record(key)?;
        }
        let current = t.record(counted)?;
        let (policy, repeat_claim) = (&self.policy, self.repeat.as_ref());
        if let Some(r) = repeat(t, counted, current, repeat_claim, policy, trusted, id)? {
            return Ok(with_epoch(r));
        }
        let device_ttl_ms = trusted.then_some(self.epoch_ttl_ms);
        let (answer, listed) =
            count(t, counted, current, (policy, repeat_claim), device_ttl_ms, id)?;
        self.note_lanes(t, current.as_ref(), counted, trusted)?;
        let shadow = match candidate {
            Some((key, policy)) => Some(shadow(t, key, policy, listed, answer.allowed)?),
            None => None,
        };
        Ok(Counted { shadow, ..with_epoch(answer) })
    }

    /// After a count on `counted` (whose record was `before`): its client network in
    /// the counted record's set, and a device's bucket in the account's index
    /// (record_attempt.lua's last steps).
    fn note_lanes(
        &self,
        t: &mut Tables<'_, '_>,
        before: Option<&Record>,
        counted: &str,
        trusted: bool,
    ) -> Result<(), StoreError> {
        let Some(after) = t.record(counted)? else { return Ok(()) };
        if let Some((account_set, device_set, tag)) = &self.networks {
            let set = if trusted { device_set.as_deref() } else { Some(account_set.as_str()) };
            if let Some(set) = set {
                let fresh = before.is_none_or(|r| r.window_start_ms != after.window_start_ms);
                note_network(t, set, *tag, fresh, &self.policy, &after)?;
            }
        }
        if let (true, Some((index, device))) = (trusted, &self.device_index) {
            note_device_lane(t, index, *device, self.epoch_ttl_ms)?;
        }
        Ok(())
    }
}

/// Notes `tag` in the window's network set at `set` (emptied first when the window is
/// `fresh`: a new record, or one whose window restarted), kept until the window ends.
fn note_network(
    t: &mut Tables<'_, '_>,
    set: &str,
    tag: u64,
    fresh: bool,
    policy: &Policy,
    record: &Record,
) -> Result<(), StoreError> {
    let (mut tags, mut len) = ([0u64; MAX_NETWORKS], 0u8);
    match t.get(set)? {
        Some(Entry::Networks { tags: held, len: n, .. }) if !fresh => (tags, len) = (held, n),
        Some(Entry::Networks { .. }) | None => {}
        Some(_) => {
            return Err(StoreError::Protocol("a network set key holds another entry".into()));
        }
    }
    let n = usize::from(len).min(MAX_NETWORKS);
    // (The bound checked twice: a panic here would stop the writer thread.)
    if n < MAX_NETWORKS && throttle::attempt_count::takes_network(&tags[..n], tag) {
        tags[n] = tag;
        len += 1;
    }
    let ends = throttle::attempt_count::window_end_ms(policy, record).max(t.now + 1);
    let window_start_ms = record.window_start_ms;
    t.put(set, Entry::Networks { window_start_ms, tags, len, expires_ms: ends })
}

/// Notes in the account's device index at `index` that an attempt was counted in
/// `device`'s bucket now, keeping it `ttl_ms` (as long as the device epoch).
fn note_device_lane(
    t: &mut Tables<'_, '_>,
    index: &str,
    device: u64,
    ttl_ms: u64,
) -> Result<(), StoreError> {
    let mut listed = match t.get(index)? {
        Some(Entry::Devices { lanes, len, .. }) => lanes[..usize::from(len)].to_vec(),
        None => Vec::new(),
        Some(_) => {
            return Err(StoreError::Protocol("a device index key holds another entry".into()));
        }
    };
    throttle::attempt_count::note_device(&mut listed, device, t.now);
    listed.truncate(MAX_DEVICE_LANES);
    let mut lanes = [(0u64, 0u64); MAX_DEVICE_LANES];
    lanes[..listed.len()].copy_from_slice(&listed);
    let len = u8::try_from(listed.len()).unwrap_or(u8::MAX);
    t.put(index, Entry::Devices { lanes, len, expires_ms: t.now.saturating_add(ttl_ms) })
}

/// `Inspect`'s read (inspect.lua): the record, its window's networks and, with `lanes`
/// (the account's device index and a bucket's key before its tag), the device lanes.
fn inspect(
    t: &mut Tables<'_, '_>,
    record: &str,
    (networks, lanes, candidate): (&str, Option<&(String, String)>, Option<&str>),
    policy: &Policy,
) -> Result<Inspection, StoreError> {
    let (now, found) = (t.now, t.record(record)?);
    let held = match t.get(networks)? {
        Some(Entry::Networks { len, .. }) => u64::from(len),
        None => 0,
        Some(_) => {
            return Err(StoreError::Protocol("a network set key holds another entry".into()));
        }
    };
    let current = throttle::attempt_count::window_current(policy, found.as_ref(), now);
    let mut devices = DeviceLanes::default();
    if let Some((index, prefix)) = lanes {
        let listed = match t.get(index)? {
            Some(Entry::Devices { lanes, len, .. }) => lanes[..usize::from(len)].to_vec(),
            None => Vec::new(),
            Some(_) => {
                return Err(StoreError::Protocol("a device index key holds another entry".into()));
            }
        };
        for (device, _) in listed {
            if let Some(bucket) = t.record(&format!("{prefix}{device:016x}"))? {
                devices.lanes += 1;
                devices.failures +=
                    throttle::attempt_count::window_failures(policy, Some(&bucket), now);
            }
        }
    }
    let candidate = match candidate {
        Some(key) => t.record(key)?,
        None => None,
    };
    let networks = if current { held } else { 0 };
    Ok(Inspection { record: found, now_ms: now, networks, devices, candidate })
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
        shadow: None,
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
        shadow: None,
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
) -> Result<(Counted, bool), StoreError> {
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
    let counted = Counted {
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
        shadow: None,
    };
    Ok((counted, listed))
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

/// `ClearAttempts`, or a `Verify` accept: deletes the record and its window's network
/// set; an accept's `epoch` (the account's device epoch key, and how long to keep it)
/// is read, kept so long when there is one, and answered (0 for a plain clear).
fn clear(
    t: &mut Tables<'_, '_>,
    record: &str,
    networks: &str,
    epoch: Option<&(String, u64)>,
) -> Result<u64, StoreError> {
    t.remove(record)?;
    t.remove(networks)?;
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
    // The record, read (and checked) before anything is written, as refund.lua does.
    let held = t.get(record)?;
    if let Some(attempt) = attempt {
        t.remove(attempt)?;
    }
    if let Some(Entry::Record { record: r, expires_ms }) = held
        && let Some(r) = throttle::attempt_count::refund(Some(r), window_start_ms, allowed)
    {
        // The expiry stays: it was pushed by the attempt being refunded.
        t.put(record, Entry::Record { record: r, expires_ms })?;
    }
    Ok(())
}
