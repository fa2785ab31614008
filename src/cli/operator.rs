//! The operator client: `admit`, `attempt`, `clear` (`portcullis.v1.Governor`) and
//! `inspect`, `unlock`, `revoke-devices`, `spray-status`, `config-dump`
//! (`portcullis.v1.Admin`). Exit status: 0 allow (or done), 1 deny, 2 error; any error
//! is an error, never an allow.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
/// `addr` without a `user:password@` part, for messages: the client library's.
pub use portcullis::client::handshake::without_credentials;
use portcullis::client::{Bearer, ClientTls, handshake};
use portcullis::pb;
use portcullis::pb::admin_client::AdminClient;
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{
    Account, AdmitRequest, ClearAttemptsRequest, ClearReason, Decision, RecordAttemptRequest,
};

/// How a command reaches a daemon that serves TLS (`[tls]`).
#[derive(Args)]
pub struct TlsArgs {
    /// PEM CA the daemon's certificate must chain to (an `https://` address).
    #[arg(long, env = "PORTCULLIS_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// PEM client certificate, for mutual TLS (with `--key-file`).
    #[arg(long, env = "PORTCULLIS_CERT_FILE")]
    cert_file: Option<PathBuf>,
    /// PEM private key of `--cert-file`.
    #[arg(long, env = "PORTCULLIS_KEY_FILE")]
    key_file: Option<PathBuf>,
    /// Name the daemon's certificate carries, when not the address's host.
    #[arg(long)]
    domain_name: Option<String>,
}

impl TlsArgs {
    /// Whether the daemon is reached over TLS (`--ca-file` given).
    pub(crate) fn tls(&self) -> bool {
        self.ca_file.is_some()
    }

    /// The client's TLS files when `--ca-file` is given. A client certificate without a
    /// CA is an error rather than silently unused.
    fn client_tls(self) -> Result<Option<ClientTls>, Box<dyn std::error::Error>> {
        let Some(ca_file) = self.ca_file else {
            if self.cert_file.is_some() || self.key_file.is_some() {
                return Err("--cert-file and --key-file need --ca-file (the CA the daemon's \
                            certificate chains to) and an https:// --addr"
                    .into());
            }
            return Ok(None);
        };
        Ok(Some(ClientTls {
            ca_file,
            cert_file: self.cert_file,
            key_file: self.key_file,
            domain_name: self.domain_name,
        }))
    }

    /// A channel to the daemon at `addr` (see [`daemon_uri`]), connected within
    /// `timeout`; each call's deadline is `timeout` too. A connection that fails names the
    /// address and the cause, and says what to check.
    pub async fn connect(
        self,
        addr: &str,
        timeout: Duration,
    ) -> Result<tonic::transport::Channel, Box<dyn std::error::Error>> {
        let tls = self.tls();
        let uri = daemon_uri(addr, tls)?;
        let endpoint = tonic::transport::Endpoint::from_shared(uri.clone()).map_err(|e| {
            format!(
                "--addr {}: not an address ({e}): use http://HOST:PORT, or https://HOST:PORT \
                 with --ca-file",
                without_credentials(addr)
            )
        })?;
        let mut endpoint = endpoint.connect_timeout(timeout).timeout(timeout);
        if let Some(files) = self.client_tls()? {
            // TLS 1.3 checks the client certificate after the client's handshake is done,
            // so a refusal would surface only as a cancelled call: one handshake first
            // tells the daemon's reason (portcullis_client::handshake).
            let config = handshake::rustls_config(&files)
                .map_err(|e| in_flags(&portcullis::setting::error_chain(&e)))?;
            if let Some(refused) =
                handshake::diagnose(&uri, &config, files.domain_name.as_deref(), timeout).await
            {
                return Err(format!(
                    "cannot reach the daemon at {}: {}",
                    without_credentials(&uri),
                    in_flags(&refused)
                )
                .into());
            }
            endpoint = endpoint.tls_config(files.load()?)?;
        }
        // tonic's connect_timeout bounds the TCP connect only; a server that takes the
        // connection and never finishes the handshake must not hold the command.
        let Ok(connected) = tokio::time::timeout(timeout, endpoint.connect()).await else {
            return Err(format!(
                "cannot reach the daemon at {}: no connection within {}; check that \
                 `portcullis serve` runs there (with [tls] for an https:// address)",
                without_credentials(&uri),
                humantime::format_duration(timeout)
            )
            .into());
        };
        connected.map_err(|e| {
            let hint = if tls {
                "check that `portcullis serve` runs there with [tls], and that --ca-file (and \
                 --domain-name) match its certificate"
            } else {
                "check that `portcullis serve` runs there and listens on that address (its \
                 `listen` setting); a daemon with [tls] needs https:// and --ca-file"
            };
            format!(
                "cannot reach the daemon at {}: {}; {hint}; or give its address with --addr \
                 (or PORTCULLIS_ADDR)",
                without_credentials(&uri),
                portcullis::setting::error_chain(&e)
            )
            .into()
        })
    }
}

