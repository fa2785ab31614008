//! `portcullis serve`: install the signal handlers (first thing in `main`), parse the
//! configuration once, build the runtime it asks for (`server.io_threads`), start telemetry, validate, build
//! the daemon, bind, serve until SIGTERM or SIGINT; and `portcullis check-config`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use portcullis::config::{Config, KEY_SECRET_ENV, Overrides, REDIS_PASSWORD_ENV, SentinelConfig};
use portcullis::telemetry::LogFormat;

#[derive(Args)]
pub struct ServeArgs {
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

impl ServeArgs {
    /// The configuration file given, if any.
    pub(crate) fn config(&self) -> Option<&Path> {
        self.config.as_deref()
    }

    /// The flags that replace the file's values.
    pub(crate) fn overrides(&self) -> Overrides {
        let redis_sentinel = self
            .redis_sentinel_master_name
            .clone()
            .zip(self.redis_sentinel_nodes.clone())
            .map(|(master_name, nodes)| SentinelConfig { master_name, nodes });
        Overrides {
            listen: self.listen,
            redis_url: self.redis_url.clone(),
            redis_cluster_nodes: self.redis_cluster_nodes.clone(),
            redis_sentinel,
            data_dir: self.data_dir.clone(),
            admin_listen: self.admin_listen.clone(),
        }
    }
}

/// `portcullis check-config FILE`: exit 0 when the file validates, 2 (with the error)
/// otherwise. It reads every file the configuration names.
pub fn check_config(file: &Path) -> ExitCode {
    // The breach filter file is read as `serve` would, so a missing or broken one is
    // found here too.
    let checked = load(Some(file), &Overrides::default()).and_then(|(_, settings)| {
        portcullis::defence::breach::BreachList::load(&settings.breach)
            .map(drop)
            .map_err(Into::into)
    });
    match checked {
        Ok(()) => {
            say!("configuration is valid");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("portcullis: {}", chain(&*e));
            ExitCode::from(2)
        }
    }
}

/// Runs the daemon. The file is parsed once, before the runtime exists, because
/// `server.io_threads` chooses the runtime; it is validated (which reads the files it
/// names) inside the runtime, once telemetry can report an error.
pub fn serve(args: ServeArgs, early: EarlySignals) -> ExitCode {
    let overrides = args.overrides();
    let parsed = Config::load(args.config.as_deref(), &overrides);
    let runtime = match &parsed {
        Ok(config) => config.server.runtime(),
        // Only to report the error.
        Err(_) => tokio::runtime::Builder::new_current_thread().enable_all().build(),
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("portcullis: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let code = runtime.block_on(async move {
        // The handlers have been in place since `main` began (`EarlySignals`): no signal
        // an init system sends ends the process unplanned.
        let shutdown = shutdown_signal(early);
        let telemetry = portcullis::telemetry::init(args.log_format);
        let code = match parsed {
            Ok(config) => serve_config(config, args.config, overrides, shutdown).await,
            Err(e) => {
                tracing::error!("refusing to start: {}", chain(&e));
                ExitCode::from(2)
            }
        };
        // Buffered spans are exported before the process exits.
        telemetry.shutdown().await;
        code
    });
    // A file read stuck in the kernel (a hung network mount under a reloaded file) must
    // not keep a drained daemon from exiting.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    code
}

/// The configuration of `file` with `overrides` and the environment's secrets, and what
/// it validates to.
pub(crate) fn load(
    file: Option<&Path>,
    overrides: &Overrides,
) -> Result<(Config, portcullis::config::Settings), Box<dyn std::error::Error + Send + Sync>> {
    let config = Config::load(file, overrides)?;
    let settings = validate(&config, file)?;
    Ok((config, settings))
}

/// `config` validated with the environment's secrets; its report names the digest of
/// `file`, the file it was read from.
fn validate(
    config: &Config,
    file: Option<&Path>,
) -> Result<portcullis::config::Settings, portcullis::config::ConfigError> {
    let mut settings = config.validate_with(
        std::env::var(KEY_SECRET_ENV).ok(),
        std::env::var(REDIS_PASSWORD_ENV).ok(),
    )?;
    if let Some(file) = file {
        settings.report = settings.report.from_file(portcullis::config::file_sha256(file)?);
    }
    Ok(settings)
}

async fn serve_config(
    config: Config,
    file: Option<PathBuf>,
    overrides: Overrides,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> ExitCode {
    let settings = match validate(&config, file.as_deref()) {
        Ok(settings) => settings,
        Err(e) => {
            tracing::error!("refusing to start: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    // Which setting an address came from, for the error when it cannot be bound.
    let listen_setting = if overrides.listen.is_some() { "--listen" } else { "listen" };
    let admin_setting =
        if overrides.admin_listen.is_some() { "--admin-listen" } else { "telemetry.admin_listen" };
    // SIGHUP reads the same file, flags and environment again.
    let source: portcullis::daemon::reload::SettingsSource =
        std::sync::Arc::new(move || load(file.as_deref(), &overrides));
    let listen = settings.listen;
    let admin_listen: Option<SocketAddr> = settings.admin_listen;
    // The store opens (and the data directory is checked and locked) before the port
    // is taken; an unsafe Redis stops the start right after (preflight).
    let daemon = match portcullis::Daemon::new(settings) {
        Ok(d) => d.with_reload_source(source, config),
        Err(e) => {
            tracing::error!("refusing to start: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("refusing to start: {}", cannot_listen(listen_setting, listen, &e));
            return ExitCode::from(2);
        }
    };
    let daemon = match admin_listen {
        None => daemon,
        Some(admin) => match tokio::net::TcpListener::bind(admin).await {
            Ok(l) => daemon.with_admin_listener(l),
            Err(e) => {
                tracing::error!("refusing to start: {}", cannot_listen(admin_setting, admin, &e));
                return ExitCode::from(2);
            }
        },
    };
    // The ports first, then the store's first answer: a daemon that cannot listen never
    // writes the store's key check value (docs/store.md, "One key secret per store").
    if let Err(e) = daemon.preflight().await {
        tracing::error!("refusing to start: {}", chain(&e));
        return ExitCode::from(2);
    }
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

/// An error and its causes, `: `-separated, each once (each names a setting or a path,
/// never a secret or an identifier).
fn chain(e: &dyn std::error::Error) -> String {
    portcullis::setting::error_chain(e)
}

/// Why `setting` (the file's key or the flag that set it) cannot be served on: the
/// address, the OS's reason, and what to do.
fn cannot_listen(setting: &str, addr: SocketAddr, e: &std::io::Error) -> String {
    let what = match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            "another process (another daemon?) holds that port: stop it, or choose a free port"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            "no interface of this host has that address: use one of its addresses, or 0.0.0.0"
        }
        std::io::ErrorKind::PermissionDenied => {
            "ports below 1024 need privileges: choose a port above 1023, or grant \
             CAP_NET_BIND_SERVICE"
        }
        _ => "choose another address",
    };
    format!("cannot listen on {addr} ({setting}): {e}; {what}")
}

/// The process's signal handlers, installed first thing in `main` for `serve`, before
/// the command line is parsed, the configuration read or the runtime built: SIGHUP,
/// SIGUSR1 and SIGUSR2 are then never fatal, and the SIGTERM and SIGINT streams made
/// here keep a stop signal sent during start-up until the daemon serves.
pub struct EarlySignals {
    /// SIGTERM's and SIGINT's streams (`None` when they could not be installed).
    #[cfg(unix)]
    stop: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl EarlySignals {
    /// Installs the handlers. tokio installs a process handler once and keeps it; its
    /// streams are woken by any runtime's signal driver, so the small runtime made here
    /// only to install them is dropped at once.
    pub fn install() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let Ok(runtime) = tokio::runtime::Builder::new_current_thread().enable_io().build()
            else {
                // Nothing installed yet: `serve` reports the runtime error that follows.
                return Self { stop: None };
            };
            let _entered = runtime.enter();
            portcullis::daemon::reload::install_handlers();
            let stop =
                signal(SignalKind::terminate()).ok().zip(signal(SignalKind::interrupt()).ok());
            Self { stop }
        }
        #[cfg(not(unix))]
        Self {}
    }
}

/// A future that resolves on the first SIGINT or SIGTERM since `early` was installed
/// (first thing in `main`), so a stop signal during start-up is not lost, nor does it end
/// the process before its drain.
fn shutdown_signal(early: EarlySignals) -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        async move {
            match early.stop {
                Some((mut term, mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                None => {
                    tracing::warn!("no SIGTERM handler: stopping on Ctrl-C only");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
            tracing::info!("shutdown signal received");
        }
    }
    #[cfg(not(unix))]
    async move {
        let _ = early;
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutdown signal received");
    }
}
