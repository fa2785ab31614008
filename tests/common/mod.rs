//! Test harness: a real `redis-server` per test on a free port (never the shared 6379,
//! never FLUSHDB), the daemon in-process on `127.0.0.1:0` or as a real process, and
//! helpers to read the store the way an auditor would.
#![allow(dead_code)]

pub mod pki;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener as StdListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis::client::Bearer;
use portcullis::config::{Config, Overrides, Settings};
use portcullis::normalize::{Normalization, normalize};
use portcullis::pb::admin_client::AdminClient;
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{
    Account, AdmitRequest, ClearAttemptsRequest, Decision, RecordAttemptRequest, VerifyRequest,
    VerifyResponse,
};
use portcullis::store::keys::{AccountKey, KeySecret};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// The key secret every test daemon uses (test data, not a real secret).
pub const SECRET: &str = "test-secret-0123456789abcdef0123456789";

/// Realms the tests use: `default` (the design's defaults), `mfa` (second factor
/// required), `exact`, `ascii`, `ab`/`a` for the concatenation case, and `fast` (a
/// bcrypt cost-4 target, for tests that need many cheap comparisons).
pub const REALMS_TOML: &str = r#"
[realms.default]
[realms.mfa]
second_factor_required = true
[realms.exact]
normalization = "exact"
[realms.ascii]
normalization = "ascii_lowercase"
[realms.ab]
[realms.a]
[realms.fast]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
"#;

/// A `redis-server` child on a free loopback port, in its own temporary directory.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    /// Append-only file on, so a restart keeps the data (scripts are never kept).
    persistent: bool,
}

impl RedisServer {
    /// Starts a server that keeps nothing on disk.
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// Starts a server with the append-only file on (`appendfsync always`).
    pub fn start_persistent() -> Self {
        Self::start_with(true)
    }

