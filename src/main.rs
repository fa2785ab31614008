//! The `portcullis` binary: parses the command line, loads configuration, starts
//! telemetry and calls [`portcullis::run`]. Also a small operator client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use portcullis::client::Bearer;
use portcullis::config::{Config, KEY_SECRET_ENV, Overrides, REDIS_PASSWORD_ENV, SentinelConfig};
use portcullis::pb;
use portcullis::pb::admin_client::AdminClient;
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{
    Account, AdmitRequest, ClearAttemptsRequest, ClearReason, Decision, RecordAttemptRequest,
};
use portcullis::telemetry::LogFormat;
use portcullis::transport::ServerLimits;

/// jemalloc, whose background thread hands freed memory back to the OS within about a
/// second: under glibc malloc most of a flood's peak stayed resident after it ended
/// (docs/performance.md, "Memory under a Verify flood").
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at start-up (the `_rjem_` prefix is tikv-jemallocator's):
/// purge dirty and muzzy pages after 1 s, from a background thread.
#[cfg(all(unix, not(target_env = "musl")))]
#[allow(non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000\0";

#[derive(Parser)]
#[command(version, about = "Portcullis: per-account login throttle for a fleet of gateways")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gRPC API until SIGTERM or SIGINT.
    Serve(ServeArgs),
    /// Validate a configuration file without serving.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
    /// Ask whether an account key's door is open (never counts).
    Admit(OperatorArgs),
    /// Count one attempt and print whether it may proceed.
    Attempt {
        #[command(flatten)]
        op: OperatorArgs,
        /// Idempotency id; a retry with the same id counts once.
        #[arg(long, default_value = "")]
        attempt_id: String,
    },
    /// Clear an account key's record.
    Clear {
        #[command(flatten)]
        op: OperatorArgs,
        /// Why the record is cleared.
        #[arg(long, value_enum)]
        reason: Reason,
    },
    /// Operator: show an account key's lockout state (portcullis.v1.Admin/Inspect).
    Inspect(OperatorArgs),
    /// Operator: clear an account key's record (portcullis.v1.Admin/Unlock).
    Unlock {
        #[command(flatten)]
        op: OperatorArgs,
        /// Why the operator unlocks it (logged by the daemon with the caller's name).
        #[arg(long, value_enum)]
        reason: UnlockReason,
    },
    /// Operator: revoke every device token of an account (portcullis.v1.Admin/RevokeDevices).
    RevokeDevices(OperatorArgs),
    /// Operator: a realm's password-spray state (portcullis.v1.Admin/SprayStatus).
    /// Exit status: 0 no fingerprint over the threshold, 1 spraying now, 2 error.
    SprayStatus(SprayStatusArgs),
    /// Ask the daemon's grpc.health.v1 service; exit 0 only on SERVING (a container
    /// HEALTHCHECK). Exit status: 0 serving, 1 not serving, 2 error.
    Health(HealthArgs),
}

#[derive(Args)]
struct HealthArgs {
    /// Daemon address.
    #[arg(long, env = "PORTCULLIS_ADDR", default_value = "http://127.0.0.1:50051")]
    addr: String,
    /// Service to ask about; `""` is the whole daemon.
    #[arg(long, default_value = "")]
    service: String,
    /// Deadline of the connection and the call.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    tls: TlsArgs,
}

/// How a command reaches a daemon that serves TLS (`[tls]`).
#[derive(Args)]
struct TlsArgs {
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
    /// `endpoint` over TLS when `--ca-file` is given. A client certificate without a CA
    /// is an error rather than silently unused.
    fn apply(
        self,
        endpoint: tonic::transport::Endpoint,
    ) -> Result<tonic::transport::Endpoint, Box<dyn std::error::Error>> {
        let Some(ca_file) = self.ca_file else {
            if self.cert_file.is_some() || self.key_file.is_some() {
                return Err("--cert-file and --key-file need --ca-file".into());
            }
            return Ok(endpoint);
        };
        let tls = portcullis::client::ClientTls {
            ca_file,
            cert_file: self.cert_file,
            key_file: self.key_file,
            domain_name: self.domain_name,
        };
        Ok(endpoint.tls_config(tls.load()?)?)
    }
}

