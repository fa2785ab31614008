//! gRPC ↔ domain mapping only: validate a request, derive its account key, call the
//! store, and build the answer. Answers are built in one place ([`decision`]) and store
//! errors become `UNAVAILABLE` in one place ([`store_unavailable`]).

use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::normalize::normalize;
use crate::pb::governor_server::Governor;
use crate::pb::{
    Account, AdmitRequest, AdmitResponse, ClearAttemptsRequest, ClearAttemptsResponse, ClearReason,
    Decision, RecordAttemptRequest, RecordAttemptResponse,
};
use crate::realm::{Realm, Realms};
use crate::store::keys::{AccountKey, AttemptId, KeySecret};
use crate::store::{Store, StoreError};

/// The `portcullis.v1.Governor` service.
pub struct GovernorService {
    realms: Arc<Realms>,
    store: Arc<dyn Store>,
    /// Derives account keys; the same secret on every daemon sharing the store.
    secret: KeySecret,
}

impl GovernorService {
    /// A service over `store` for `realms`.
    pub fn new(realms: Arc<Realms>, store: Arc<dyn Store>, secret: KeySecret) -> Self {
        Self {
            realms,
            store,
            secret,
        }
    }

    /// Validates `account` (before any store work) and derives its key.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming the field: missing account, unknown realm, identifier
    /// empty after normalization or over 320 bytes.
    fn account_key(&self, account: Option<&Account>) -> Result<(&Realm, AccountKey), Status> {
        let account = account.ok_or_else(|| Status::invalid_argument("account is required"))?;
        let realm = self
            .realms
            .get(&account.realm)
            .ok_or_else(|| Status::invalid_argument("account.realm is not a configured realm"))?;
        let identifier = normalize(realm.normalization, &account.identifier)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok((
            realm,
            AccountKey::new(&self.secret, &realm.name, &identifier),
        ))
    }
}

/// The one place a throttle answer becomes a wire [`Decision`]. A closed door is
/// `DECISION_DENY`, whatever closed it.
fn decision(allowed: bool) -> i32 {
    if allowed {
        Decision::Allow as i32
    } else {
        Decision::Deny as i32
    }
}

/// Every store failure leaves the service here. `UNAVAILABLE` because the failure is
/// the store's, transient, and says nothing about the account; gateways treat it as
/// deny. The cause is logged (it names no identifier: keys are digests) and not sent.
fn store_unavailable(err: StoreError) -> Status {
    tracing::error!(error = %err, cause = ?std::error::Error::source(&err), "store operation failed");
    metrics::counter!("portcullis_store_errors_total").increment(1);
    Status::unavailable("store unavailable")
}

#[tonic::async_trait]
impl Governor for GovernorService {
    async fn admit(
        &self,
        request: Request<AdmitRequest>,
    ) -> Result<Response<AdmitResponse>, Status> {
        let (realm, key) = self.account_key(request.get_ref().account.as_ref())?;
        let open = self
            .store
            .is_open(&key, &realm.policy)
            .await
            .map_err(store_unavailable)?;
        Ok(Response::new(AdmitResponse {
            decision: decision(open),
        }))
    }

    async fn record_attempt(
        &self,
        request: Request<RecordAttemptRequest>,
    ) -> Result<Response<RecordAttemptResponse>, Status> {
        let req = request.get_ref();
        let (realm, key) = self.account_key(req.account.as_ref())?;
        let attempt_id = AttemptId::parse(&req.attempt_id).map_err(Status::invalid_argument)?;
        let counted = self
            .store
            .record_attempt(&key, attempt_id.as_ref(), &realm.policy)
            .await
            .map_err(store_unavailable)?;
        if counted.locked_now {
            // The one lockout event: realm only, never the identifier or its key.
            tracing::warn!(realm = %realm.name, "lockout: an account key used up its window");
            metrics::counter!("portcullis_lockouts_total", "realm" => realm.name.clone())
                .increment(1);
        }
        Ok(Response::new(RecordAttemptResponse {
            decision: decision(counted.allowed),
        }))
    }

    async fn clear_attempts(
        &self,
        request: Request<ClearAttemptsRequest>,
    ) -> Result<Response<ClearAttemptsResponse>, Status> {
        let req = request.get_ref();
        let (_, key) = self.account_key(req.account.as_ref())?;
        match ClearReason::try_from(req.reason) {
            Ok(ClearReason::PasswordVerified | ClearReason::PasswordResetCompleted) => {}
            Ok(ClearReason::Unspecified) | Err(_) => {
                return Err(Status::invalid_argument(
                    "reason must be CLEAR_REASON_PASSWORD_VERIFIED or CLEAR_REASON_PASSWORD_RESET_COMPLETED",
                ));
            }
        }
        self.store.clear(&key).await.map_err(store_unavailable)?;
        Ok(Response::new(ClearAttemptsResponse {}))
    }
}
