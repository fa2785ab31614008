//! `portcullis.v1.Governor`: validate, call the store or the login check, answer
//! (docs/architecture.md, "The wire contract").

use std::sync::Arc;

use tonic::{Request, Response, Status};
use zeroize::Zeroizing;

use super::answers::{decision, login_failed, store_unavailable, verdict};
use crate::auth::Rpc;
use crate::defence::breach::PasswordCheck;
use crate::defence::devices::{MAX_DEVICE_TOKEN_BYTES, UnknownDevice};
use crate::flows::{FlowAttempt, Flows};
use crate::login::{Clearing, Confirmed, LoginRequest, Logins};
use crate::pb::governor_server::Governor;
use crate::pb::{
    Account, AdmitRequest, AdmitResponse, CheckPasswordRequest, CheckPasswordResponse,
    ClearAttemptsRequest, ClearAttemptsResponse, ClearFlowRequest, ClearFlowResponse, ClearReason,
    ConfirmDeviceRequest, ConfirmDeviceResponse, PasswordCheckReason, RecordAttemptRequest,
    RecordAttemptResponse, RecordFlowAttemptRequest, RecordFlowAttemptResponse, VerifyRequest,
    VerifyResponse,
};
use crate::realm::{Realm, Realms};
use crate::secret::KeySecret;
use crate::store::Store;
use crate::store::keys::AccountKey;
use crate::telemetry::metrics::{BAD_HASHES, PASSWORD_CHECKS};
use crate::telemetry::traces::record_outcome;
use crate::throttle::flow::{FlowKind, FlowRules};
use crate::validate;

pub use crate::login::MAX_REPLAYS;

/// Longest `stored_hash` `ConfirmDevice` takes, in bytes (an argon2 PHC string with
/// long parameters fits many times).
const MAX_STORED_HASH_BYTES: usize = 1024;

/// The `portcullis.v1.Governor` service.
pub struct GovernorService {
    realms: Arc<Realms>,
    store: Arc<dyn Store>,
    /// Derives account keys; the same secret on every daemon sharing the store.
    secret: KeySecret,
    /// The login check of `Verify`.
    logins: Arc<Logins>,
    /// The flows around the login (docs/flows.md).
    flows: Flows,
}

impl GovernorService {
    /// A service over `store` for `realms`, checking logins with `logins`.
    pub fn new(
        realms: Arc<Realms>,
        store: Arc<dyn Store>,
        secret: KeySecret,
        logins: Arc<Logins>,
    ) -> Self {
        let flows = Flows::new(store.clone(), &secret).with_tally(logins.tally().clone());
        Self { realms, store, secret, logins, flows }
    }

    fn account_key(
        &self,
        account: Option<&Account>,
        extensions: &tonic::Extensions,
    ) -> Result<(&Realm, AccountKey), Status> {
        validate::account(&self.realms, &self.secret, account, extensions)
    }

    async fn verify_call(
        &self,
        request: Request<VerifyRequest>,
    ) -> Result<Response<VerifyResponse>, Status> {
        let deadline = validate::grpc_deadline(request.metadata());
        let (_, extensions, req) = request.into_parts();
        // The password is wiped from memory when the request is done with, whatever way
        // it ends (tonic's own receive buffer is not ours to wipe).
        let password = Zeroizing::new(req.password);
        let (realm, key) = self.account_key(req.account.as_ref(), &extensions)?;
        let request = [
            password.as_slice(),
            req.stored_hash.as_bytes(),
            req.client_key.as_bytes(),
            req.device_token.as_bytes(),
        ];
        let attempt = validate::attempt_key(&self.secret, &key, &req.attempt_id, &request)?;
        let verifier = self.logins.verifier();
        validate::verify_fields(
            &req.client_key,
            &req.device_token,
            &password,
            verifier.settings().max_password_bytes,
        )?;
        // Checked before counting, so a malformed hash leaves no count to refund.
        let comparison =
            verifier.prepare(&realm.name, realm.hash_target, &req.stored_hash).map_err(|e| {
                tracing::warn!(realm = %realm.name, problem = %e, "a gateway sent an unusable stored hash");
                metrics::counter!(BAD_HASHES).increment(1);
                Status::invalid_argument(e.to_string())
            })?;
        let login = LoginRequest {
            realm: realm.clone(),
            key,
            password,
            comparison,
            stored_hash: req.stored_hash,
            client_key: req.client_key,
            device_token: req.device_token,
            attempt,
            deadline,
        };
        let answer = self.logins.verify(login).await.map_err(login_failed)?;
        Ok(Response::new(verdict(answer)))
    }