#[derive(Args)]
struct ServeArgs {
    /// TOML configuration file.
    #[arg(long, env = "PORTCULLIS_CONFIG")]
    config: Option<PathBuf>,
    /// gRPC listen address (overrides `listen`).
    #[arg(long, env = "PORTCULLIS_LISTEN")]
    listen: Option<SocketAddr>,
    /// Redis URL (overrides `store.redis_url`); without a Redis shape, the embedded store.
    #[arg(long, env = "PORTCULLIS_REDIS_URL", hide_env_values = true)]
    redis_url: Option<String>,
    /// Redis Cluster seed node URLs, comma-separated (overrides `store.redis_cluster_nodes`).
    #[arg(
        long,
        env = "PORTCULLIS_REDIS_CLUSTER_NODES",
        value_delimiter = ',',
        hide_env_values = true
    )]
    redis_cluster_nodes: Option<Vec<String>>,
    /// Sentinel-monitored master name (with `--redis-sentinel-nodes`, overrides
    /// `store.redis_sentinel`).
    #[arg(long, env = "PORTCULLIS_REDIS_SENTINEL_MASTER_NAME", requires = "redis_sentinel_nodes")]
    redis_sentinel_master_name: Option<String>,
    /// Sentinel URLs, comma-separated (with `--redis-sentinel-master-name`).
    #[arg(
        long,
        env = "PORTCULLIS_REDIS_SENTINEL_NODES",
        value_delimiter = ',',
        requires = "redis_sentinel_master_name",
        hide_env_values = true
    )]
    redis_sentinel_nodes: Option<Vec<String>>,
    /// Embedded store's data directory (overrides `store.data_dir`).
    #[arg(long, env = "PORTCULLIS_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Admin HTTP listen address for /metrics, /healthz, /readyz (overrides
    /// `telemetry.admin_listen`); "" disables it.
    #[arg(long, env = "PORTCULLIS_ADMIN_LISTEN")]
    admin_listen: Option<String>,
    /// Log line format on stderr.
    #[arg(long, env = "PORTCULLIS_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Args)]
