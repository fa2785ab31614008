//! Candidate reports on Redis: one `lua/candidate_report.lua` call on the report's key,
//! with no `WAIT`: a report is what an operator reads, never what a login is decided on.

use async_trait::async_trait;

use super::RedisStore;
use super::scripts::candidate_report as script;
use crate::store::candidate_report::{CandidateCounts, CandidateReportStore, REPORT_TTL_MS};
use crate::store::error::StoreError;
use crate::store::keys::CandidateKey;

impl RedisStore {
    async fn report_call(
        &self,
        key: &CandidateKey,
        op: &'static str,
        counts: String,
    ) -> Result<CandidateCounts, StoreError> {
        let keys = script::Keys { report: key.as_str().to_owned() };
        let args = script::Args { op, counts, ttl_ms: REPORT_TTL_MS };
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
        Ok(CandidateCounts {
            since_ms: n(since_ms)?,
            counts: [
                n(would_refuse)?,
                n(would_allow)?,
                n(user_locked_out)?,
                n(step_up_added)?,
                n(step_up_dropped)?,
            ],
        })
    }
}

#[async_trait]
impl CandidateReportStore for RedisStore {
    async fn add_to_report(&self, key: &CandidateKey, counts: [u64; 5]) -> Result<(), StoreError> {
        let text = counts.map(|c| c.to_string()).join(",");
        self.report_call(key, "add", text).await.map(drop)
    }

    async fn read_report(&self, key: &CandidateKey) -> Result<CandidateCounts, StoreError> {
        self.report_call(key, "read", String::new()).await
    }
}