    async fn clear_call(
        &self,
        request: Request<ClearAttemptsRequest>,
    ) -> Result<Response<ClearAttemptsResponse>, Status> {
        let req = request.get_ref();
        let (realm, key) = self.account_key(req.account.as_ref(), request.extensions())?;
        validate::client_key(&req.client_key, false)?;
        // Only a verified password gives its network's token back: a completed reset
        // says nothing about the attempt's source.
        let clearing = match ClearReason::try_from(req.reason) {
            // Every pathway to a session meets the same step-up rule (OWASP ASVS 5.0
            // 6.3.3): a gateway that compares hashes itself cannot tell a known device
            // from an unknown one, so in a step-up realm its clear would skip the challenge.
            Ok(ClearReason::PasswordVerified) => {
                step_up_pathway(realm, "ClearAttempts(PASSWORD_VERIFIED)")?;
                Clearing::Verified(Some(req.client_key.as_str()).filter(|c| !c.is_empty()))
            }
            Ok(ClearReason::PasswordResetCompleted) => Clearing::ResetCompleted,
            Ok(ClearReason::Unspecified) | Err(_) => {
                return Err(Status::invalid_argument(
                    "reason must be CLEAR_REASON_PASSWORD_VERIFIED or CLEAR_REASON_PASSWORD_RESET_COMPLETED",
                ));
            }
        };
        self.logins.clear(realm, &key, clearing).await.map_err(store_unavailable)?;
        record_outcome("cleared", None);
        Ok(Response::new(ClearAttemptsResponse {}))
    }

    async fn record_flow_call(
        &self,
        request: Request<RecordFlowAttemptRequest>,
    ) -> Result<Response<RecordFlowAttemptResponse>, Status> {
        let req = request.get_ref();
        let (realm, account) = self.account_key(req.account.as_ref(), request.extensions())?;
        let flow = validate::flow(req.flow)?;
        let key = account.flow(flow);
        let request = [req.client_key.as_bytes()];
        let attempt = validate::attempt_key(&self.secret, &key, &req.attempt_id, &request)?;
        // A mail flow's budget is per client network: without a client, none.
        validate::client_key(&req.client_key, flow.kind() == FlowKind::Mail)?;
        let attempt = FlowAttempt {
            realm,
            key: &key,
            flow,
            attempt: attempt.as_ref(),
            client_key: &req.client_key,
        };
        let recorded = self.flows.record(&attempt).await.map_err(store_unavailable)?;
        Ok(Response::new(RecordFlowAttemptResponse {
            decision: decision(recorded.answer.allowed()),
            lockout_started: recorded.lockout_started,
            ceiling_reached: recorded.ceiling_reached,
        }))
    }

    async fn clear_flow_call(
        &self,
        request: Request<ClearFlowRequest>,
    ) -> Result<Response<ClearFlowResponse>, Status> {
        let req = request.get_ref();
        let (realm, account) = self.account_key(req.account.as_ref(), request.extensions())?;
        let flow = validate::flow(req.flow)?;
        if flow.kind() != FlowKind::Code {
            return Err(Status::invalid_argument(
                "flow must be FLOW_SECOND_FACTOR or FLOW_RECOVERY_CODE: a mail flow's caps are not cleared by a gateway",
            ));
        }
        self.flows.clear(realm, &account.flow(flow)).await.map_err(store_unavailable)?;
        record_outcome("cleared", None);
        Ok(Response::new(ClearFlowResponse {}))
    }

    async fn confirm_device_call(
        &self,
        request: Request<ConfirmDeviceRequest>,
    ) -> Result<Response<ConfirmDeviceResponse>, Status> {
        let req = request.get_ref();
        let (realm, key) = self.account_key(req.account.as_ref(), request.extensions())?;
        if req.challenge_token.is_empty() || req.challenge_token.len() > MAX_DEVICE_TOKEN_BYTES {
            return Err(Status::invalid_argument(format!(
                "challenge_token is required, at most {MAX_DEVICE_TOKEN_BYTES} bytes"
            )));
        }
        if req.stored_hash.is_empty() {
            return Err(Status::invalid_argument("stored_hash is required"));
        }
        if req.stored_hash.len() > MAX_STORED_HASH_BYTES {
            return Err(Status::invalid_argument(format!(
                "stored_hash is longer than {MAX_STORED_HASH_BYTES} bytes"
            )));
        }
        let confirmed = self
            .logins
            .confirm_device(realm, &key, &req.challenge_token, &req.stored_hash)
            .await
            .map_err(login_failed)?;
        let device_token = match confirmed {
            Confirmed::Device(token) => token,
            Confirmed::Invalid => {
                record_outcome("challenge_invalid", None);
                return Err(Status::failed_precondition(
                    "challenge_token is not valid for this account and stored_hash (expired after 15 minutes, used already, issued before the account's devices were revoked, or another account's, credential's or fleet's): no device token",
                ));
            }
            Confirmed::CodeStepShut => {
                record_outcome("code_step_shut", None);
                return Err(Status::failed_precondition(
                    "the account's second_factor step is shut (too many wrong codes): no device token until it opens",
                ));
            }
        };
        record_outcome("confirmed", None);
        Ok(Response::new(ConfirmDeviceResponse { device_token }))
    }

