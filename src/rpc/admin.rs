//! The operator service `portcullis.v1.Admin` (docs/security.md):
//! `Inspect` reads an account key's lockout state, `Unlock` clears its record on an
//! operator's decision (and, for a mitigated attack, revokes its devices),
//! `RevokeDevices` revokes every device token of an account (docs/devices.md),
//! `SprayStatus` reports a realm's password-spray state (docs/spray.md),
//! `InspectNetwork` and `ReleaseNetwork` read and fill a client network's bucket
//! (docs/throttle.md, "Per client network"), `EffectiveConfig` shows the configuration
//! this daemon runs (docs/observability.md, "The running configuration"). It shares the
//! listener with `Governor` and has its own permissions (each RPC's name in
//! `[callers.NAME] rpcs`). Unlock, RevokeDevices and ReleaseNetwork emit their security
//! events (`crate::telemetry::events`) with the caller's name and note.
//!
//! Translation only: what each call does to the store is [`crate::operator_rules`]'s.
//! Every use is logged with the caller's configured name, the realm and the outcome,
//! never the identifier, its key or a client key (a network by its tag at most). Input
//! is validated exactly as `Governor` validates it (`crate::validate::account`), before
//! any store work.

use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::answers::store_unavailable;
use crate::auth::Authorization;
use crate::defence::spray::SprayWatch;
use crate::pb::admin_server::Admin;
use crate::pb::{
    CandidateDefenceReport, CandidateReportRequest, CandidateReportResponse, DoorState,
    EffectiveConfigRequest, EffectiveConfigResponse, FlowRefusals, InspectNetworkRequest,
    InspectNetworkResponse, InspectRequest, InspectResponse, RealmStatusRequest,
    RealmStatusResponse, ReleaseNetworkRequest, ReleaseNetworkResponse, RevokeDevicesRequest,
    RevokeDevicesResponse, ShutBy, SprayStatusRequest, SprayStatusResponse, UnlockReason,
    UnlockRequest, UnlockResponse,
};
use crate::realm::{Realm, Realms};
use crate::secret::KeySecret;
use crate::telemetry::events::{EventKind, SecurityEvent, emit};
use crate::telemetry::running_config::RunningConfig;
use crate::validate::account as validate_account;

use crate::flows::{FlowInspection, Flows};
use crate::operator_rules::{self, NetworkView, Unlocked};
use crate::store::Store;
use crate::store::attempt_count::Inspection;
use crate::store::network_bucket::NetworkOp;
use crate::store::realm_tally::{FLUSH_EVERY, HLL_STANDARD_ERROR};
use crate::store::send_log::Sent;
use crate::throttle::candidate_report::{Defence, Outcome};
use crate::throttle::flow::{FlowKind, FlowRules};
use crate::throttle::realm_tally::{Counter, Distinct};
use crate::throttle::send_log::CAP_WINDOW_MS;
use crate::throttle::{self, Policy};

/// The log target of the operator audit lines (docs/security.md, the Admin service):
/// kept as `portcullis::admin` so a log filter written for earlier releases still
/// selects them.
const AUDIT_TARGET: &str = "portcullis::admin";

/// The `portcullis.v1.Admin` service.
pub struct AdminService {
    realms: Arc<Realms>,
    store: Arc<dyn Store>,
    /// Derives account keys, as the Governor service does.
    secret: KeySecret,
    /// The Governor service's view of password spraying.
    spray: Arc<SprayWatch>,
    /// Reads the flows' records (docs/flows.md).
    flows: Flows,
    /// The configuration in force, as `EffectiveConfig` shows it.
    running: Arc<RunningConfig>,
}

impl AdminService {
    /// A service over `store` for `realms`, reporting the spray state `spray` holds and
    /// the configuration `running` keeps.
    pub fn new(
        realms: Arc<Realms>,
        store: Arc<dyn Store>,
        secret: KeySecret,
        spray: Arc<SprayWatch>,
        running: Arc<RunningConfig>,
    ) -> Self {
        let flows = Flows::new(store.clone(), &secret);
        Self { realms, store, secret, spray, flows, running }
    }

    /// The request's account, validated and keyed exactly as `Governor` does it.
    fn account(
        &self,
        account: Option<&crate::pb::Account>,
        extensions: &tonic::Extensions,
    ) -> Result<(&Realm, crate::store::keys::AccountKey), Status> {
        validate_account(&self.realms, &self.secret, account, extensions)
    }
}

