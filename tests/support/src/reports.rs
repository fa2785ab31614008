//! A candidate policy's report as the tests read it (docs/throttle.md, "Trying a policy
//! in shadow"): through `Admin/CandidateReport`, once the daemons wrote their counts, and
//! as `portcullis candidate-report` prints it.

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use portcullis::pb::{CandidateReportRequest, CandidateReportResponse};

use crate::client::caller;
use crate::daemon::daemon_binary;

/// The report of `realm` from the daemon at `addr` once `holds` says it holds what the
/// test wants (the daemons write their counts every 2 s), or as it is after 20 s.
pub async fn candidate_report_when(
    addr: SocketAddr,
    realm: &str,
    holds: impl Fn(&CandidateReportResponse) -> bool,
) -> CandidateReportResponse {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut c = caller(addr, None, None).await.unwrap();
        let request = CandidateReportRequest { realm: realm.into() };
        let r = c.admin.candidate_report(request).await.unwrap().into_inner();
        if holds(&r) || Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `portcullis candidate-report --realm REALM` against the daemon at `addr`: its exit
/// code and what it printed.
pub fn candidate_report_printed(addr: SocketAddr, realm: &str) -> (Option<i32>, String) {
    let out = Command::new(daemon_binary())
        .args(["candidate-report", "--realm", realm, "--addr", &format!("http://{addr}")])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), printed + &stderr)
}
