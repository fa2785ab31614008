//! The attempt count on Redis: one `lua/attempt_count/` script per operation on the
//! record's key (and the keys in its hash tag: one slot on a cluster). A count waits for
//! `store.wait_replicas`; a read, a refund and a clear do not.

use async_trait::async_trait;

use super::scripts::{admit, clear, inspect, record_attempt, refund};
use super::{RedisStore, repeat_list};
use crate::store::attempt_count::{
    Attempt, AttemptCountStore, Counted, DeviceLanes, Inspection, Shadow,
};
use crate::store::error::StoreError;
use crate::store::keys::{AccountKey, AttemptKey};
use crate::throttle::attempt_count::{self, MAX_DEVICE_LANES, MAX_NETWORKS};
use crate::throttle::{Policy, Record};

#[async_trait]
impl AttemptCountStore for RedisStore {
    async fn is_open(&self, key: &AccountKey, policy: &Policy) -> Result<bool, StoreError> {
        let keys = admit::Keys { record: key.record() };
        let args = admit::Args {
            max_failures: policy.max_failures,
            first_window_ms: policy.window_ms(0),
            max_window_ms: policy.window_ms(policy.max_step()),
            max_consecutive: policy.max_consecutive_failures,
        };
        let reply = admit::Reply::parse(&[self.invoke(&admit::call(&keys, &args)).await?])?;
        match reply.open {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(StoreError::Protocol(format!("admit returned {other}"))),
        }
    }

    async fn count(&self, attempt: &Attempt<'_>) -> Result<Counted, StoreError> {
        let (key, policy) = (attempt.key, attempt.policy);
        let device_epoch_key =
            (attempt.device.is_some() || attempt.read_epoch).then(|| key.device_epoch());
        // The network sets: the account record's, and the device bucket's (the script
        // picks the one of the record it counts in).
        let networks = attempt.network.map(|_| key.networks());
        let device_networks =
            attempt.network.and(attempt.device).map(|claim| claim.bucket.networks());
        let keys = record_attempt::Keys {
            record: key.record(),
            device_bucket: attempt.device.map(|claim| claim.bucket.record()),
            device_epoch: device_epoch_key,
            device_index: attempt.device.map(|_| key.device_index().0),
            attempt: attempt.attempt_id.map(|a| a.as_str().to_owned()),
            repeat_list: attempt.repeat.map(|r| r.list.as_str().to_owned()),
            networks,
            device_networks,
            candidate: attempt.candidate.and_then(|_| key.candidate_record()),
            device_candidate: attempt
                .candidate
                .and(attempt.device)
                .and_then(|claim| claim.bucket.candidate_record()),
        };
        let args = count_args(attempt, self.attempt_ttl_ms);
        let call = record_attempt::call(&keys, &args);
        let reply: Vec<u8> = self.invoke_counted(&call).await?;
        let reply = packed_integers(&reply)?;
        if reply[..] == [-1] {
            return Err(StoreError::AttemptIdReused);
        }
        let record_attempt::Reply {
            allowed,
            failures,
            step: _,
            window_start_ms,
            replays,
            trusted,
            repeat,
            consecutive,
            epoch,
            added,
            shadow,
            shadow_failures,
            shadow_window_start_ms,
            shadow_added,
        } = record_attempt::Reply::parse(&reply)?;
        let flag = |v: i64, name: &str| match v {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(StoreError::Protocol(format!("record_attempt {name}={other}"))),
        };
        let number = |v: i64, name: &str| {
            u64::try_from(v)
                .map_err(|_| StoreError::Protocol(format!("record_attempt: negative {name}")))
        };
        let allowed = flag(allowed, "allowed")?;
        Ok(Counted {
            allowed,
            // A replay and a repeat report no new consecutive failure: never the ceiling.
            reached_ceiling: added == 1
                && u64::try_from(consecutive).is_ok_and(|c| policy.at_ceiling(c)),
            // A replay reports failures = -1, and a repeat the window's count without it
            // (record_attempt.lua): neither starts a lockout, as on the embedded store.
            locked_now: !matches!(repeat, 1 | 2)
                && u64::try_from(failures).is_ok_and(|f| policy.locks_at(f)),
            failures: u64::try_from(failures).unwrap_or(0),
            window_start_ms: number(window_start_ms, "window start")?,
            epoch: number(epoch, "device epoch")?,
            consecutive_added: flag(added, "added")?,
            shadow: match shadow {
                -1 => None,
                _ if keys.candidate.is_none() => None,
                v => Some(Shadow {
                    allowed: flag(v, "shadow")?,
                    failures: number(shadow_failures, "shadow failures")?,
                    window_start_ms: number(shadow_window_start_ms, "shadow window start")?,
                    consecutive_added: flag(shadow_added, "shadow added")?,
                }),
            },
            replays: number(replays, "replay count")?,
            trusted: flag(trusted, "trusted")? && attempt.device.is_some(),
            // 1: forgiven without a comparison; 2: a repeat to compare (record_attempt.lua).
            repeat: matches!(repeat, 1 | 2) && attempt.repeat.is_some(),
            recheck: match repeat {
                0 | 1 => false,
                2 => attempt.repeat.is_some(),
                other => {
                    return Err(StoreError::Protocol(format!("record_attempt repeat={other}")));
                }
            },
        })
    }