/// Milliseconds since the Unix epoch of `t` (0 before it).
fn unix_ms(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, crate::throttle::duration_ms)
}

/// A realm named by an Admin request: configured and open to the caller.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `realm`; `PERMISSION_DENIED` for a realm the caller may not
/// use.
fn named_realm<'r>(
    realms: &'r Realms,
    realm: &str,
    extensions: &tonic::Extensions,
) -> Result<&'r Realm, Status> {
    if realm.is_empty() {
        return Err(Status::invalid_argument("realm is required"));
    }
    // A bad realm is a bad argument, for every caller (as `account.realm` is on the
    // Governor): realm names are configuration, not secrets.
    let found = realms
        .get(realm)
        .ok_or_else(|| Status::invalid_argument("realm is not a configured realm"))?;
    crate::auth::check_realm(extensions, realm)?;
    Ok(found)
}

impl AdminService {
    /// The door of `key`'s login record (`flow` `None`) or of one flow's, as `Inspect`
    /// answers it.
    ///
    /// # Errors
    /// `UNAVAILABLE` when the store fails.
    async fn door(
        &self,
        realm: &Realm,
        key: &crate::store::keys::AccountKey,
        flow: Option<crate::throttle::flow::Flow>,
    ) -> Result<InspectResponse, Status> {
        let Some(flow) = flow else {
            let read = self.store.inspect(key, &realm.policy).await.map_err(store_unavailable)?;
            let candidate = realm.candidate.as_ref().map(|c| {
                let open = throttle::attempt_count::is_open(
                    &c.policy,
                    read.candidate.as_ref(),
                    read.now_ms,
                );
                if open { DoorState::Open } else { DoorState::Closed }
            });
            let answer = inspection(&realm.policy, &read);
            let candidate_door = candidate.unwrap_or(DoorState::Unspecified) as i32;
            return Ok(InspectResponse { candidate_door, ..answer });
        };
        let read =
            self.flows.inspect(realm, &key.flow(flow), flow).await.map_err(store_unavailable)?;
        Ok(match read {
            FlowInspection::Code(read, policy) => inspection(&policy, &read),
            FlowInspection::Mail(sent) => mail_inspection(&sent),
        })
    }
}

fn caller(extensions: &tonic::Extensions) -> String {
    extensions.get::<Authorization>().map_or("-", Authorization::name).to_owned()
}

/// The answer to `Inspect`, from a record and the store's clock read at one instant,
/// with the rules of [`crate::throttle`].
pub fn inspection(policy: &Policy, inspection: &Inspection) -> InspectResponse {
    let door = throttle::attempt_count::door(policy, inspection.record.as_ref(), inspection.now_ms);
    InspectResponse {
        door: if door.open { DoorState::Open as i32 } else { DoorState::Closed as i32 },
        failures: u32::try_from(door.failures).unwrap_or(u32::MAX),
        step: door.step,
        seconds_until_open: door.seconds_until_open,
        window_seconds: door.window_ms / 1000,
        repeats_forgiven: door.repeats,
        consecutive_failures: door.consecutive,
        max_consecutive_failures: policy.max_consecutive_failures,
        ceiling_reached: door.at_ceiling,
        door_shut_unix_ms: door.shut.map_or(0, |s| s.at_ms),
        shut_by: match door.shut.map(|s| s.by) {
            None => ShutBy::Unspecified,
            Some(throttle::attempt_count::ShutBy::Window) => ShutBy::Window,
            Some(throttle::attempt_count::ShutBy::Ceiling) => ShutBy::Ceiling,
        } as i32,
        device_failures: inspection.devices.failures,
        device_lanes: u32::try_from(inspection.devices.lanes).unwrap_or(u32::MAX),
        distinct_networks: u32::try_from(inspection.networks).unwrap_or(u32::MAX),
        candidate_door: DoorState::Unspecified as i32,
    }
}

