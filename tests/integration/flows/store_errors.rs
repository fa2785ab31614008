//! A store operation of a flow that fails is a deny (`UNAVAILABLE`), never an answer,
//! on every flow and on both stores: a code flow's count, a mail flow's send or its
//! network token (taken; a failed give-back after a refusal leaves the deny),
//! `ClearFlow`, and the operator's reads and
//! clears of a flow. Each fault fails its own operation only.

use std::sync::Arc;

use portcullis::config::Settings;
use portcullis::pb::admin_server::Admin;
use portcullis::pb::governor_server::Governor;
use portcullis::rpc::{AdminService, GovernorService};
use portcullis::store::Store;
use portcullis::store::embedded::{EmbeddedStore, SystemClock};
use portcullis::store::network_bucket::NetworkOp;
use portcullis::store::redis::RedisStore;
use portcullis::store::send_log::SendOp;
use portcullis::telemetry::running_config::RunningConfig;
use tonic::Code;

use super::*;

const NET: &str = "203.0.113.40";

fn open<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.extensions_mut().insert(portcullis::auth::Authorization::Open);
    request
}

/// A `Governor` and an `Admin` over `inner`, failing `fail`.
fn over(
    inner: &Arc<dyn Store>,
    fail: Fault,
    settings: &Settings,
) -> (GovernorService, AdminService) {
    let store: Arc<dyn Store> = Arc::new(FaultyStore { inner: inner.clone(), fail });
    let secret = KeySecret::new(SECRET.as_bytes().to_vec());
    let realms = Arc::new(settings.realms.clone());
    let spray = portcullis::defence::spray::SprayWatch::new();
    let running = RunningConfig::new(settings.report.clone());
    let admin = AdminService::new(realms, store.clone(), secret, spray, running);
    (governor_over(store, settings.clone()), admin)
}

async fn record(g: &GovernorService, who: &str, flow: Flow) -> Result<Decision, tonic::Status> {
    let r = g.record_flow_attempt(open(request("default", who, flow, NET, ""))).await?;
    Ok(decision(r.get_ref()))
}

fn unavailable<T: std::fmt::Debug>(r: Result<T, tonic::Status>, what: &str) {
    let status = r.expect_err(&format!("{what} answered"));
    assert_eq!(status.code(), Code::Unavailable, "{what}: {status:?}");
}

async fn inspect(a: &AdminService, who: &str, flow: Flow) -> Result<u32, tonic::Status> {
    let req = InspectRequest { account: account("default", who), flow: flow as i32 };
    Ok(a.inspect(open(req)).await?.into_inner().failures)
}

async fn unlock(a: &AdminService, who: &str, flow: Flow) -> Result<(), tonic::Status> {
    let reason = UnlockReason::OwnerVerified as i32;
    let req = UnlockRequest {
        account: account("default", who),
        reason,
        flow: flow as i32,
        note: String::new(),
    };
    a.unlock(open(req)).await.map(drop)
}

const CODES: [Flow; 2] = [Flow::SecondFactor, Flow::RecoveryCode];
const MAILS: [Flow; 2] = [Flow::PasswordReset, Flow::VerificationResend];

/// Every fault of a flow's store operations over `inner`, each on accounts of its own.
async fn every_failed_flow_operation_is_a_deny(inner: Arc<dyn Store>, settings: &Settings) {
    let (g, a) = over(&inner, Fault::FlowCount, settings);
    for flow in CODES {
        unavailable(record(&g, "count@example.com", flow).await, &format!("{flow:?} count"));
    }
    for flow in MAILS {
        assert_eq!(record(&g, "count@example.com", flow).await.unwrap(), Decision::Allow);
    }
    assert_eq!(inspect(&a, "count@example.com", Flow::SecondFactor).await.unwrap(), 0);

    let (g, a) = over(&inner, Fault::Send(SendOp::Send), settings);
    for flow in MAILS {
        unavailable(record(&g, "send@example.com", flow).await, &format!("{flow:?} send"));
        assert_eq!(inspect(&a, "send@example.com", flow).await.unwrap(), 0);
    }
    assert_eq!(record(&g, "send@example.com", Flow::SecondFactor).await.unwrap(), Decision::Allow);

    let (g, a) = over(&inner, Fault::Network(NetworkOp::Take), settings);
    for flow in MAILS {
        unavailable(record(&g, "take@example.com", flow).await, &format!("{flow:?} take"));
        assert_eq!(inspect(&a, "take@example.com", flow).await.unwrap(), 0, "a mail was noted");
    }
    assert_eq!(record(&g, "take@example.com", Flow::RecoveryCode).await.unwrap(), Decision::Allow);

    // A refused mail whose token cannot be given back: the deny stands (the give-back
    // runs after the answer, so a refusal takes an allow's time; failing, it leaves the
    // network over-counted, the safe side).
    let (g, _) = over(&inner, Fault::Network(NetworkOp::GiveBack), settings);
    for flow in MAILS {
        assert_eq!(record(&g, "back@example.com", flow).await.unwrap(), Decision::Allow);
        let refused = record(&g, "back@example.com", flow).await;
        assert_eq!(refused.unwrap(), Decision::Deny, "{flow:?}: a failed give-back");
    }

    let (g, a) = over(&inner, Fault::Send(SendOp::Peek), settings);
    for flow in MAILS {
        assert_eq!(record(&g, "peek@example.com", flow).await.unwrap(), Decision::Allow);
        unavailable(inspect(&a, "peek@example.com", flow).await, &format!("{flow:?} inspect"));
    }

    let (g, a) = over(&inner, Fault::FlowClear, settings);
    for flow in CODES {
        for _ in 0..6 {
            record(&g, "clear@example.com", flow).await.unwrap();
        }
        let req = ClearFlowRequest {
            account: account("default", "clear@example.com"),
            flow: flow as i32,
        };
        unavailable(g.clear_flow(open(req)).await, &format!("ClearFlow {flow:?}"));
        unavailable(unlock(&a, "clear@example.com", flow).await, &format!("Unlock {flow:?}"));
        let after = record(&g, "clear@example.com", flow).await.unwrap();
        assert_eq!(after, Decision::Deny, "{flow:?}: a failed clear opened the door");
    }
    for flow in MAILS {
        unavailable(unlock(&a, "clear@example.com", flow).await, &format!("Unlock {flow:?}"));
    }
    // The login's own clear is no flow's: it still works.
    unlock(&a, "clear@example.com", Flow::Unspecified).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_operation_is_a_deny_for_every_flow_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let settings = TestConfig::embedded(&dir.path().join("cfg")).extra(FLOW_REALMS).settings();
    let clock = Arc::new(SystemClock);
    let store = EmbeddedStore::open(&dir.path().join("data"), Duration::from_secs(2), clock);
    every_failed_flow_operation_is_a_deny(Arc::new(store.unwrap()), &settings).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_operation_is_a_deny_for_every_flow_on_redis() {
    let redis = RedisServer::start();
    let settings = TestConfig::redis(&redis.url()).extra(FLOW_REALMS).settings();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(2), 4).unwrap();
    every_failed_flow_operation_is_a_deny(Arc::new(store), &settings).await;
}