struct OperatorArgs {
    /// Realm name.
    #[arg(long)]
    realm: String,
    /// The account identifier as a user would type it; `-` reads one line from stdin,
    /// which keeps it out of the process list and shell history.
    #[arg(long)]
    identifier: String,
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// How an operator command reaches the daemon.
#[derive(Args)]
struct DaemonArgs {
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
    /// A connected channel (TLS when `--ca-file` is given) and the bearer token to send.
    async fn connect(
        self,
    ) -> Result<(tonic::transport::Channel, Bearer), Box<dyn std::error::Error>> {
        let endpoint = self.tls.apply(
            tonic::transport::Endpoint::from_shared(self.addr)?
                .connect_timeout(self.timeout)
                .timeout(self.timeout),
        )?;
        let bearer = match self.token_file {
            Some(path) => Bearer::from_file(&path)?,
            None => Bearer::new(None)?,
        };
        Ok((endpoint.connect().await?, bearer))
    }
}

#[derive(Args)]
struct SprayStatusArgs {
    /// Realm name.
    #[arg(long)]
    realm: String,
    #[command(flatten)]
    daemon: DaemonArgs,
}

#[derive(Clone, Copy, ValueEnum)]
enum UnlockReason {
    OwnerVerified,
    AttackMitigated,
    Other,
}

#[derive(Clone, Copy, ValueEnum)]
enum Reason {
    PasswordVerified,
    PasswordResetCompleted,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match &cli.command {
        Command::Serve(args) => server_limits(args).runtime(),
        _ => tokio::runtime::Runtime::new(),
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("portcullis: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command {
        Command::Serve(args) => runtime.block_on(serve(args)),
        Command::CheckConfig { file } => match load(Some(&file), &Overrides::default()) {
            Ok(_) => {
                println!("configuration is valid");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("portcullis: {e}");
                ExitCode::from(2)
            }
        },
        Command::Admit(op) => runtime.block_on(operate(op, Op::Admit)),
        Command::Attempt { op, attempt_id } => {
            runtime.block_on(operate(op, Op::Attempt(attempt_id)))
        }
        Command::Clear { op, reason } => runtime.block_on(operate(op, Op::Clear(reason))),
        Command::Health(args) => runtime.block_on(health(args)),
        Command::Inspect(op) => runtime.block_on(operate(op, Op::Inspect)),
        Command::Unlock { op, reason } => runtime.block_on(operate(op, Op::Unlock(reason))),
        Command::RevokeDevices(op) => runtime.block_on(operate(op, Op::RevokeDevices)),
        Command::SprayStatus(args) => runtime.block_on(async {
            match spray_status(args).await {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    eprintln!("portcullis: {e}");
                    ExitCode::from(2)
                }
            }
        }),
    }
}

/// `[server]` of the configuration `serve` is given, read before the runtime exists
/// because `server.io_threads` chooses the runtime. A configuration that does not load
/// gives the defaults here; `serve` then loads it again and refuses it with the error.
fn server_limits(args: &ServeArgs) -> ServerLimits {
    Config::load(args.config.as_deref(), &Overrides::default())
        .map(|config| config.server)
        .unwrap_or_default()
}

/// The configuration of `file` with `overrides` and the environment's secrets, and what
/// it validates to.
fn load(
    file: Option<&Path>,
    overrides: &Overrides,
) -> Result<(Config, portcullis::config::Settings), Box<dyn std::error::Error + Send + Sync>> {
    let config = Config::load(file, overrides)?;
    let settings = config.validate_with(
        std::env::var(KEY_SECRET_ENV).ok(),
        std::env::var(REDIS_PASSWORD_ENV).ok(),
    )?;
    Ok((config, settings))
}

async fn serve(args: ServeArgs) -> ExitCode {
    // First: from here on no signal an init system sends ends the process unplanned.
    portcullis::reload::install_handlers();
    let shutdown = shutdown_signal();
    let telemetry = portcullis::telemetry::init(args.log_format);
    let code = serve_with(args, shutdown).await;
    // Buffered spans are exported before the process exits.
    telemetry.shutdown().await;
    code
}

async fn serve_with(
    args: ServeArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> ExitCode {
    let redis_sentinel = args
        .redis_sentinel_master_name
        .zip(args.redis_sentinel_nodes)
        .map(|(master_name, nodes)| SentinelConfig { master_name, nodes });
    let overrides = Overrides {
        listen: args.listen,
        redis_url: args.redis_url,
        redis_cluster_nodes: args.redis_cluster_nodes,
        redis_sentinel,
        data_dir: args.data_dir,
        admin_listen: args.admin_listen,
    };
    let (config, settings) = match load(args.config.as_deref(), &overrides) {
        Ok(loaded) => loaded,
        Err(e) => {
            tracing::error!("refusing to start: {}", chain(e.as_ref()));
            return ExitCode::from(2);
        }
    };
    // SIGHUP reads the same file, flags and environment again.
    let file = args.config.clone();
    let source: portcullis::reload::SettingsSource =
        std::sync::Arc::new(move || load(file.as_deref(), &overrides));
    let listen = settings.listen;
    let admin_listen = settings.admin_listen;
    // The store opens (and the data directory is checked and locked) before the port
    // is taken: a daemon that cannot count never listens.
    let daemon = match portcullis::Daemon::new(settings) {
        Ok(d) => d.with_reload_source(source, config),
        Err(e) => {
            tracing::error!("refusing to start: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    if let Err(e) = daemon.preflight().await {
        tracing::error!("refusing to start: {}", chain(&e));
        return ExitCode::from(2);
    }
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("cannot listen on {listen}: {e}");
            return ExitCode::from(2);
        }
    };
    let daemon = match admin_listen {
        None => daemon,
        Some(admin) => match tokio::net::TcpListener::bind(admin).await {
            Ok(l) => daemon.with_admin_listener(l),
            Err(e) => {
                tracing::error!("cannot listen on {admin} (telemetry.admin_listen): {e}");
                return ExitCode::from(2);
            }
        },
    };
    match listener.local_addr() {
        Ok(addr) => tracing::info!("listening on {addr}"),
        Err(e) => tracing::warn!("listening, address unknown: {e}"),
    }
    match daemon.serve(listener, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("daemon stopped: {}", chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes, `: `-separated (each names a setting or a path, never a
/// secret or an identifier).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A future that resolves on the first SIGINT or SIGTERM from now on: the handlers are
/// installed when this is called (first thing in `serve`), so a stop signal during
/// start-up is not lost, nor does it end the process before its drain.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let streams = (signal(SignalKind::terminate()), signal(SignalKind::interrupt()));
        async move {
            match streams {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                _ => {
                    tracing::warn!("no SIGTERM handler: stopping on Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            tracing::info!("shutdown signal received");
        }
    }
    #[cfg(not(unix))]
    async move {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown signal received");
    }
}

enum Op {
    Admit,
    Attempt(String),
    Clear(Reason),
    Inspect,
    Unlock(UnlockReason),
    RevokeDevices,
}

/// The operator client. Exit status: 0 allow (or cleared), 1 deny, 2 error. Any error
/// is reported as an error, never as allow.
async fn operate(args: OperatorArgs, op: Op) -> ExitCode {
    match call(args, op).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("portcullis: {e}");
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
    let (channel, bearer) = args.daemon.connect().await?;
    let account = Some(Account { realm: args.realm, identifier });
    if matches!(op, Op::Inspect | Op::Unlock(_) | Op::RevokeDevices) {
        return admin(AdminClient::with_interceptor(channel, bearer), account, op).await;
    }
    let mut client = GovernorClient::with_interceptor(channel, bearer);
    let decision = match op {
        Op::Admit => client.admit(AdmitRequest { account }).await?.into_inner().decision,
        Op::Attempt(attempt_id) => {
            client
                .record_attempt(RecordAttemptRequest { account, attempt_id })
                .await?
                .into_inner()
                .decision
        }
        Op::Clear(reason) => {
            let reason = match reason {
                Reason::PasswordVerified => ClearReason::PasswordVerified,
                Reason::PasswordResetCompleted => ClearReason::PasswordResetCompleted,
            };
            client.clear_attempts(ClearAttemptsRequest { account, reason: reason as i32 }).await?;
            println!("cleared");
            return Ok(true);
        }
        Op::Inspect | Op::Unlock(_) | Op::RevokeDevices => unreachable!("handled by admin()"),
    };
    // Anything but an explicit ALLOW, including values this version does not know, is deny.
    let allowed = decision == Decision::Allow as i32;
    println!("{}", if allowed { "ALLOW" } else { "DENY" });
    Ok(allowed)
}

/// The health probe. Fail closed: only an explicit SERVING exits 0; NOT_SERVING, an
/// unknown status, an unknown service, a refused connection or a timeout exit non-zero.
async fn health(args: HealthArgs) -> ExitCode {
    use tonic_health::pb::health_check_response::ServingStatus;
    match check_health(args).await {
        Ok(status) if status == ServingStatus::Serving as i32 => {
            println!("SERVING");
            ExitCode::SUCCESS
        }
        Ok(status) => {
            let name = ServingStatus::try_from(status).map_or("UNKNOWN", |s| s.as_str_name());
            println!("{name}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("portcullis: {e}");
            ExitCode::from(2)
        }
    }
}

async fn check_health(args: HealthArgs) -> Result<i32, Box<dyn std::error::Error>> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let endpoint = args.tls.apply(
        tonic::transport::Endpoint::from_shared(args.addr)?
            .connect_timeout(args.timeout)
            .timeout(args.timeout),
    )?;
    let mut client = HealthClient::new(endpoint.connect().await?);
    let answer = client.check(HealthCheckRequest { service: args.service }).await?;
    Ok(answer.into_inner().status)
}

/// `spray-status` prints the fingerprints over the threshold now and each episode;
/// `Ok(true)` when none is over the threshold.
async fn spray_status(args: SprayStatusArgs) -> Result<bool, Box<dyn std::error::Error>> {
    let (channel, bearer) = args.daemon.connect().await?;
    let mut client = AdminClient::with_interceptor(channel, bearer);
    let r = client.spray_status(pb::SprayStatusRequest { realm: args.realm }).await?.into_inner();
    println!("fingerprints_over_threshold: {}", r.fingerprints_over_threshold);
    let at = |ms: u64| {
        humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_millis(ms))
    };
    for e in &r.episodes {
        let ended = if e.ended_unix_ms == 0 {
            "ongoing".to_owned()
        } else {
            at(e.ended_unix_ms).to_string()
        };
        println!(
            "episode: began {} ended {} peak_fingerprints {}",
            at(e.began_unix_ms),
            ended,
            e.peak_fingerprints
        );
    }
    Ok(r.fingerprints_over_threshold == 0)
}

/// `inspect` prints the door state, failures in the window, step and seconds until the
/// door reopens; exit 0 when open, 1 when closed. `unlock` prints `unlocked` and
/// `revoke-devices` `devices revoked`, exit 0.
async fn admin<S>(
    mut client: AdminClient<S>,
    account: Option<Account>,
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
        Op::Unlock(reason) => {
            let reason = match reason {
                UnlockReason::OwnerVerified => pb::UnlockReason::OwnerVerified,
                UnlockReason::AttackMitigated => pb::UnlockReason::AttackMitigated,
                UnlockReason::Other => pb::UnlockReason::Other,
            };
            client.unlock(pb::UnlockRequest { account, reason: reason as i32 }).await?;
            println!("unlocked");
            Ok(true)
        }
        Op::RevokeDevices => {
            client.revoke_devices(pb::RevokeDevicesRequest { account }).await?;
            println!("devices revoked");
            Ok(true)
        }
        _ => {
            let r = client.inspect(pb::InspectRequest { account }).await?.into_inner();
            // Anything but an explicit OPEN, including unknown values, reads as closed.
            let open = r.door == pb::DoorState::Open as i32;
            println!(
                "door: {}\nfailures: {}\nstep: {}\nwindow_seconds: {}\nseconds_until_open: {}",
                if open { "open" } else { "closed" },
                r.failures,
                r.step,
                r.window_seconds,
                r.seconds_until_open
            );
            Ok(open)
        }
    }
}