/// `text` from the client library, its settings named by this command's flags
/// (`tls.cert_file` is `--cert-file` here).
fn in_flags(text: &str) -> String {
    [
        ("client.tls.cert_file", "--cert-file"),
        ("tls.cert_file", "--cert-file"),
        ("tls.key_file", "--key-file"),
        ("client.tls.ca_file", "--ca-file"),
        ("tls.ca_file", "--ca-file"),
        ("tls.domain_name", "--domain-name"),
    ]
    .iter()
    .fold(text.to_owned(), |text, (setting, flag)| text.replace(setting, flag))
}

/// The daemon's address as a URI: `http://` or `https://` as given; without a scheme,
/// `https://` when the daemon is reached over TLS (`--ca-file`), else `http://`.
/// Any other scheme, or a scheme that contradicts the TLS flags, is refused saying why.
///
/// # Errors
/// The refusal, naming `--addr` (never a password an address might carry).
pub fn daemon_uri(addr: &str, tls: bool) -> Result<String, String> {
    let addr = addr.trim();
    let Some((scheme, rest)) = addr.split_once("://") else {
        if addr.is_empty() {
            return Err("--addr is empty: give the daemon's HOST:PORT".into());
        }
        return Ok(format!("{}://{addr}", if tls { "https" } else { "http" }));
    };
    let shown = without_credentials(addr);
    match (scheme.to_ascii_lowercase().as_str(), tls) {
        ("http", false) | ("https", true) => {
            Ok(format!("{}://{rest}", scheme.to_ascii_lowercase()))
        }
        ("https", false) => Err(format!(
            "--addr {shown} is https:// but no --ca-file is given: give --ca-file (the CA the \
             daemon's certificate chains to), or use http:// for a daemon without [tls]"
        )),
        ("http", true) => Err(format!(
            "--addr {shown} is http:// but --ca-file is given: use https:// to reach a daemon \
             with [tls], or leave out --ca-file"
        )),
        (other, _) => Err(format!(
            "--addr {shown}: the daemon speaks gRPC over http:// or https://, not {other}://: \
             use http://HOST:PORT, or https://HOST:PORT with --ca-file"
        )),
    }
}