    async fn refund(
        &self,
        key: &AccountKey,
        attempt_id: Option<&AttemptKey>,
        (window_start_ms, allowed): (u64, bool),
        candidate: Option<&Shadow>,
    ) -> Result<(), StoreError> {
        let candidate = candidate.and_then(|c| Some((key.candidate_record()?, c)));
        let keys = refund::Keys {
            record: key.record(),
            attempt: attempt_id.map(|a| a.as_str().to_owned()),
            candidate: candidate.as_ref().map(|(k, _)| k.clone()),
        };
        let args = refund::Args {
            window_start_ms,
            allowed: u8::from(allowed),
            candidate: candidate.map_or_else(String::new, |(_, c)| {
                format!("{},{}", c.window_start_ms, u8::from(c.consecutive_added))
            }),
        };
        let _refunded = refund::Reply::parse(&[self.invoke(&refund::call(&keys, &args)).await?])?;
        Ok(())
    }

    async fn clear(&self, key: &AccountKey) -> Result<bool, StoreError> {
        let keys = clear::Keys {
            record: key.record(),
            networks: key.networks(),
            device_epoch: None,
            candidate: key.candidate_record(),
        };
        let reply: Vec<i64> =
            self.invoke(&clear::call(&keys, &clear::Args { epoch_ttl_ms: None })).await?;
        Ok(clear::Reply::parse(&reply)?.candidate_refused == 1)
    }

    async fn accept(
        &self,
        bucket: &AccountKey,
        account: &AccountKey,
        epoch_ttl_ms: u64,
    ) -> Result<u64, StoreError> {
        let keys = clear::Keys {
            record: bucket.record(),
            networks: bucket.networks(),
            device_epoch: Some(account.device_epoch()),
            candidate: bucket.candidate_record(),
        };
        let args = clear::Args { epoch_ttl_ms: Some(epoch_ttl_ms) };
        let reply: Vec<i64> = self.invoke(&clear::call(&keys, &args)).await?;
        u64::try_from(clear::Reply::parse(&reply)?.epoch)
            .map_err(|_| StoreError::Protocol("clear: negative device epoch".into()))
    }

