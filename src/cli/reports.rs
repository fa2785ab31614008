//! The operator's fleet-wide reports of a realm, read from the store through one daemon
//! (`portcullis.v1.Admin`): `status` (`RealmStatus`; docs/observability.md, "A realm's
//! status") and `candidate-report` (`CandidateReport`; docs/throttle.md, "Trying a
//! policy in shadow"). Exit status: 0 done, 1 (`candidate-report`) no candidate in the
//! realm, 2 error.

use std::process::ExitCode;
use std::time::Duration;

use portcullis::pb;
use portcullis::pb::admin_client::AdminClient;

use super::operator::RealmArgs;

/// `status`: a realm's status, fleet-wide (`Admin/RealmStatus`), one `name: value` line
/// each, every count with its look-back. Exit 0, or 2 on an error.
pub async fn status(args: RealmArgs) -> ExitCode {
    let daemon = args.daemon.shown();
    match status_call(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("portcullis: {}", super::output::report(&*e, &daemon));
            ExitCode::from(2)
        }
    }
}

async fn status_call(args: RealmArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (channel, bearer) = args.daemon.connect().await?;
    let mut client = AdminClient::with_interceptor(channel, bearer);
    let r = client.realm_status(pb::RealmStatusRequest { realm: args.realm }).await?.into_inner();
    let error = if r.estimate_error == 0.0 {
        "exact".to_owned()
    } else {
        format!("estimates, standard error {:.2}%", r.estimate_error * 100.0)
    };
    say!("distinct counts: {error}; up to {} s behind the calls", r.lag_seconds);
    say!("accounts_locked: {} (last {} min)", r.accounts_locked, r.lockout_minutes);
    say!("accounts_at_ceiling: {} (last 60 min)", r.accounts_at_ceiling);
    say!("networks_throttled: {} (last {} min)", r.networks_throttled, r.network_minutes);
    say!("sprayed_fingerprints: {} (last {} min)", r.sprayed_fingerprints, r.spray_minutes);
    say!("challenges_issued: {} (last 60 min)", r.challenges_issued);
    say!("devices_confirmed: {} (last 60 min)", r.devices_confirmed);
    say!("accounts_on_grace_logins: {} (last 60 min)", r.accounts_on_grace_logins);
    for f in &r.flow_refusals {
        let flow = pb::Flow::try_from(f.flow).ok().and_then(portcullis_client::Flow::from_wire);
        let name = flow.map_or("unknown", |f| f.as_str());
        say!("refused {name}: {} (last 60 min)", f.refused);
    }
    Ok(())
}

/// `candidate-report`: what the realm's candidate policy would have done beside the
/// enforced one since it was first noted (`Admin/CandidateReport`), one `name: value`
/// line each. Exit 0, 1 when the realm has no candidate, 2 on an error.
pub async fn candidate_report(args: RealmArgs) -> ExitCode {
    let daemon = args.daemon.shown();
    match candidate_report_call(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("portcullis: {}", super::output::report(&*e, &daemon));
            ExitCode::from(2)
        }
    }
}

async fn candidate_report_call(args: RealmArgs) -> Result<bool, Box<dyn std::error::Error>> {
    let (channel, bearer) = args.daemon.connect().await?;
    let mut client = AdminClient::with_interceptor(channel, bearer);
    let realm = args.realm;
    let request = pb::CandidateReportRequest { realm: realm.clone() };
    let r = client.candidate_report(request).await?.into_inner();
    if !r.loaded {
        say!("realm {realm} has no candidate policy ([realms.{realm}.candidate])");
        return Ok(false);
    }
    let since = if r.since_unix_ms == 0 {
        "nothing counted yet".to_owned()
    } else {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(r.since_unix_ms);
        humantime::format_rfc3339_seconds(at).to_string()
    };
    say!(
        "candidate: {} (since {since}; up to {} s behind the calls)",
        r.candidate_id,
        r.lag_seconds
    );
    say!("login would_refuse: {} (the enforced policy allowed them)", r.would_refuse);
    say!("login users_locked_out: {} (of those, the right password)", r.users_locked_out);
    say!("login guesses_stopped: {} (of those, no right password)", r.guesses_stopped);
    say!("login would_allow: {} (the enforced policy refused them)", r.would_allow);
    say!("step_up added: {}", r.step_up_added);
    say!("step_up dropped: {}", r.step_up_dropped);
    for line in r.defences.iter().filter(|l| l.defence != "login") {
        let d = &line.defence;
        say!("{d} would_refuse: {} (the enforced policy allowed them)", line.would_refuse);
        say!("{d} users_locked_out: {} (of those, the right answer)", line.users_locked_out);
        say!("{d} guesses_stopped: {} (of those, no right answer)", line.guesses_stopped);
        say!("{d} would_allow: {} (the enforced policy refused them)", line.would_allow);
    }
    Ok(true)
}