    fn start_with(persistent: bool) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = Self { child: None, port: 0, dir, persistent };
        for _ in 0..20 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!("could not start redis-server on a free port");
    }

    fn spawn(&mut self) -> bool {
        let mut cmd = Command::new(redis_server_binary());
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--daemonize", "no", "--loglevel", "warning"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if self.persistent {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        let child = cmd.spawn().expect("redis-server must be installed (see .ci/run)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if self.child.as_mut().unwrap().try_wait().unwrap().is_some() {
                // Exited: most likely the port was taken in the meantime.
                self.child = None;
                return false;
            }
            if let Ok(mut c) = self.client().get_connection()
                && redis::cmd("PING").query::<String>(&mut c).is_ok()
            {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).unwrap()
    }

    pub fn conn(&self) -> redis::Connection {
        self.client().get_connection().expect("redis connection")
    }

    /// Stops the server (SIGKILL after a clean SHUTDOWN attempt).
    pub fn stop(&mut self) {
        if let Ok(mut c) = self.conn_quick() {
            let _: redis::RedisResult<()> = redis::cmd("SHUTDOWN").query(&mut c);
        }
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && child.try_wait().unwrap().is_none() {
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port and directory.
    pub fn restart(&mut self) {
        self.stop();
        for _ in 0..100 {
            if self.spawn() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("redis-server did not restart on port {}", self.port);
    }

    fn conn_quick(&self) -> redis::RedisResult<redis::Connection> {
        self.client().get_connection_with_timeout(Duration::from_millis(500))
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn redis_server_binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER").map(PathBuf::from).unwrap_or_else(|| "redis-server".into())
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Daemon settings for tests: [`REALMS_TOML`] plus `extra` TOML, against `redis_url`.
pub fn settings(redis_url: &str, extra: &str) -> Settings {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, config_toml(redis_url, extra)).unwrap();
    Config::load(Some(&path), &Overrides::default()).unwrap().validate(Some(SECRET.into())).unwrap()
}

/// Daemon settings for the embedded store in `data_dir`, with [`REALMS_TOML`].
pub fn embedded_settings(data_dir: &Path) -> Settings {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, embedded_config_toml(data_dir, "")).unwrap();
    Config::load(Some(&path), &Overrides::default()).unwrap().validate(Some(SECRET.into())).unwrap()
}

/// The TOML the tests' daemons run with.
pub fn config_toml(redis_url: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n[store]\nredis_url = \"{redis_url}\"\noperation_timeout = \"300ms\"\n{extra}\n{REALMS_TOML}"
    )
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

    pub async fn client(&self) -> Client {
        Client::connect(self.addr).await
    }

    /// The CPU governor's counters now.
    pub fn governor(&self) -> portcullis::verify::governor::GovernorStats {
        self.verifier.governor().stats()
    }

    /// Stops the daemon and waits for `run` to return.
    pub async fn shutdown(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task.take().unwrap().await.unwrap().unwrap();
    }
}

/// A thin test client with a deadline on every call, so a hung daemon fails the test
/// instead of hanging it.
#[derive(Clone)]
pub struct Client(pub GovernorClient<Channel>);

/// Deadline of every test call.
pub const CALL_DEADLINE: Duration = Duration::from_secs(5);

impl Client {
    pub async fn connect(addr: SocketAddr) -> Self {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .timeout(CALL_DEADLINE)
            .connect_timeout(CALL_DEADLINE)
            .connect()
            .await
            .expect("connect to daemon");
        Self(GovernorClient::new(channel))
    }

    pub async fn attempt(
        &mut self,
        realm: &str,
        identifier: &str,
    ) -> Result<Decision, tonic::Status> {
        self.attempt_with_id(realm, identifier, "").await
    }

    pub async fn attempt_with_id(
        &mut self,
        realm: &str,
        identifier: &str,
        attempt_id: &str,
    ) -> Result<Decision, tonic::Status> {
        let req = RecordAttemptRequest {
            account: account(realm, identifier),
            attempt_id: attempt_id.into(),
        };
        let d = self.0.record_attempt(req).await?.into_inner().decision;
        Ok(Decision::try_from(d).expect("daemon sent a known decision"))
    }

    pub async fn admit(
        &mut self,
        realm: &str,
        identifier: &str,
    ) -> Result<Decision, tonic::Status> {
        let d = self
            .0
            .admit(AdmitRequest { account: account(realm, identifier) })
            .await?
            .into_inner()
            .decision;
        Ok(Decision::try_from(d).expect("daemon sent a known decision"))
    }

    /// `Verify` with a fresh attempt id; returns the whole response.
    pub async fn verify(
        &mut self,
        realm: &str,
        identifier: &str,
        password: &[u8],
        stored_hash: &str,
        client_key: &str,
    ) -> Result<VerifyResponse, tonic::Status> {
        let req = VerifyRequest {
            account: account(realm, identifier),
            password: password.to_vec(),
            stored_hash: stored_hash.into(),
            client_key: client_key.into(),
            attempt_id: uuid::Uuid::new_v4().to_string(),
        };
        Ok(self.0.verify(req).await?.into_inner())
    }

    pub async fn clear(
        &mut self,
        realm: &str,
        identifier: &str,
        reason: i32,
    ) -> Result<(), tonic::Status> {
        self.0
            .clear_attempts(ClearAttemptsRequest { account: account(realm, identifier), reason })
            .await
            .map(drop)
    }
}

pub fn account(realm: &str, identifier: &str) -> Option<Account> {
    Some(Account { realm: realm.into(), identifier: identifier.into() })
}

/// The record key of (realm, identifier) as the daemon derives it.
pub fn record_key(realm: &str, mode: Normalization, identifier: &str) -> String {
    let secret = KeySecret::new(SECRET.as_bytes().to_vec());
    AccountKey::new(&secret, realm, &normalize(mode, identifier).unwrap()).record()
}

/// `(failures, window_start_ms, step)` of a record, or `None`.
pub fn read_record(conn: &mut redis::Connection, key: &str) -> Option<(u64, u64, u32)> {
    let (f, ws, st): (Option<u64>, Option<u64>, Option<u32>) =
        redis::cmd("HMGET").arg(key).arg("f").arg("ws").arg("st").query(conn).unwrap();
    Some((f?, ws?, st?))
}

/// Moves a record's window start `ms` into the past: the same as waiting `ms` on the
/// store's clock, for the rule that compares `now - window_start` with the window.
pub fn age_record(conn: &mut redis::Connection, key: &str, ms: u64) {
    let ws: u64 = redis::cmd("HGET").arg(key).arg("ws").query(conn).unwrap();
    let _: () = redis::cmd("HSET").arg(key).arg("ws").arg(ws - ms).query(conn).unwrap();
}

/// Audits a store after a test: no key or value contains any of `secrets` (in any
/// ASCII case), and every key has an expiry.
pub fn assert_store_clean(conn: &mut redis::Connection, secrets: &[&str]) {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    for key in &keys {
        let lower = key.to_lowercase();
        for s in secrets {
            assert!(
                !lower.contains(&s.to_lowercase()),
                "a store key contains an identifier in clear"
            );
        }
        assert!(key.starts_with("portcullis:v1:{"), "unexpected key layout");
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
        assert!(ttl > 0, "a key has no expiry (PTTL {ttl})");
        let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(conn).unwrap();
        let dump = String::from_utf8_lossy(&dump).to_lowercase();
        for s in secrets {
            assert!(!dump.contains(&s.to_lowercase()), "a stored value contains an identifier");
        }
    }
}

pub fn dbsize(conn: &mut redis::Connection) -> u64 {
    redis::cmd("DBSIZE").query(conn).unwrap()
}

/// The real `portcullis` binary, serving until dropped (SIGKILL) or [`Self::terminate`]d.
pub struct DaemonProcess {
    child: Child,
    pub addr: SocketAddr,
    /// Everything the daemon wrote to stderr (its logs).
    pub logs: Arc<Mutex<String>>,
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
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("portcullis.toml");
        std::fs::write(&path, config).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_portcullis"));
        match secret {
            Some(secret) => command.env("PORTCULLIS_KEY_SECRET", secret),
            None => command.env_remove("PORTCULLIS_KEY_SECRET"),
        };
        let mut child = command
            .arg("serve")
            .arg("--config")
            .arg(&path)
            .env("RUST_LOG", "debug")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let stderr = child.stderr.take().unwrap();
        let sink = logs.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("listening on ").nth(1) {
                    let _ = tx.send(addr.trim().to_owned());
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
        Self { child, addr, logs, _config: dir }
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

    /// The daemon's process id, to send it signals.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash would: no shutdown code runs.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The TOML of a daemon on the embedded store in `data_dir`.
pub fn embedded_config_toml(data_dir: &Path, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n[store]\ndata_dir = {:?}\noperation_timeout = \"2s\"\n{extra}\n{REALMS_TOML}",
        data_dir.display().to_string()
    )
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A caller's two clients (Governor, Admin) on one channel, with an optional bearer
/// token, over TLS when `tls` is given (to `https://localhost:PORT`).
pub struct Caller {
    pub governor: GovernorClient<InterceptedService<Channel, Bearer>>,
    pub admin: AdminClient<InterceptedService<Channel, Bearer>>,
}

pub async fn caller(
    addr: SocketAddr,
    tls: Option<tonic::transport::ClientTlsConfig>,
    token: Option<&str>,
) -> Result<Caller, tonic::transport::Error> {
    let url = match &tls {
        Some(_) => format!("https://localhost:{}", addr.port()),
        None => format!("http://{addr}"),
    };
    let mut endpoint = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .timeout(CALL_DEADLINE)
        .connect_timeout(CALL_DEADLINE);
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls)?;
    }
    let channel = endpoint.connect().await?;
    let bearer = Bearer::new(token).unwrap();
    Ok(Caller {
        governor: GovernorClient::with_interceptor(channel.clone(), bearer.clone()),
        admin: AdminClient::with_interceptor(channel, bearer),
    })
}

impl Caller {
    pub async fn attempt(
        &mut self,
        realm: &str,
        identifier: &str,
    ) -> Result<Decision, tonic::Status> {
        let req =
            RecordAttemptRequest { account: account(realm, identifier), attempt_id: String::new() };
        let d = self.governor.record_attempt(req).await?.into_inner().decision;
        Ok(Decision::try_from(d).expect("daemon sent a known decision"))
    }

    pub async fn inspect(
        &mut self,
        realm: &str,
        identifier: &str,
    ) -> Result<portcullis::pb::InspectResponse, tonic::Status> {
        let req = portcullis::pb::InspectRequest { account: account(realm, identifier) };
        Ok(self.admin.inspect(req).await?.into_inner())
    }
}

/// `addr` is reachable over TLS with `tls` and answers a RecordAttempt, or the error.
pub async fn try_attempt(
    addr: SocketAddr,
    tls: Option<tonic::transport::ClientTlsConfig>,
    token: Option<&str>,
) -> Result<Decision, String> {
    let mut c = caller(addr, tls, token).await.map_err(|e| format!("connect: {e:?}"))?;
    c.attempt("default", "probe@example.com")
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}
