//! A candidate policy in the embedded store: its reports (`lua/candidate_report.lua` on
//! Redis), one entry per report, its start and its counts; and the account's record
//! under the candidate, counted beside the enforced one (`record_attempt.lua`'s
//! `shadow`) and forgotten with it (`clear.lua`).

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::Entry;
use super::tables::Tables;
use crate::store::attempt_count::Shadow;
use crate::store::candidate_report::{CandidateCounts, CandidateReportStore, REPORT_TTL_MS};
use crate::store::error::StoreError;
use crate::store::keys::CandidateKey;
use crate::throttle::candidate_report::ReportCounts;
use crate::throttle::{self, Policy};

#[async_trait]
impl CandidateReportStore for EmbeddedStore {
    async fn add_to_report(
        &self,
        key: &CandidateKey,
        counts: &ReportCounts,
    ) -> Result<(), StoreError> {
        let (key, counts) = (key.as_str().to_owned(), *counts);
        self.submit(true, move |t| {
            let held = held(t, &key)?;
            let since_ms = if held.since_ms == 0 { t.now } else { held.since_ms };
            let mut sum = held.counts;
            for (s, c) in sum.iter_mut().flatten().zip(counts.iter().flatten()) {
                *s = s.saturating_add(*c).min(crate::throttle::MAX_STORED_COUNT);
            }
            let expires_ms = t.now.saturating_add(REPORT_TTL_MS);
            t.put(&key, Entry::CandidateReport { since_ms, counts: sum, expires_ms })
        })
        .await
    }

    async fn read_report(&self, key: &CandidateKey) -> Result<CandidateCounts, StoreError> {
        let key = key.as_str().to_owned();
        self.submit(false, move |t| held(t, &key)).await
    }
}

/// The report at `key` (all zero when absent).
fn held(t: &Tables<'_, '_>, key: &str) -> Result<CandidateCounts, StoreError> {
    match t.get(key)? {
        Some(Entry::CandidateReport { since_ms, counts, .. }) => {
            Ok(CandidateCounts { since_ms, counts })
        }
        None => Ok(CandidateCounts::default()),
        Some(_) => Err(StoreError::Protocol("a candidate report key holds another entry".into())),
    }
}

/// The attempt counted on the candidate record at `key` under `policy` (`listed`: a stale
/// repeat, which adds no consecutive failure), as `record_attempt.lua`'s `shadow`; its
/// mark `<key>:lr` says whether the enforced policy allowed it (`enforced`) and the
/// candidate would not have.
pub(super) fn shadow(
    t: &mut Tables<'_, '_>,
    key: &str,
    policy: &Policy,
    listed: bool,
    enforced: bool,
) -> Result<Shadow, StoreError> {
    let (now, current) = (t.now, t.record(key)?);
    let out = if listed {
        throttle::attempt_count::attempt_listed(policy, current, now)
    } else {
        throttle::attempt_count::attempt(policy, current, now)
    };
    // At its ceiling too a candidate record decides nothing: it is kept for the
    // candidate's retention after its last attempt, never until cleared.
    let expires_ms = throttle::attempt_count::expiry_ms(policy, &out.record, now)
        .min(now.saturating_add(policy.retention_ms()));
    t.put(key, Entry::Record { record: out.record, expires_ms })?;
    let mark = format!("{key}:lr");
    if enforced && !out.allowed {
        t.put(&mark, Entry::Used { expires_ms })?;
    } else {
        t.remove(&mark)?;
    }
    Ok(Shadow {
        allowed: out.allowed,
        failures: out.record.failures,
        window_start_ms: out.record.window_start_ms,
        consecutive_added: out.allowed && !listed,
    })
}

/// Gives back on the candidate record at `key` (`held`: as read before anything was
/// written) an attempt that the count `shadow` said it counted, as `refund.lua` does:
/// its failure in that window, its consecutive failure when it added one; the mark of a
/// refused attempt goes (the attempt no longer counts). The expiry stays.
pub(super) fn refund_candidate(
    t: &mut Tables<'_, '_>,
    key: &str,
    held: Option<throttle::Record>,
    shadow: &Shadow,
) -> Result<(), StoreError> {
    let Some(before) = held else { return Ok(()) };
    if before.window_start_ms != shadow.window_start_ms || before.failures == 0 {
        return Ok(());
    }
    let allowed = shadow.consecutive_added;
    let record = throttle::attempt_count::refund(Some(before), shadow.window_start_ms, allowed);
    if let (Some(record), Some(Entry::Record { expires_ms, .. })) = (record, t.get(key)?) {
        t.put(key, Entry::Record { record, expires_ms })?;
    }
    t.remove(&format!("{key}:lr"))
}

/// Deletes the candidate record at `key` and its mark; answers whether the mark said
/// the last attempt was one the candidate would have refused. A clear always goes
/// through: a mark it cannot read is deleted all the same and reports nothing.
pub(super) fn forget_candidate(t: &mut Tables<'_, '_>, key: &str) -> Result<bool, StoreError> {
    let mark = format!("{key}:lr");
    let refused = matches!(t.get(&mark), Ok(Some(Entry::Used { .. })));
    t.remove(key)?;
    t.remove(&mark)?;
    Ok(refused)
}