#[derive(Args)]
pub struct OperatorArgs {
    /// Realm name.
    #[arg(long)]
    realm: String,
    /// The account identifier as a user would type it; `-` reads one line from stdin,
    /// which keeps it out of the process list and shell history.
    #[arg(long)]
    identifier: String,
    /// `inspect` and `unlock` only: the flow whose record to read or clear
    /// (docs/flows.md) instead of the login throttle's.
    #[arg(long, value_parser = flow_names())]
    flow: Option<portcullis::client::Flow>,
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// An operator's note on a change (`unlock`, `revoke-devices`).
#[derive(Args)]
pub struct NoteArgs {
    /// Why, a ticket reference: logged by the daemon and put in its security event with
    /// the caller's name (at most 256 bytes, no identifier).
    #[arg(long, default_value = "")]
    pub note: String,
}

/// A flow on the command line, by its name (its settings table's, `second_factor`, …):
/// the contract's own type, so the CLI lists no flow of its own.
fn flow_names() -> impl clap::builder::TypedValueParser<Value = portcullis::client::Flow> {
    use clap::builder::TypedValueParser;
    use portcullis::client::Flow;
    clap::builder::PossibleValuesParser::new(Flow::ALL.map(Flow::as_str))
        .try_map(|name| Flow::from_name(&name).ok_or_else(|| format!("{name} is not a flow")))
}

/// How an operator command reaches the daemon.
#[derive(Args)]
pub struct DaemonArgs {
    /// Daemon address.
    #[arg(long, env = "PORTCULLIS_ADDR", default_value = "http://127.0.0.1:50051")]
    addr: String,
    /// Per-call deadline.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    tls: TlsArgs,
    /// File holding a bearer token (for daemons that authorize callers by token).
    #[arg(long, env = "PORTCULLIS_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

impl DaemonArgs {
    /// The daemon's address as messages name it.
    pub(crate) fn shown(&self) -> String {
        let uri = daemon_uri(&self.addr, self.tls.tls()).unwrap_or_else(|_| self.addr.clone());
        without_credentials(&uri)
    }

    /// A connected channel (TLS when `--ca-file` is given) and the bearer token to send.
    pub(crate) async fn connect(
        self,
    ) -> Result<(tonic::transport::Channel, Bearer), Box<dyn std::error::Error>> {
        let bearer = match self.token_file {
            Some(path) => Bearer::from_file(&path)?,
            None => Bearer::new(None)?,
        };
        Ok((self.tls.connect(&self.addr, self.timeout).await?, bearer))
    }
}

/// The flags of `spray-status`, `status` and `candidate-report`: a realm, and how to
/// reach the daemon.
#[derive(Args)]
pub struct RealmArgs {
    /// Realm name.
    #[arg(long)]
    pub(crate) realm: String,
    #[command(flatten)]
    pub(crate) daemon: DaemonArgs,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum UnlockReason {
    OwnerVerified,
    AttackMitigated,
    Other,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Reason {
    PasswordVerified,
    PasswordResetCompleted,
}

pub enum Op {
    Admit,
    Attempt(String),
    Clear(Reason),
    Inspect,
    /// With the operator's note.
    Unlock(UnlockReason, String),
    /// With the operator's note.
    RevokeDevices(String),
}

/// The operator client. Exit status: 0 allow (or cleared), 1 deny, 2 error. Any error
/// is reported as an error, never as allow.
pub async fn operate(args: OperatorArgs, op: Op) -> ExitCode {
    let daemon = args.daemon.shown();
    match call(args, op).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("portcullis: {}", super::output::report(&*e, &daemon));
            ExitCode::from(2)
        }
    }
}

async fn call(args: OperatorArgs, op: Op) -> Result<bool, Box<dyn std::error::Error>> {
    let identifier = if args.identifier == "-" {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    } else {
        args.identifier
    };
    let flow = args.flow.map_or(pb::Flow::Unspecified, portcullis::client::Flow::wire);
    if args.flow.is_some() && !matches!(op, Op::Inspect | Op::Unlock(..)) {
        return Err("--flow applies to inspect and unlock only".into());
    }
    let (channel, bearer) = args.daemon.connect().await?;
    let account = Some(Account { realm: args.realm, identifier });
    if matches!(op, Op::Inspect | Op::Unlock(..) | Op::RevokeDevices(_)) {
        let client = AdminClient::with_interceptor(channel, bearer);
        return admin(client, account, flow, op).await;
    }
    let mut client = GovernorClient::with_interceptor(channel, bearer);
    let decision = match op {
        Op::Admit => client.admit(AdmitRequest { account }).await?.into_inner().decision,
        Op::Attempt(attempt_id) => {
            client
                .record_attempt(RecordAttemptRequest {
                    account,
                    attempt_id,
                    client_key: String::new(),
                })
                .await?
                .into_inner()
                .decision
        }
        Op::Clear(reason) => {
            let reason = match reason {
                Reason::PasswordVerified => ClearReason::PasswordVerified,
                Reason::PasswordResetCompleted => ClearReason::PasswordResetCompleted,
            };
            client
                .clear_attempts(ClearAttemptsRequest {
                    account,
                    reason: reason as i32,
                    client_key: String::new(),
                })
                .await?;
            say!("cleared");
            return Ok(true);
        }
        Op::Inspect | Op::Unlock(..) | Op::RevokeDevices(_) => unreachable!("handled by admin()"),
    };
    // Anything but an explicit ALLOW, including values this version does not know, is deny.
    let allowed = decision == Decision::Allow as i32;
    say!("{}", if allowed { "ALLOW" } else { "DENY" });
    Ok(allowed)
}

/// `spray-status`: exit 0 when no fingerprint is over the threshold, 1 when one is, 2 on
/// an error.
pub async fn spray_status(args: RealmArgs) -> ExitCode {
    let daemon = args.daemon.shown();
    match spray_status_call(args).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("portcullis: {}", super::output::report(&*e, &daemon));
            ExitCode::from(2)
        }
    }
}

