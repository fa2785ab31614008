//! The daemon under test: in this process on `127.0.0.1:0` ([`Daemon`]), or the real
//! binary in its own process ([`DaemonProcess`]).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis::config::Settings;

use crate::client::Client;
use crate::config::{SECRET, TestConfig};
use crate::server::RedisServer;

/// The `portcullis` binary a [`DaemonProcess`] runs: this tree's, or the one
/// `PORTCULLIS_BINARY` names (benches compare an older build with it).
pub fn daemon_binary() -> PathBuf {
    if let Some(binary) = std::env::var_os("PORTCULLIS_BINARY") {
        return binary.into();
    }
    // Tests and benches run from `target/<profile>/deps/`; cargo builds the package's
    // binary beside that directory before it runs them.
    let exe = std::env::current_exe().expect("the test binary's path");
    let profile = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/");
    profile.join(format!("portcullis{}", std::env::consts::EXE_SUFFIX))
}

/// A daemon running in this test process on `127.0.0.1:0`.
pub struct Daemon {
    pub addr: SocketAddr,
    /// The daemon's verifier, to watch its CPU governor.
    pub verifier: Arc<portcullis::verify::Verifier>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), portcullis::RunError>>>,
}

impl Daemon {
    pub async fn start(settings: Settings) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let daemon = portcullis::Daemon::new(settings).expect("daemon builds");
        let verifier = daemon.verifier().clone();
        let task = tokio::spawn(daemon.serve(listener, async move {
            let _ = stopped.await;
        }));
        Self { addr, verifier, stop: Some(stop), task: Some(task) }
    }

    /// A daemon with [`REALMS_TOML`](crate::config::REALMS_TOML) and `extra` on `redis` (`Some`), or on an embedded
    /// store in `dir/data`: for behaviour every store must show alike.
    pub async fn on(redis: Option<&RedisServer>, dir: &Path, extra: &str) -> Self {
        let settings = match redis {
            Some(r) => TestConfig::redis(&r.url()).extra(extra).settings(),
            None => TestConfig::embedded(&dir.join("data")).extra(extra).settings(),
        };
        Self::start(settings).await
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }

    /// The CPU governor's counters now.
    pub fn budget(&self) -> portcullis::verify::budget::BudgetStats {
        self.verifier.budget().stats()
    }

    /// Stops the daemon and waits for `run` to return.
    pub async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
    }
}

/// The real `portcullis` binary, serving until dropped (SIGKILL) or [`Self::terminate`]d.
pub struct DaemonProcess {
    child: Child,
    pub addr: SocketAddr,
    /// Everything the daemon wrote to stderr (its logs).
    pub logs: Arc<Mutex<String>>,
    /// The admin listener's address, from its log line.
    admin: Arc<Mutex<Option<SocketAddr>>>,
    _config: tempfile::TempDir,
}

impl DaemonProcess {
    /// Starts `portcullis serve` with `config` (TOML) and the test secret in the
    /// environment, at debug log level, and waits for its "listening on" line.
    pub fn spawn(config: &str) -> Self {
        Self::spawn_with_secret(config, Some(SECRET))
    }

    /// As [`Self::spawn`]; `secret: None` leaves `PORTCULLIS_KEY_SECRET` unset (the
    /// embedded store then uses its data directory's own).
    pub fn spawn_with_secret(config: &str, secret: Option<&str>) -> Self {
        Self::spawn_with(config, secret, "debug", &[])
    }

    /// As [`Self::spawn`] at log level `info` (no per-call debug logs), for benches.
    pub fn spawn_quiet(config: &str) -> Self {
        Self::spawn_with(config, Some(SECRET), "info", &[])
    }

    /// As [`Self::spawn`] with extra environment variables.
    pub fn spawn_with_env(config: &str, env: &[(&str, &str)]) -> Self {
        Self::spawn_with(config, Some(SECRET), "debug", env)
    }

    /// As [`Self::spawn_with_env`] with `RUST_LOG` set to `log_level`.
    pub fn spawn_at(config: &str, log_level: &str, env: &[(&str, &str)]) -> Self {
        Self::spawn_with(config, Some(SECRET), log_level, env)
    }

    fn spawn_with(
        config: &str,
        secret: Option<&str>,
        log_level: &str,
        env: &[(&str, &str)],
    ) -> Self {
        // The default admin port (9464) is shared: a developer's own daemon may hold it.
        assert!(
            config.contains("admin_listen"),
            "a test daemon's config must set [telemetry] admin_listen (TEST_TOP_LEVEL or TestConfig::admin)"
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("portcullis.toml");
        std::fs::write(&path, config).unwrap();
        let mut command = Command::new(daemon_binary());
        match secret {
            Some(secret) => command.env("PORTCULLIS_KEY_SECRET", secret),
            None => command.env_remove("PORTCULLIS_KEY_SECRET"),
        };
        for (name, _) in std::env::vars() {
            if name.starts_with("OTEL_") {
                command.env_remove(name);
            }
        }
        command.envs(env.iter().copied());
        let mut child = command
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", log_level)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        let admin = Arc::new(Mutex::new(None));
        let admin_sink = admin.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                // The address ends the text line, or the JSON line's message string.
                let addr_after = |marker: &str| {
                    line.split(marker)
                        .nth(1)
                        .and_then(|a| a.split(['"', ' ']).next())
                        .map(str::to_owned)
                };
                if let Some(addr) = addr_after("listening on ") {
                    let _ = tx.send(addr);
                }
                if let Some(addr) = addr_after("admin HTTP (metrics, health) at ") {
                    *admin_sink.lock().unwrap() = addr.parse().ok();
                }
                let mut logs = sink.lock().unwrap();
                logs.push_str(&line);
                logs.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(addr) => addr.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                panic!("daemon did not start; logs:\n{}", logs.lock().unwrap());
            }
        };
        Self { child, addr, logs, admin, _config: dir }
    }

    /// The admin listener's address (the daemon must have been started with
    /// [`TestConfig::admin`]); waits up to 10 s for its log line.
    pub fn admin_addr(&self) -> SocketAddr {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(addr) = *self.admin.lock().unwrap() {
                return addr;
            }
            assert!(Instant::now() < deadline, "no admin listener; logs:\n{}", self.logs());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The process id (to send signals).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The configuration file the daemon was started with (rewrite it, then SIGHUP).
    pub fn config_path(&self) -> PathBuf {
        self._config.path().join("portcullis.toml")
    }

    /// Sends signal `name` (`HUP`, `USR1`, …) to the daemon.
    pub fn signal(&self, name: &str) {
        let sent =
            Command::new("kill").arg(format!("-{name}")).arg(self.pid().to_string()).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{name} failed");
    }

    /// Waits up to 10 s until the logs contain `text` (`n`-th occurrence); panics with the
    /// logs otherwise.
    pub async fn wait_for_log(&self, text: &str, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.logs().matches(text).count() < n {
            assert!(Instant::now() < deadline, "no {text:?} (x{n}) in the logs:\n{}", self.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits up to `limit` for the process to exit; its status, or `None`.
    pub async fn wait_exit(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        None
    }

    pub async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }

    /// SIGTERM, then waits for a clean exit; returns the exit status. Async, so this
    /// test's own clients keep running and can answer the daemon's GOAWAY.
    pub async fn terminate(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "daemon did not stop after SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().clone()
    }

    /// SIGKILL, as a crash would: no shutdown code runs.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