    /// One `attempt_count/inspect.lua` call (read only); for the account's login record
    /// it reads the device lanes too.
    async fn inspect(&self, key: &AccountKey, policy: &Policy) -> Result<Inspection, StoreError> {
        let login = !key.is_device() && key.flow_of().is_none();
        let (index, bucket_prefix, _) = key.device_index();
        let keys = inspect::Keys {
            record: key.record(),
            networks: key.networks(),
            device_index: login.then_some(index),
            // inspect.lua reads the candidate after the device index: the login's only (a
            // device bucket's lane and a flow's record read no candidate door).
            candidate: key.candidate_record().filter(|_| login),
        };
        let args = inspect::Args {
            first_window_ms: login.then(|| policy.window_ms(0)),
            max_window_ms: login.then(|| policy.window_ms(policy.max_step())),
            bucket_prefix: login.then_some(bucket_prefix),
        };
        let reply: Vec<i64> = self.invoke(&inspect::call(&keys, &args)).await?;
        let inspect::Reply {
            exists,
            failures,
            window_start_ms,
            step,
            now_ms,
            repeats,
            consecutive,
            locked_until,
            shut_at,
            networks,
            device_lanes,
            device_failures,
            candidate_exists,
            candidate_failures,
            candidate_window_start_ms,
            candidate_step,
            candidate_consecutive,
            candidate_locked_until,
        } = inspect::Reply::parse(&reply)?;
        let field = |v: i64, name: &str| {
            u64::try_from(v).map_err(|_| StoreError::Protocol(format!("inspect: negative {name}")))
        };
        let record = match exists {
            0 => None,
            1 => Some(Record {
                failures: field(failures, "failures")?,
                window_start_ms: field(window_start_ms, "window start")?,
                step: u32::try_from(step)
                    .map_err(|_| StoreError::Protocol("inspect: step out of range".into()))?,
                repeats: field(repeats, "repeats")?,
                consecutive: field(consecutive, "consecutive")?,
                locked_until_ms: field(locked_until, "locked until")?,
                shut_at_ms: field(shut_at, "shut at")?,
            }),
            other => return Err(StoreError::Protocol(format!("inspect exists={other}"))),
        };
        let now_ms = field(now_ms, "time")?;
        // The set expires with its window; read as 0 once the window is over, as the
        // embedded store, whichever comes first.
        let current = attempt_count::window_current(policy, record.as_ref(), now_ms);
        Ok(Inspection {
            record,
            now_ms,
            networks: if current { field(networks, "networks")? } else { 0 },
            devices: DeviceLanes {
                lanes: field(device_lanes, "device lanes")?,
                failures: field(device_failures, "device failures")?,
            },
            candidate: match candidate_exists {
                0 => None,
                1 => Some(Record {
                    failures: field(candidate_failures, "candidate failures")?,
                    window_start_ms: field(candidate_window_start_ms, "candidate window")?,
                    step: u32::try_from(candidate_step)
                        .map_err(|_| StoreError::Protocol("inspect: step out of range".into()))?,
                    consecutive: field(candidate_consecutive, "candidate consecutive")?,
                    locked_until_ms: field(candidate_locked_until, "candidate lockout")?,
                    ..Record::default()
                }),
                other => return Err(StoreError::Protocol(format!("inspect candidate={other}"))),
            },
        })
    }
}

/// `record_attempt.lua`'s arguments for `attempt`, its attempt id's answer kept
/// `attempt_ttl_ms`.
fn count_args(attempt: &Attempt<'_>, attempt_ttl_ms: u64) -> record_attempt::Args {
    let policy = attempt.policy;
    // -1: no device token (the script then reads no epoch); -2: none, but answer
    // the account's epoch.
    let no_token = if attempt.read_epoch { -2 } else { -1 };
    record_attempt::Args {
        max_failures: policy.max_failures,
        first_window_ms: policy.window_ms(0),
        max_window_ms: policy.window_ms(policy.max_step()),
        retention_ms: policy.retention_ms(),
        escalate: u8::from(policy.escalates()),
        max_step: policy.max_step(),
        device_epoch: attempt
            .device
            .map_or(no_token, |d| i64::try_from(d.epoch).unwrap_or(i64::MAX)),
        epoch_ttl_ms: attempt.device_epoch_ttl_ms,
        attempt_ttl_ms,
        fingerprint: attempt.repeat.map_or_else(String::new, |r| repeat_list::hex(r.fingerprint)),
        max_consecutive: policy.max_consecutive_failures,
        lockout_ms: policy.lockout_ms(),
        binding: attempt.attempt_id.map_or_else(String::new, |a| a.binding_hex()),
        network: attempt.network.map_or_else(String::new, |tag| tag.to_string()),
        max_networks: MAX_NETWORKS,
        device_tag: attempt
            .device
            .and_then(|d| d.bucket.device_index().2.map(str::to_owned))
            .unwrap_or_default(),
        max_devices: MAX_DEVICE_LANES,
        candidate: attempt
            .candidate
            .filter(|_| attempt.key.candidate_record().is_some())
            .map_or_else(String::new, candidate_text),
    }
}