/// The answer to `Inspect` of a mail flow (docs/flows.md): `failures` counts the mails
/// of the last 24 h, the door is closed while the interval or the daily cap holds the
/// next one back.
pub fn mail_inspection(sent: &Sent) -> InspectResponse {
    InspectResponse {
        door: if sent.allowed { DoorState::Open as i32 } else { DoorState::Closed as i32 },
        failures: sent.sends,
        step: 0,
        seconds_until_open: sent.next_in_ms.div_ceil(1000),
        window_seconds: CAP_WINDOW_MS / 1000,
        repeats_forgiven: 0,
        consecutive_failures: 0,
        max_consecutive_failures: 0,
        ceiling_reached: false,
        // A mail flow's door is its send caps: no attempt shuts it.
        door_shut_unix_ms: 0,
        shut_by: if sent.allowed { ShutBy::Unspecified } else { ShutBy::Window } as i32,
        device_failures: 0,
        device_lanes: 0,
        distinct_networks: 0,
        candidate_door: DoorState::Unspecified as i32,
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn inspect(
        &self,
        request: Request<InspectRequest>,
    ) -> Result<Response<InspectResponse>, Status> {
        let caller = caller(request.extensions());
        let req = request.get_ref();
        let (realm, key) = self.account(req.account.as_ref(), request.extensions())?;
        let flow = crate::validate::flow_or_login(req.flow)?;
        let answer = self.door(realm, &key, flow).await?;
        let flow = flow.map_or("login", |f| f.as_str());
        tracing::info!(target: AUDIT_TARGET, caller = %caller, realm = %realm.name, flow, door = ?DoorState::try_from(answer.door).ok(), "admin: inspect");
        Ok(Response::new(answer))
    }

    async fn unlock(
        &self,
        request: Request<UnlockRequest>,
    ) -> Result<Response<UnlockResponse>, Status> {
        let caller = caller(request.extensions());
        let req = request.get_ref();
        let (realm, key) = self.account(req.account.as_ref(), request.extensions())?;
        // Every wire reason by name: a reason the contract adds does not build until it
        // is mapped here, and a number this build does not know is refused.
        let (reason, rule) = match UnlockReason::try_from(req.reason) {
            Ok(r @ UnlockReason::OwnerVerified) => (r, operator_rules::UnlockReason::OwnerVerified),
            Ok(r @ UnlockReason::AttackMitigated) => {
                (r, operator_rules::UnlockReason::AttackMitigated)
            }
            Ok(r @ UnlockReason::Other) => (r, operator_rules::UnlockReason::Other),
            Ok(UnlockReason::Unspecified) | Err(_) => {
                return Err(Status::invalid_argument(
                    "reason must be UNLOCK_REASON_OWNER_VERIFIED, UNLOCK_REASON_ATTACK_MITIGATED or UNLOCK_REASON_OTHER",
                ));
            }
        };
        let flow = crate::validate::flow_or_login(req.flow)?;
        let note = crate::validate::note(&req.note)?;
        // Whether the door was shut, read first: an Unlock that opens one ends a lockout.
        let shut = self.door(realm, &key, flow).await?.door != DoorState::Open as i32;
        let unlocked = operator_rules::unlock(&*self.store, realm, &key, flow, rule)
            .await
            .map_err(store_unavailable)?;
        let record = flow.map_or("account", |f| f.as_str());
        let event = |kind| SecurityEvent::of_account(kind, &realm.name, key.event_tag());
        emit(event(EventKind::OperatorUnlock).record(record).operator(
            &caller,
            Some(reason.as_str_name()),
            note,
        ));
        // A mail flow's caps are no lockout: its Unlock ends none.
        if shut && flow.is_none_or(|f| f.kind() == FlowKind::Code) {
            emit(event(EventKind::LockoutEnded).record(record));
        }
        if let Unlocked::Flow(flow) = unlocked {
            tracing::warn!(target: AUDIT_TARGET, caller = %caller, realm = %realm.name, flow = flow.as_str(), reason = %reason.as_str_name(), note, "admin: unlock cleared a flow's record");
            return Ok(Response::new(UnlockResponse {}));
        }
        if matches!(unlocked, Unlocked::Account { devices_revoked: true }) {
            emit(event(EventKind::DevicesRevoked));
        }
        tracing::warn!(target: AUDIT_TARGET, caller = %caller, realm = %realm.name, reason = %reason.as_str_name(), note, "admin: unlock cleared an account key's record");
        Ok(Response::new(UnlockResponse {}))
    }

    async fn revoke_devices(
        &self,
        request: Request<RevokeDevicesRequest>,
    ) -> Result<Response<RevokeDevicesResponse>, Status> {
        let caller = caller(request.extensions());
        let req = request.get_ref();
        let (realm, key) = self.account(req.account.as_ref(), request.extensions())?;
        let note = crate::validate::note(&req.note)?;
        operator_rules::revoke_devices(&*self.store, realm, &key)
            .await
            .map_err(store_unavailable)?;
        let event = |kind| SecurityEvent::of_account(kind, &realm.name, key.event_tag());
        emit(event(EventKind::OperatorRevokeDevices).operator(&caller, None, note));
        emit(event(EventKind::DevicesRevoked));
        tracing::warn!(target: AUDIT_TARGET, caller = %caller, realm = %realm.name, note, "admin: revoked an account's device tokens");
        Ok(Response::new(RevokeDevicesResponse {}))
    }

    async fn spray_status(
        &self,
        request: Request<SprayStatusRequest>,
    ) -> Result<Response<SprayStatusResponse>, Status> {
        let caller = caller(request.extensions());
        let realm =
            &named_realm(&self.realms, &request.get_ref().realm, request.extensions())?.name;
        let status = self.spray.status(realm);
        let episodes = status
            .episodes
            .iter()
            .map(|e| crate::pb::SprayEpisode {
                began_unix_ms: unix_ms(e.began),
                ended_unix_ms: e.ended.map_or(0, unix_ms),
                peak_fingerprints: e.peak_fingerprints,
            })
            .collect();
        tracing::info!(target: AUDIT_TARGET, caller = %caller, realm = %realm, "admin: spray status");
        Ok(Response::new(SprayStatusResponse {
            fingerprints_over_threshold: status.fingerprints_over_threshold,
            episodes,
        }))
    }

    async fn inspect_network(
        &self,
        request: Request<InspectNetworkRequest>,
    ) -> Result<Response<InspectNetworkResponse>, Status> {
        let caller = caller(request.extensions());
        let req = request.get_ref();
        let realm = named_realm(&self.realms, &req.realm, request.extensions())?;
        crate::validate::client_key(&req.client_key, true)?;
        let capacity = realm.network.bucket.capacity;
        let view = operator_rules::network(
            &*self.store,
            &self.secret,
            realm,
            &req.client_key,
            NetworkOp::Peek,
        )
        .await
        .map_err(store_unavailable)?;
        let NetworkView::Bucket(key, state) = view else {
            tracing::info!(target: AUDIT_TARGET, caller = %caller, realm = %realm.name, "admin: inspect network (trusted)");
            return Ok(Response::new(InspectNetworkResponse {
                tokens: capacity,
                capacity,
                seconds_until_full: 0,
                network: String::new(),
                trusted: true,
            }));
        };
        tracing::info!(target: AUDIT_TARGET, caller = %caller, realm = %realm.name, network = key.tag(), tokens = state.tokens, "admin: inspect network");
        Ok(Response::new(InspectNetworkResponse {
            tokens: state.tokens,
            capacity,
            seconds_until_full: state.full_in_ms.div_ceil(1000),
            network: key.tag().to_owned(),
            trusted: false,
        }))
    }

    async fn release_network(
        &self,
        request: Request<ReleaseNetworkRequest>,
    ) -> Result<Response<ReleaseNetworkResponse>, Status> {
        let caller = caller(request.extensions());
        let req = request.get_ref();
        let realm = named_realm(&self.realms, &req.realm, request.extensions())?;
        crate::validate::client_key(&req.client_key, true)?;
        let note = crate::validate::note(&req.note)?;
        let view = operator_rules::network(
            &*self.store,
            &self.secret,
            realm,
            &req.client_key,
            NetworkOp::Release,
        )
        .await
        .map_err(store_unavailable)?;
        if let NetworkView::Bucket(key, _) = view {
            emit(
                SecurityEvent::new(EventKind::OperatorReleaseNetwork)
                    .realm(&realm.name)
                    .network(key.tag())
                    .operator(&caller, None, note),
            );
            tracing::warn!(target: AUDIT_TARGET, caller = %caller, realm = %realm.name, network = key.tag(), note, "admin: released a client network's bucket");
        }
        Ok(Response::new(ReleaseNetworkResponse {}))
    }

    async fn effective_config(
        &self,
        request: Request<EffectiveConfigRequest>,
    ) -> Result<Response<EffectiveConfigResponse>, Status> {
        let caller = caller(request.extensions());
        let report = self.running.current();
        let mut settings = report.settings.clone();
        // No realm the caller may not use is named: not as a realm, not in a caller's
        // list (`*` stays), and the digest is over what is shown.
        let visible = |name: &str| crate::auth::may_use_realm(request.extensions(), name);
        if let Some(realms) = settings.get_mut("realms").and_then(|r| r.as_object_mut()) {
            realms.retain(|name, _| visible(name));
        }
        if let Some(callers) = settings.get_mut("callers").and_then(|c| c.as_object_mut()) {
            for caller in callers.values_mut() {
                if let Some(realms) = caller.get_mut("realms").and_then(|r| r.as_array_mut()) {
                    realms.retain(|r| r.as_str().is_some_and(|r| r == "*" || visible(r)));
                }
            }
        }
        tracing::info!(target: AUDIT_TARGET, caller = %caller, "admin: effective config");
        Ok(Response::new(EffectiveConfigResponse {
            settings_sha256: crate::telemetry::running_config::settings_sha256(&settings),
            settings_json: settings.to_string(),
            file_sha256: report.file_sha256.clone().unwrap_or_default(),
            loaded_unix_ms: unix_ms(report.loaded_at),
            restart_pending: report.restart_pending.clone(),
            secrets: report.secrets.clone(),
        }))
    }

    async fn realm_status(
        &self,
        request: Request<RealmStatusRequest>,
    ) -> Result<Response<RealmStatusResponse>, Status> {
        let caller = caller(request.extensions());
        let realm = named_realm(&self.realms, &request.get_ref().realm, request.extensions())?;
        let status = operator_rules::realm_status(self.store.as_ref(), &self.secret, realm)
            .await
            .map_err(store_unavailable)?;
        tracing::info!(target: AUDIT_TARGET, caller = %caller, realm = %realm.name, "admin: realm status");
        Ok(Response::new(realm_status(&status)))
    }

    async fn candidate_report(
        &self,
        request: Request<CandidateReportRequest>,
    ) -> Result<Response<CandidateReportResponse>, Status> {
        let caller = caller(request.extensions());
        let realm = named_realm(&self.realms, &request.get_ref().realm, request.extensions())?;
        let report = operator_rules::candidate_report(self.store.as_ref(), &self.secret, realm)
            .await
            .map_err(store_unavailable)?;
        tracing::info!(target: AUDIT_TARGET, caller = %caller, realm = %realm.name, "admin: candidate report");
        Ok(Response::new(candidate_report(report)))
    }
}

/// The wire's `CandidateReportResponse` of a candidate's report (`None`: the realm has
/// no candidate).
fn candidate_report(reading: Option<operator_rules::CandidateReading>) -> CandidateReportResponse {
    let Some(operator_rules::CandidateReading { id, defences, report }) = reading else {
        return CandidateReportResponse::default();
    };
    let line = |defence: Defence| {
        let counts = report.counts[defence.index()];
        let count = |o: Outcome| counts[o.index()];
        CandidateDefenceReport {
            defence: defence.name().to_owned(),
            would_refuse: count(Outcome::WouldRefuse),
            would_allow: count(Outcome::WouldAllow),
            users_locked_out: count(Outcome::UserLockedOut),
            guesses_stopped: count(Outcome::WouldRefuse)
                .saturating_sub(count(Outcome::UserLockedOut)),
        }
    };
    let login = report.counts[Defence::Login.index()];
    let l = line(Defence::Login);
    CandidateReportResponse {
        loaded: true,
        candidate_id: id,
        since_unix_ms: report.since_ms,
        would_refuse: l.would_refuse,
        would_allow: l.would_allow,
        users_locked_out: l.users_locked_out,
        guesses_stopped: l.guesses_stopped,
        step_up_added: login[Outcome::StepUpAdded.index()],
        step_up_dropped: login[Outcome::StepUpDropped.index()],
        lag_seconds: u32::try_from(FLUSH_EVERY.as_secs()).unwrap_or(u32::MAX),
        defences: defences.into_iter().map(line).collect(),
    }
}

/// The wire's `RealmStatusResponse` of what the store read.
fn realm_status(status: &operator_rules::RealmStatus) -> RealmStatusResponse {
    let operator_rules::RealmStatus { reading, lookbacks } = status;
    let [locked, ceiling, networks, spray, grace] = reading.distinct;
    let minutes = |slots: u64| u32::try_from(slots).unwrap_or(u32::MAX);
    let flow_refusals = Counter::ALL
        .into_iter()
        .filter_map(|counter| match counter {
            Counter::Refused(flow) => Some(FlowRefusals {
                flow: flow.wire() as i32,
                refused: reading.counts[counter.index()],
            }),
            Counter::Challenges | Counter::Confirmed => None,
        })
        .collect();
    RealmStatusResponse {
        accounts_locked: locked,
        lockout_minutes: minutes(lookbacks.distinct[Distinct::Locked.index()]),
        accounts_at_ceiling: ceiling,
        networks_throttled: networks,
        network_minutes: minutes(lookbacks.distinct[Distinct::Networks.index()]),
        sprayed_fingerprints: spray,
        spray_minutes: minutes(lookbacks.distinct[Distinct::Spray.index()]),
        challenges_issued: reading.counts[Counter::Challenges.index()],
        devices_confirmed: reading.counts[Counter::Confirmed.index()],
        accounts_on_grace_logins: grace,
        flow_refusals,
        estimate_error: if reading.exact { 0.0 } else { HLL_STANDARD_ERROR },
        lag_seconds: minutes(FLUSH_EVERY.as_secs()),
        store_time_unix_ms: reading.now_ms,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::throttle::Record;

    const POLICY: Policy = Policy {
        max_failures: 5,
        max_consecutive_failures: 100,
        lockout_duration: Duration::from_secs(900),
        first_window: Duration::from_secs(900),
        max_window: Duration::from_secs(3600),
        retention: Duration::from_secs(86400),
        second_factor_required: false,
    };

    fn at(record: Option<Record>, now_ms: u64) -> InspectResponse {
        let devices = crate::store::attempt_count::DeviceLanes { lanes: 1, failures: 2 };
        inspection(&POLICY, &Inspection { record, now_ms, networks: 3, devices, candidate: None })
    }

    #[test]
    fn door_state_failures_step_and_time_to_reopen() {
        let t = 1_700_000_000_000;
        let none = at(None, t);
        assert_eq!((none.door, none.failures, none.seconds_until_open), (1, 0, 0));
        let r = |failures, ago, step| {
            Some(Record { failures, window_start_ms: t - ago, step, ..Record::default() })
        };
        let open = at(r(3, 1000, 0), t);
        assert_eq!((open.door, open.failures, open.seconds_until_open), (1, 3, 0));
        let closed = at(r(6, 1000, 0), t);
        assert_eq!((closed.door, closed.failures, closed.step), (DoorState::Closed as i32, 6, 0));
        assert_eq!(closed.seconds_until_open, 899);
        let closed = at(r(5, 1500, 1), t);
        assert_eq!(
            (closed.door, closed.window_seconds, closed.seconds_until_open),
            (2, 1800, 1799)
        );
        let over = at(r(9, 900_000, 0), t);
        assert_eq!((over.door, over.failures, over.step, over.seconds_until_open), (1, 0, 0, 0));
        let ceiling = at(r(1, 1000, 2).map(|r| Record { consecutive: 100, ..r }), t);
        assert_eq!(
            (ceiling.door, ceiling.ceiling_reached, ceiling.consecutive_failures),
            (DoorState::Closed as i32, true, 100)
        );
        assert_eq!((ceiling.max_consecutive_failures, ceiling.seconds_until_open), (100, 0));
        // Why and since when: the ceiling, the window, nothing while open.
        let shut_at = |r: Option<Record>| r.map(|r| Record { shut_at_ms: t - 500, ..r });
        let ceiling = at(shut_at(r(1, 1000, 2).map(|r| Record { consecutive: 100, ..r })), t);
        assert_eq!((ceiling.shut_by, ceiling.door_shut_unix_ms), (ShutBy::Ceiling as i32, t - 500));
        let window = at(shut_at(r(6, 1000, 0)), t);
        assert_eq!((window.shut_by, window.door_shut_unix_ms), (ShutBy::Window as i32, t - 500));
        let open = at(shut_at(r(3, 1000, 0)), t);
        assert_eq!((open.shut_by, open.door_shut_unix_ms), (ShutBy::Unspecified as i32, 0));
        assert_eq!((open.device_lanes, open.device_failures, open.distinct_networks), (1, 2, 3));
    }
}