    async fn check_password_call(
        &self,
        request: Request<CheckPasswordRequest>,
    ) -> Result<Response<CheckPasswordResponse>, Status> {
        let (_, extensions, req) = request.into_parts();
        let password = Zeroizing::new(req.password);
        let (realm, identifier) =
            validate::identifier(&self.realms, req.account.as_ref(), &extensions)?;
        let max = self.logins.verifier().settings().max_password_bytes;
        if password.is_empty() {
            return Err(Status::invalid_argument("password is required"));
        }
        if password.len() > max {
            return Err(Status::invalid_argument(format!("password is longer than {max} bytes")));
        }
        let text = std::str::from_utf8(&password)
            .map_err(|_| Status::invalid_argument("password is not UTF-8"))?;
        // No filter: the check cannot be made, and "acceptable" would be a lie.
        let found = self.logins.breach().check(text, &identifier).ok_or_else(|| {
            Status::failed_precondition("no breach filter is configured ([breach] filter_file)")
        })?;
        metrics::counter!(PASSWORD_CHECKS, "realm" => realm.name.clone(), "reason" => found.label())
            .increment(1);
        record_outcome(found.label(), None);
        let reason = match found {
            PasswordCheck::Breached => PasswordCheckReason::Breached,
            PasswordCheck::ContextWord => PasswordCheckReason::ContextWord,
            PasswordCheck::Acceptable => PasswordCheckReason::Ok,
        };
        Ok(Response::new(CheckPasswordResponse { reason: reason as i32 }))
    }
}

/// The pathway where the gateway compares hashes itself (`RecordAttempt`, then
/// `ClearAttempts(PASSWORD_VERIFIED)`) in a `step_up` realm: refused, so every pathway to
/// a session meets step-up (OWASP ASVS 5.0 6.3.3; docs/gateways.md, "Every pathway, and
/// which defence applies on it").
fn step_up_pathway(realm: &Realm, call: &str) -> Result<(), Status> {
    if realm.unknown_device != UnknownDevice::StepUp {
        return Ok(());
    }
    record_outcome("step_up_pathway", None);
    Err(Status::failed_precondition(format!(
        "{call} is refused in realm {:?}: it has unknown_device = \"step_up\", and a right password from a device without its device token must meet the challenge, which only Verify gives (then ConfirmDevice); compare with Verify in this realm",
        realm.name
    )))
}

#[tonic::async_trait]
impl Governor for GovernorService {
    async fn check_password(
        &self,
        request: Request<CheckPasswordRequest>,
    ) -> Result<Response<CheckPasswordResponse>, Status> {
        self.check_password_call(request).await
    }

    async fn admit(
        &self,
        request: Request<AdmitRequest>,
    ) -> Result<Response<AdmitResponse>, Status> {
        let (realm, key) =
            self.account_key(request.get_ref().account.as_ref(), request.extensions())?;
        let open = self.store.is_open(&key, &realm.policy).await.map_err(store_unavailable)?;
        Ok(Response::new(AdmitResponse { decision: decision(open) }))
    }

    async fn record_attempt(
        &self,
        request: Request<RecordAttemptRequest>,
    ) -> Result<Response<RecordAttemptResponse>, Status> {
        let req = request.get_ref();
        let (realm, key) = self.account_key(req.account.as_ref(), request.extensions())?;
        step_up_pathway(realm, Rpc::RecordAttempt.method())?;
        let bound = [req.client_key.as_bytes()];
        let attempt = validate::attempt_key(&self.secret, &key, &req.attempt_id, &bound)?;
        validate::client_key(&req.client_key, false)?;
        let recorded = self
            .logins
            .record_attempt(realm, &key, attempt.as_ref(), &req.client_key)
            .await
            .map_err(store_unavailable)?;
        Ok(Response::new(RecordAttemptResponse {
            decision: decision(recorded.allowed),
            step_up: recorded.signals.step_up,
            network_throttled: recorded.signals.network_throttled,
            lockout_started: recorded.signals.lockout_started,
            ceiling_reached: recorded.signals.ceiling_reached,
        }))
    }

    async fn verify(
        &self,
        request: Request<VerifyRequest>,
    ) -> Result<Response<VerifyResponse>, Status> {
        self.verify_call(request).await
    }

    async fn clear_attempts(
        &self,
        request: Request<ClearAttemptsRequest>,
    ) -> Result<Response<ClearAttemptsResponse>, Status> {
        self.clear_call(request).await
    }

    async fn confirm_device(
        &self,
        request: Request<ConfirmDeviceRequest>,
    ) -> Result<Response<ConfirmDeviceResponse>, Status> {
        self.confirm_device_call(request).await
    }

    async fn record_flow_attempt(
        &self,
        request: Request<RecordFlowAttemptRequest>,
    ) -> Result<Response<RecordFlowAttemptResponse>, Status> {
        self.record_flow_call(request).await
    }

    async fn clear_flow(
        &self,
        request: Request<ClearFlowRequest>,
    ) -> Result<Response<ClearFlowResponse>, Status> {
        self.clear_flow_call(request).await
    }
}