/// A candidate policy as `record_attempt.lua`'s ARGV `candidate`: `max_failures,
/// first_window_ms,max_window_ms,retention_ms,max_step,max_consecutive,lockout_ms`.
fn candidate_text(p: &Policy) -> String {
    format!(
        "{},{},{},{},{},{},{}",
        p.max_failures,
        p.window_ms(0),
        p.window_ms(p.max_step()),
        p.retention_ms(),
        p.max_step(),
        p.max_consecutive_failures,
        p.lockout_ms()
    )
}

/// The arguments `RecordAttempt` sends to `record_attempt.lua` for an untrusted attempt
/// without an attempt id or a repeat list on `key` under `policy` (an attempt id's
/// answer kept `attempt_ttl_ms`), as text in the script's order: for benches that call
/// the script without the daemon (`redis-benchmark`), so they send what the store sends.
pub fn record_attempt_argv(key: &AccountKey, policy: &Policy, attempt_ttl_ms: u64) -> Vec<String> {
    record_attempt::argv_text(&count_args(&Attempt::new(key, None, policy), attempt_ttl_ms))
}

/// Whether `reply` is a reply of `record_attempt.lua` that counted (for the same benches).
pub fn is_record_attempt_reply(reply: &[u8]) -> bool {
    packed_integers(reply).is_ok_and(|values| record_attempt::Reply::parse(&values).is_ok())
}

/// The integers of `record_attempt.lua`'s reply, which it packs into one string of
/// little-endian 64-bit integers (its `packed()`), in order. redis-rs's parser decodes one
/// bulk string for a fraction of what an array of fourteen integers costs it, each a
/// RESP value of its own.
///
/// # Errors
/// [`StoreError::Protocol`] for an empty reply or one whose length is no multiple of 8.
fn packed_integers(reply: &[u8]) -> Result<Vec<i64>, StoreError> {
    let (words, rest) = reply.as_chunks::<8>();
    if words.is_empty() || !rest.is_empty() {
        return Err(StoreError::Protocol(format!(
            "{} returned {} bytes, not 64-bit integers",
            record_attempt::FILE,
            reply.len()
        )));
    }
    Ok(words.iter().map(|word| i64::from_le_bytes(*word)).collect())
}

#[cfg(test)]
mod packed_reply {
    use super::*;

    fn packed(values: &[i64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// The daemon reads the script's packed reply value for value, and refuses, as a
    /// protocol error (a deny), a reply that is not whole 64-bit integers or not the
    /// script's fourteen.
    #[test]
    fn the_packed_reply_is_read_value_for_value_and_anything_else_refused() {
        let reply = packed(&[1, 6, 0, 1_733_400_000_000, 0, 0, 0, 5, 0, 1, -1, 0, 0, 0]);
        let values = packed_integers(&reply).unwrap();
        let parsed = record_attempt::Reply::parse(&values).unwrap();
        assert_eq!((parsed.allowed, parsed.failures, parsed.consecutive), (1, 6, 5));
        assert_eq!((parsed.window_start_ms, parsed.shadow), (1_733_400_000_000, -1));
        assert!(is_record_attempt_reply(&reply));
        assert_eq!(packed_integers(&packed(&[-1])).unwrap(), [-1]);
        for bad in [&b""[..], b"1", &reply[..reply.len() - 1], b"1 6 0 1733400000000"] {
            assert!(
                matches!(packed_integers(bad), Err(StoreError::Protocol(_))),
                "{bad:?} was read"
            );
        }
        // Thirteen values are no reply of the script's.
        assert!(!is_record_attempt_reply(&reply[..13 * 8]));
    }
}

#[cfg(test)]
mod future_size {
    use super::*;

    /// The size of the future `call` returns, without calling it.
    fn future_size<F: std::future::Future>(_call: impl Fn(&'static RedisStore) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// Every store call's future holds the connection checkout's, and is moved whole
    /// (into `async_trait`'s box) on every call: setting up a connection (about 10 KB of
    /// future) must stay boxed out of it (`pool::Lean::create`).
    #[test]
    #[allow(unreachable_code)]
    fn a_store_call_does_not_carry_the_connection_set_up_in_its_future() {
        let checkout = future_size(|store| store.connection());
        let counted = future_size(|store| store.invoke_counted::<Vec<u8>>(unreachable!()));
        assert!(checkout < 2048, "the checkout's future is {checkout} bytes");
        assert!(counted < 4096, "a counted script call's future is {counted} bytes");
    }
}
