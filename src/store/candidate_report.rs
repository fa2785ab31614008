//! A candidate policy's report on a store (docs/throttle.md, "Trying a policy in
//! shadow"; what is counted is [`crate::throttle::candidate_report`]): per realm and
//! candidate, fleet-wide, the attempts where the candidate and the enforced policy
//! would have answered apart, since the candidate was first noted (`lua/candidate_report.lua`,
//! `embedded/candidate_report.rs`). The daemons write their counts in batches
//! ([`crate::store::realm_tally::TallyBuffer`]); nothing a login is decided on.

use async_trait::async_trait;

use super::error::StoreError;
use super::keys::CandidateKey;
use crate::throttle::candidate_report::ReportCounts;

/// A candidate's report as the store holds it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CandidateCounts {
    /// When the report was first written, in ms since the Unix epoch on the store's
    /// clock (0: never).
    pub since_ms: u64,
    /// The counts per defence and outcome, in
    /// [`crate::throttle::candidate_report::Defence::ALL`]'s and
    /// [`crate::throttle::candidate_report::Outcome::ALL`]'s order.
    pub counts: ReportCounts,
}

/// Candidate reports on a store.
#[async_trait]
pub trait CandidateReportStore: Send + Sync {
    /// Adds `counts` to the report at `key` (noting its start the first time), and keeps
    /// it 30 days after this write. Each defence's line is added on its own (one script
    /// call each on Redis, the lines with counts only): a store error may leave some
    /// lines added and others not.
    async fn add_to_report(
        &self,
        key: &CandidateKey,
        counts: &ReportCounts,
    ) -> Result<(), StoreError>;

    /// The report at `key` (all zero when none was written). Never writes.
    async fn read_report(&self, key: &CandidateKey) -> Result<CandidateCounts, StoreError>;
}

/// How long a report is kept after its last write, in ms: a candidate left loaded but
/// unused for a month is forgotten.
pub const REPORT_TTL_MS: u64 = 30 * 24 * 3600 * 1000;