/// `spray-status` prints the fingerprints over the threshold now and each episode;
/// `Ok(true)` when none is over the threshold.
async fn spray_status_call(args: RealmArgs) -> Result<bool, Box<dyn std::error::Error>> {
    let (channel, bearer) = args.daemon.connect().await?;
    let mut client = AdminClient::with_interceptor(channel, bearer);
    let r = client.spray_status(pb::SprayStatusRequest { realm: args.realm }).await?.into_inner();
    say!("fingerprints_over_threshold: {}", r.fingerprints_over_threshold);
    let at = |ms: u64| {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms))
    };
    for e in &r.episodes {
        let ended = if e.ended_unix_ms == 0 {
            "ongoing".to_owned()
        } else {
            at(e.ended_unix_ms).to_string()
        };
        say!(
            "episode: began {} ended {} peak_fingerprints {}",
            at(e.began_unix_ms),
            ended,
            e.peak_fingerprints
        );
    }
    Ok(r.fingerprints_over_threshold == 0)
}

/// `config-dump`'s flags: only how to reach the daemon.
#[derive(Args)]
pub struct ConfigDumpArgs {
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// `config-dump`: the daemon's running configuration (`Admin/EffectiveConfig`) as one
/// JSON object on standard output: `settings`, `settings_sha256`, `file_sha256`,
/// `loaded_at` (RFC 3339), `restart_pending` and `secrets` (named, never shown). Exit
/// 0, or 2 on an error.
pub async fn config_dump(args: ConfigDumpArgs) -> ExitCode {
    let daemon = args.daemon.shown();
    match config_dump_call(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("portcullis: {}", super::output::report(&*e, &daemon));
            ExitCode::from(2)
        }
    }
}

async fn config_dump_call(args: ConfigDumpArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (channel, bearer) = args.daemon.connect().await?;
    let mut client = AdminClient::with_interceptor(channel, bearer);
    let r = client.effective_config(pb::EffectiveConfigRequest {}).await?.into_inner();
    let settings: serde_json::Value = serde_json::from_str(&r.settings_json)
        .map_err(|e| format!("the daemon's settings_json is not JSON: {e}"))?;
    let loaded_at = std::time::UNIX_EPOCH + Duration::from_millis(r.loaded_unix_ms);
    let dump = serde_json::json!({
        "settings": settings,
        "settings_sha256": r.settings_sha256,
        "file_sha256": r.file_sha256,
        "loaded_at": humantime::format_rfc3339_millis(loaded_at).to_string(),
        "restart_pending": r.restart_pending,
        "secrets": r.secrets,
    });
    say!("{}", serde_json::to_string_pretty(&dump)?);
    Ok(())
}

