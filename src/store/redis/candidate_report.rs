//! Candidate reports on Redis: one `lua/candidate_report.lua` call on the report's key,
//! with no `WAIT`: a report is what an operator reads, never what a login is decided on.

use async_trait::async_trait;

use super::RedisStore;
use super::scripts::candidate_report as script;
use crate::store::candidate_report::{CandidateCounts, CandidateReportStore, REPORT_TTL_MS};
use crate::store::error::StoreError;
use crate::store::keys::CandidateKey;
use crate::throttle::candidate_report::{Defence, ReportCounts};

impl RedisStore {
    async fn report_call(
        &self,
        key: &CandidateKey,
        op: &'static str,
        defence: Defence,
        counts: String,
    ) -> Result<(u64, [u64; 5]), StoreError> {
        let keys = script::Keys { report: key.as_str().to_owned() };
        let args = script::Args { op, defence: defence.name(), counts, ttl_ms: REPORT_TTL_MS };
        let reply: Vec<i64> = self.invoke(&script::call(&keys, &args)).await?;
        let script::Reply {
            since_ms,
            would_refuse,
            would_allow,
            user_locked_out,
            step_up_added,
            step_up_dropped,
        } = script::Reply::parse(&reply)?;
        let n = |v: i64| {
            u64::try_from(v)
                .map_err(|_| StoreError::Protocol("candidate report: a negative count".into()))
        };
        Ok((
            n(since_ms)?,
            [
                n(would_refuse)?,
                n(would_allow)?,
                n(user_locked_out)?,
                n(step_up_added)?,
                n(step_up_dropped)?,
            ],
        ))
    }
}

#[async_trait]
impl CandidateReportStore for RedisStore {
    async fn add_to_report(
        &self,
        key: &CandidateKey,
        counts: &ReportCounts,
    ) -> Result<(), StoreError> {
        for (defence, line) in Defence::ALL.into_iter().zip(counts) {
            if line.iter().any(|&c| c > 0) {
                let text = line.map(|c| c.to_string()).join(",");
                self.report_call(key, "add", defence, text).await?;
            }
        }
        Ok(())
    }

    /// One call per defence: the report is read line by line (what an operator reads,
    /// a few times a day).
    async fn read_report(&self, key: &CandidateKey) -> Result<CandidateCounts, StoreError> {
        let mut report = CandidateCounts::default();
        for defence in Defence::ALL {
            let (since_ms, line) = self.report_call(key, "read", defence, String::new()).await?;
            report.since_ms = since_ms;
            report.counts[defence.index()] = line;
        }
        Ok(report)
    }
}
