//! Candidate reports in the embedded store (`lua/candidate_report.lua` on Redis): one
//! entry per report, its start and its counts.

use async_trait::async_trait;

use super::EmbeddedStore;
use super::entry::Entry;
use super::tables::Tables;
use crate::store::candidate_report::{CandidateCounts, CandidateReportStore, REPORT_TTL_MS};
use crate::store::error::StoreError;
use crate::store::keys::CandidateKey;

#[async_trait]
impl CandidateReportStore for EmbeddedStore {
    async fn add_to_report(&self, key: &CandidateKey, counts: [u64; 5]) -> Result<(), StoreError> {
        let key = key.as_str().to_owned();
        self.submit(true, move |t| {
            let held = held(t, &key)?;
            let since_ms = if held.since_ms == 0 { t.now } else { held.since_ms };
            let mut sum = held.counts;
            for (s, c) in sum.iter_mut().zip(counts) {
                *s = s.saturating_add(c).min(crate::throttle::MAX_STORED_COUNT);
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