/// `inspect` prints the door state, failures in the window, step and seconds until the
/// door reopens (with `--flow`, that flow's record: for a mail flow, `failures` counts
/// the mails of the last 24 h); exit 0 when open, 1 when closed. `unlock` prints `unlocked` and
/// `revoke-devices` `devices revoked`, exit 0.
async fn admin<S>(
    mut client: AdminClient<S>,
    account: Option<Account>,
    flow: pb::Flow,
    op: Op,
) -> Result<bool, Box<dyn std::error::Error>>
where
    S: tonic::client::GrpcService<tonic::body::Body>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::ResponseBody: tonic::codegen::Body<Data = tonic::codegen::Bytes> + Send + 'static,
    <S::ResponseBody as tonic::codegen::Body>::Error:
        Into<Box<dyn std::error::Error + Send + Sync>> + Send,
{
    match op {
        Op::Unlock(reason, note) => {
            let reason = match reason {
                UnlockReason::OwnerVerified => pb::UnlockReason::OwnerVerified,
                UnlockReason::AttackMitigated => pb::UnlockReason::AttackMitigated,
                UnlockReason::Other => pb::UnlockReason::Other,
            };
            let request =
                pb::UnlockRequest { account, reason: reason as i32, flow: flow as i32, note };
            client.unlock(request).await?;
            say!("unlocked");
            Ok(true)
        }
        Op::RevokeDevices(note) => {
            client.revoke_devices(pb::RevokeDevicesRequest { account, note }).await?;
            say!("devices revoked");
            Ok(true)
        }
        _ => {
            let request = pb::InspectRequest { account, flow: flow as i32 };
            let r = client.inspect(request).await?.into_inner();
            // Anything but an explicit OPEN, including unknown values, reads as closed.
            let open = r.door == pb::DoorState::Open as i32;
            say!(
                "door: {}\nfailures: {}\nrepeats_forgiven: {}\nstep: {}\nwindow_seconds: {}\nseconds_until_open: {}\nconsecutive_failures: {}\nmax_consecutive_failures: {}\nceiling_reached: {}",
                if open { "open" } else { "closed" },
                r.failures,
                r.repeats_forgiven,
                r.step,
                r.window_seconds,
                r.seconds_until_open,
                r.consecutive_failures,
                r.max_consecutive_failures,
                r.ceiling_reached
            );
            say!("{}", why_shut(&r));
            Ok(open)
        }
    }
}

/// The lines of `inspect` that say why the door is shut: since when (RFC 3339 on the
/// store's clock, `-` when open or unknown) and by what, the known-device lanes, and
/// the distinct client networks of the window (at most 64: "64 or more"); in a realm
/// with a candidate policy, the door it would show (`candidate_door: open|closed`).
fn why_shut(r: &pb::InspectResponse) -> String {
    let shut_by = match pb::ShutBy::try_from(r.shut_by) {
        Ok(pb::ShutBy::Window) => "window",
        Ok(pb::ShutBy::Ceiling) => "ceiling",
        Ok(pb::ShutBy::Unspecified) if r.door == pb::DoorState::Open as i32 => "-",
        // A closed door without a reason this build knows: shut all the same.
        Ok(pb::ShutBy::Unspecified) | Err(_) => "unknown",
    };
    let shut_at = match r.door_shut_unix_ms {
        0 => "-".to_owned(),
        ms => humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + Duration::from_millis(ms))
            .to_string(),
    };
    let networks = match r.distinct_networks {
        n if n as usize >= portcullis::throttle::attempt_count::MAX_NETWORKS => {
            format!("{n} or more")
        }
        n => n.to_string(),
    };
    let candidate = match pb::DoorState::try_from(r.candidate_door) {
        Ok(pb::DoorState::Unspecified) => "",
        Ok(pb::DoorState::Open) => "\ncandidate_door: open",
        Ok(pb::DoorState::Closed) | Err(_) => "\ncandidate_door: closed",
    };
    format!(
        "shut_by: {shut_by}\ndoor_shut_at: {shut_at}\ndevice_lanes: {}\ndevice_failures: {}\ndistinct_networks: {networks}{candidate}",
        r.device_lanes, r.device_failures
    )
}
