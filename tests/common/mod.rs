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

/// Top-level settings of every test daemon: no shutdown delay (tests stop daemons
/// often; `tests/health.rs` sets its own) and no admin listener (the default port would
/// be shared by parallel tests; `tests/metrics.rs` and `tests/health.rs` ask for
/// `127.0.0.1:0` with [`with_admin`]).
pub const TEST_TOP_LEVEL: &str = "shutdown_delay = \"0s\"\n[telemetry]\nadmin_listen = \"\"\n";

/// `config` with the admin listener on a free port (read it with
/// [`DaemonProcess::admin_addr`]) and `shutdown_delay` set.
pub fn with_admin(config: &str, shutdown_delay: &str) -> String {
    config.replacen(
        TEST_TOP_LEVEL,
        &format!(
            "shutdown_delay = \"{shutdown_delay}\"\n[telemetry]\nadmin_listen = \"127.0.0.1:0\"\n"
        ),
        1,
    )
}

/// TLS material for test Redis nodes, in files made at test time: a CA, the servers'
/// certificate for `127.0.0.1` and `localhost` (also what they present to each other for
/// replication, the cluster bus and Sentinel), and a client certificate for the daemon.
pub struct RedisTlsFiles {
    pub ca: pki::Ca,
    pub ca_file: PathBuf,
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub client_cert_file: PathBuf,
    pub client_key_file: PathBuf,
    /// Whether servers demand a client certificate (`tls-auth-clients yes`).
    pub auth_clients: bool,
    pub dir: tempfile::TempDir,
}

impl RedisTlsFiles {
    /// New material; with `auth_clients`, servers refuse a client without a certificate
    /// from the CA (mutual TLS).
    pub fn new(auth_clients: bool) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = pki::Ca::new("portcullis test Redis CA");
        let server = ca.leaf(&["127.0.0.1", "localhost"], &[]);
        let client = ca.leaf(&["portcullis-daemon"], &[]);
        Self {
            ca_file: pki::write(dir.path(), "redis-ca.pem", &ca.pem()),
            cert_file: pki::write(dir.path(), "redis-server.pem", &server.cert_pem),
            key_file: pki::write(dir.path(), "redis-server.key", &server.key_pem),
            client_cert_file: pki::write(dir.path(), "redis-client.pem", &client.cert_pem),
            client_key_file: pki::write(dir.path(), "redis-client.key", &client.key_pem),
            ca,
            auth_clients,
            dir,
        }
    }

    fn auth_clients_word(&self) -> &'static str {
        if self.auth_clients { "yes" } else { "no" }
    }

    /// `redis-server` arguments that open TLS on `port`.
    pub fn server_args(&self, port: u16) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--tls-port".into(),
            port.to_string(),
            "--tls-cert-file".into(),
            path(&self.cert_file),
            "--tls-key-file".into(),
            path(&self.key_file),
            "--tls-ca-cert-file".into(),
            path(&self.ca_file),
            "--tls-auth-clients".into(),
            self.auth_clients_word().into(),
        ]
    }

    /// `sentinel.conf` lines that open TLS on `port` and use TLS for the Sentinel's own
    /// connections (to the master, its replicas and the other Sentinels).
    pub fn sentinel_conf(&self, port: u16) -> String {
        format!(
            "tls-port {port}\ntls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n\
             tls-auth-clients {}\ntls-replication yes\n",
            self.cert_file.display(),
            self.key_file.display(),
            self.ca_file.display(),
            self.auth_clients_word()
        )
    }

    /// `redis-cli` arguments for TLS with this CA and the client certificate.
    pub fn cli_args(&self) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--tls".into(),
            "--cacert".into(),
            path(&self.ca_file),
            "--cert".into(),
            path(&self.client_cert_file),
            "--key".into(),
            path(&self.client_key_file),
        ]
    }

    /// `[store]` lines trusting this CA, and presenting the client certificate when the
    /// servers ask for one.
    pub fn store_toml(&self) -> String {
        let mut toml = format!("redis_tls_ca_file = {:?}\n", self.ca_file.display().to_string());
        if self.auth_clients {
            toml.push_str(&format!(
                "redis_tls_cert_file = {:?}\nredis_tls_key_file = {:?}\n",
                self.client_cert_file.display().to_string(),
                self.client_key_file.display().to_string()
            ));
        }
        toml
    }
}

/// A `redis-server` child on a free loopback port, in its own temporary directory.
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    /// Append-only file on, so a restart keeps the data (scripts are never kept).
    persistent: bool,
    /// The TLS port and its `redis-server` arguments, when started with TLS.
    tls: Option<(u16, Vec<String>)>,
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

    /// Starts a server that also listens with TLS on [`Self::tls_url`] (the plain port
    /// stays, for the harness's own look at the data).
    pub fn start_tls(tls: &RedisTlsFiles) -> Self {
        Self::start_inner(false, Some(tls))
    }

    fn start_with(persistent: bool) -> Self {
        Self::start_inner(persistent, None)
    }

    fn start_inner(persistent: bool, tls: Option<&RedisTlsFiles>) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = Self { child: None, port: 0, dir, persistent, tls: None };
        for _ in 0..20 {
            server.port = free_port();
            server.tls = tls.map(|t| {
                let port = free_port();
                (port, t.server_args(port))
            });
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
        if let Some((_, args)) = &self.tls {
            cmd.args(args);
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

    /// The server's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The TLS port (started with [`Self::start_tls`]).
    pub fn tls_port(&self) -> u16 {
        self.tls.as_ref().expect("started with TLS").0
    }

    /// `rediss://127.0.0.1:TLS_PORT/`.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port())
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

/// The `portcullis` binary a [`DaemonProcess`] runs: this tree's, or the one
/// `PORTCULLIS_BINARY` names (benches compare an older build with it).
pub fn daemon_binary() -> PathBuf {
    std::env::var_os("PORTCULLIS_BINARY")
        .map(PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_portcullis").into())
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
    embedded_settings_with(data_dir, "")
}

/// As [`embedded_settings`], plus `extra` TOML.
pub fn embedded_settings_with(data_dir: &Path, extra: &str) -> Settings {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, embedded_config_toml(data_dir, extra)).unwrap();
    Config::load(Some(&path), &Overrides::default()).unwrap().validate(Some(SECRET.into())).unwrap()
}

/// The TOML the tests' daemons run with.
pub fn config_toml(redis_url: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n{TEST_TOP_LEVEL}[store]\nredis_url = \"{redis_url}\"\noperation_timeout = \"300ms\"\n{extra}\n{REALMS_TOML}"
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
        Self::connect_with(addr, None).await
    }

    /// As [`Self::connect`], from the local address `from` (e.g. 127.0.0.2: another
    /// caller than the ones on 127.0.0.1).
    pub async fn connect_from(addr: SocketAddr, from: std::net::IpAddr) -> Self {
        Self::connect_with(addr, Some(from)).await
    }

    async fn connect_with(addr: SocketAddr, from: Option<std::net::IpAddr>) -> Self {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .timeout(CALL_DEADLINE)
            .connect_timeout(CALL_DEADLINE)
            .local_address(from)
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
        self.verify_with_device(realm, identifier, password, stored_hash, client_key, "").await
    }

    /// `verify` carrying `device_token` (empty: none).
    pub async fn verify_with_device(
        &mut self,
        realm: &str,
        identifier: &str,
        password: &[u8],
        stored_hash: &str,
        client_key: &str,
        device_token: &str,
    ) -> Result<VerifyResponse, tonic::Status> {
        let req = VerifyRequest {
            account: account(realm, identifier),
            password: password.to_vec(),
            stored_hash: stored_hash.into(),
            client_key: client_key.into(),
            attempt_id: uuid::Uuid::new_v4().to_string(),
            device_token: device_token.into(),
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
        assert!(key.starts_with("portcullis:v2:{"), "unexpected key layout");
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
        assert!(ttl > 0, "a key has no expiry (PTTL {ttl})");
        let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(conn).unwrap();
        let dump = String::from_utf8_lossy(&dump).to_lowercase();
        for s in secrets {
            assert!(!dump.contains(&s.to_lowercase()), "a stored value contains an identifier");
        }
    }
}

/// `GET http://{addr}{path}` over a fresh connection: status code and body. A plain
/// HTTP/1.1 client in a few lines, so the tests need no HTTP client crate.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::other("admin listener did not answer in 5 s"))??;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {text:?}")))?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    // axum answers small bodies with Content-Length, larger ones chunked.
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

pub fn dbsize(conn: &mut redis::Connection) -> u64 {
    redis::cmd("DBSIZE").query(conn).unwrap()
}

/// Keys of account keys (records, attempt ids, device buckets): every key but the
/// password-spray counts (`{spray:…}`, docs/spray.md), which every `Verify` also writes.
pub fn account_key_count(conn: &mut redis::Connection) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS").arg("portcullis:v2:*").query(conn).unwrap();
    keys.iter().filter(|k| !k.contains("{spray:")).count()
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

    fn spawn_with(
        config: &str,
        secret: Option<&str>,
        log_level: &str,
        env: &[(&str, &str)],
    ) -> Self {
        // The default admin port (9464) is shared: a developer's own daemon may hold it.
        assert!(
            config.contains("admin_listen"),
            "a test daemon's config must set [telemetry] admin_listen (TEST_TOP_LEVEL or with_admin)"
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
    /// [`with_admin`]); waits up to 10 s for its log line.
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

/// The TOML of a daemon on the embedded store in `data_dir`.
pub fn embedded_config_toml(data_dir: &Path, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n{TEST_TOP_LEVEL}[store]\ndata_dir = {:?}\noperation_timeout = \"2s\"\n{extra}\n{REALMS_TOML}",
        data_dir.display().to_string()
    )
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts one `redis-server` on a free port with `args` (beyond port, bind, dir and no
/// persistence), in `dir`; returns the child and its port once it answers PING.
fn spawn_redis_node(dir: &Path, args: &[&str]) -> (Child, u16) {
    let (child, port, _) = spawn_redis_node_tls(dir, args, None);
    (child, port)
}

/// As [`spawn_redis_node`], and with `tls`, a TLS port too: returns it and the
/// arguments that open it (kept by a [`Node`] for its restarts).
fn spawn_redis_node_tls(
    dir: &Path,
    args: &[&str],
    tls: Option<&RedisTlsFiles>,
) -> (Child, u16, Option<(u16, Vec<String>)>) {
    for _ in 0..20 {
        let port = free_port();
        let tls = tls.map(|t| {
            let tls_port = free_port();
            (tls_port, t.server_args(tls_port))
        });
        let mut child = Command::new(redis_server_binary())
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"])
            .arg("--dir")
            .arg(dir)
            .args(args)
            .args(tls.iter().flat_map(|(_, a)| a))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (see .ci/run)");
        if wait_for_ping(port, &mut child) {
            return (child, port, tls);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("could not start a redis-server node on a free port");
}

fn wait_for_ping(port: u16, child: &mut Child) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        if let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200))
            && redis::cmd("PING").query::<String>(&mut c).is_ok()
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

/// One node of a [`RedisCluster`] or [`SentinelGroup`]: a child process on a port.
pub struct Node {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    args: Vec<String>,
    /// The TLS port, when the node serves TLS too (its arguments are in `args`).
    pub tls_port: Option<u16>,
}

impl Node {
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// `rediss://127.0.0.1:TLS_PORT/`.
    pub fn tls_url(&self) -> String {
        format!("rediss://127.0.0.1:{}/", self.tls_port.expect("node started with TLS"))
    }

    pub fn conn(&self) -> redis::Connection {
        redis::Client::open(self.url())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("node connection")
    }

    /// SIGKILL, as a crashed host.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Starts the node again on its port, directory and arguments (a cluster node keeps
    /// its `nodes.conf`, so it rejoins).
    pub fn restart(&mut self) {
        self.kill();
        for _ in 0..100 {
            let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
            let mut child = Command::new(redis_server_binary())
                .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
                .args(["--appendonly", "no", "--daemonize", "no", "--loglevel", "warning"])
                .arg("--dir")
                .arg(&self.dir)
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            if wait_for_ping(self.port, &mut child) {
                self.child = Some(child);
                return;
            }
            let _ = child.kill();
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("node on port {} did not restart", self.port);
    }

    /// `role:master` or `role:slave` from `INFO replication`.
    pub fn is_master(&self) -> bool {
        let info: String = redis::cmd("INFO").arg("replication").query(&mut self.conn()).unwrap();
        info.contains("role:master")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A real Redis Cluster on free loopback ports: `masters` masters with `replicas` each,
/// created with `redis-cli --cluster create`, with a short `cluster-node-timeout` so a
/// failover takes seconds.
pub struct RedisCluster {
    pub nodes: Vec<Node>,
    _dir: tempfile::TempDir,
}

/// `cluster-node-timeout` of test clusters, in ms: failure detection and failover
/// within a few seconds.
pub const CLUSTER_NODE_TIMEOUT_MS: u64 = 1000;

impl RedisCluster {
    pub fn start(masters: usize, replicas: usize) -> Self {
        Self::start_with(masters, replicas, None)
    }

    /// As [`Self::start`], every node also serving TLS, the cluster bus and replication
    /// over TLS (`tls-cluster`, `tls-replication`); [`Self::urls`] are then `rediss://`.
    pub fn start_tls(masters: usize, replicas: usize, tls: &RedisTlsFiles) -> Self {
        Self::start_with(masters, replicas, Some(tls))
    }

    fn start_with(masters: usize, replicas: usize, tls: Option<&RedisTlsFiles>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut nodes = Vec::new();
        for i in 0..masters * (1 + replicas) {
            let node_dir = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&node_dir).unwrap();
            let mut args: Vec<String> = [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                &CLUSTER_NODE_TIMEOUT_MS.to_string(),
                // A replica of a dead master takes over at once, however stale.
                "--cluster-replica-validity-factor",
                "0",
                // Replicas sync at once, not after the default 5 s wait for company.
                "--repl-diskless-sync-delay",
                "0",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            if tls.is_some() {
                args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
            }
            let str_args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (child, port, tls_args) = spawn_redis_node_tls(&node_dir, &str_args, tls);
            let tls_port = tls_args.as_ref().map(|(p, _)| *p);
            args.extend(tls_args.into_iter().flat_map(|(_, a)| a));
            nodes.push(Node { child: Some(child), port, dir: node_dir, args, tls_port });
        }
        // With TLS the cluster is made over the TLS ports (the bus port follows them).
        let addrs: Vec<String> =
            nodes.iter().map(|n| format!("127.0.0.1:{}", n.tls_port.unwrap_or(n.port))).collect();
        let out = Command::new("redis-cli")
            .args(tls.map(RedisTlsFiles::cli_args).unwrap_or_default())
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli must be installed (see .ci/run)");
        assert!(
            out.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes, _dir: dir };
        cluster.wait_until_ok(Duration::from_secs(20));
        cluster.wait_for_replicas(masters * replicas, Duration::from_secs(20));
        cluster
    }

    /// Seed URLs for `store.redis_cluster_nodes` (`rediss://` when started with TLS).
    pub fn urls(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| if n.tls_port.is_some() { n.tls_url() } else { n.url() })
            .collect()
    }

    /// The TOML array of [`Self::urls`].
    pub fn nodes_toml(&self) -> String {
        let urls: Vec<String> = self.urls().iter().map(|u| format!("\"{u}\"")).collect();
        format!("[{}]", urls.join(", "))
    }

    /// Waits until every running node reports `cluster_state:ok` and agrees on the
    /// masters (all 16384 slots served).
    pub fn wait_until_ok(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let ok = self.nodes.iter().filter(|n| n.is_running()).all(|n| {
                let mut c = n.conn();
                let info: String =
                    redis::cmd("CLUSTER").arg("INFO").query(&mut c).unwrap_or_default();
                info.contains("cluster_state:ok") && info.contains("cluster_slots_ok:16384")
            });
            if ok {
                return;
            }
            assert!(Instant::now() < deadline, "cluster did not reach cluster_state:ok");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `count` running nodes are replicas in sync with their master.
    pub fn wait_for_replicas(&self, count: usize, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let synced = self
                .nodes
                .iter()
                .filter(|n| n.is_running())
                .filter(|n| {
                    let info: String = redis::cmd("INFO")
                        .arg("replication")
                        .query(&mut n.conn())
                        .unwrap_or_default();
                    info.contains("role:slave") && info.contains("master_link_status:up")
                })
                .count();
            if synced >= count {
                return;
            }
            assert!(Instant::now() < deadline, "only {synced} of {count} replicas in sync");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Index of the running master that serves `key`'s slot.
    pub fn master_of(&self, key: &str) -> usize {
        let node = self.nodes.iter().find(|n| n.is_running()).unwrap();
        let slot: u16 =
            redis::cmd("CLUSTER").arg("KEYSLOT").arg(key).query(&mut node.conn()).unwrap();
        self.master_of_slot(slot)
    }

    /// Index of the running master that serves `slot`, as the cluster sees it now.
    pub fn master_of_slot(&self, slot: u16) -> usize {
        let node = self.nodes.iter().find(|n| n.is_running()).unwrap();
        let shards: Vec<(u16, u16, Vec<redis::Value>)> = {
            let value: redis::Value =
                redis::cmd("CLUSTER").arg("SLOTS").query(&mut node.conn()).unwrap();
            let redis::Value::Array(ranges) = value else { panic!("CLUSTER SLOTS: {value:?}") };
            ranges
                .into_iter()
                .map(|r| {
                    let redis::Value::Array(mut parts) = r else { panic!("slot range") };
                    let master = parts.remove(2);
                    let start: u16 = redis::from_redis_value(parts[0].clone()).unwrap();
                    let end: u16 = redis::from_redis_value(parts[1].clone()).unwrap();
                    let redis::Value::Array(master) = master else { panic!("master") };
                    (start, end, master)
                })
                .collect()
        };
        for (start, end, master) in shards {
            if (start..=end).contains(&slot) {
                let port: u16 = redis::from_redis_value(master[1].clone()).unwrap();
                return self.nodes.iter().position(|n| n.port == port).unwrap();
            }
        }
        panic!("slot {slot} is not served");
    }

    /// Indexes of the running masters.
    pub fn masters(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_running() && self.nodes[i].is_master())
            .collect()
    }

    /// Reads a record wherever its slot lives, through a cluster connection.
    pub fn read_record(&self, key: &str) -> Option<(u64, u64, u32)> {
        let client = redis::cluster::ClusterClient::new(
            self.nodes.iter().filter(|n| n.is_running()).map(Node::url).collect::<Vec<_>>(),
        )
        .unwrap();
        let mut conn = client.get_connection().unwrap();
        let (f, ws, st): (Option<u64>, Option<u64>, Option<u32>) =
            redis::cmd("HMGET").arg(key).arg("f").arg("ws").arg("st").query(&mut conn).unwrap();
        Some((f?, ws?, st?))
    }
}

/// A Sentinel-monitored master with one replica and three `redis-sentinel`s (quorum 2)
/// on free loopback ports, failing over within seconds.
/// Waits until `master`'s replica has everything written to `master` so far, `key`'s
/// record included: a write in `key`'s hash tag from this connection, then `WAIT 1`.
/// (Replication is asynchronous: a failover test that kills a master before its replica
/// caught up measures Redis's replication lag, not the daemon; the loss it can cause is
/// measured separately.)
pub fn replicated(master: &Node, key: &str) {
    let mut conn = master.conn();
    let barrier = format!("{key}:test-barrier");
    let _: () =
        redis::cmd("SET").arg(&barrier).arg(1).arg("PX").arg(60_000).query(&mut conn).unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut conn).unwrap();
    assert_eq!(acked, 1, "the replica did not catch up within 10 s");
}

pub struct SentinelGroup {
    pub master: Node,
    pub replica: Node,
    pub sentinels: Vec<Node>,
    _dir: tempfile::TempDir,
}

/// Name the test Sentinels monitor the master under.
pub const SENTINEL_MASTER_NAME: &str = "portcullis-test";

impl SentinelGroup {
    pub fn start() -> Self {
        Self::start_with(None)
    }

    /// As [`Self::start`], every node and Sentinel also serving TLS, replication and the
    /// Sentinels' own connections over TLS (`tls-replication`), so the Sentinels name the
    /// master's TLS port; [`Self::sentinel_toml`] then lists `rediss://` Sentinels.
    pub fn start_tls(tls: &RedisTlsFiles) -> Self {
        Self::start_with(Some(tls))
    }

    fn start_with(tls: Option<&RedisTlsFiles>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sub = |name: &str| {
            let d = dir.path().join(name);
            std::fs::create_dir_all(&d).unwrap();
            d
        };
        // One node of the group: its own directory, `args`, and with TLS the replication
        // over TLS and the TLS port's arguments kept for restarts.
        let node = |name: &str, mut args: Vec<String>| {
            if tls.is_some() {
                args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
            }
            let str_args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (child, port, tls_args) = spawn_redis_node_tls(&sub(name), &str_args, tls);
            let tls_port = tls_args.as_ref().map(|(p, _)| *p);
            args.extend(tls_args.into_iter().flat_map(|(_, a)| a));
            Node { child: Some(child), port, dir: sub(name), args, tls_port }
        };
        let master = node("master", vec!["--repl-diskless-sync-delay".to_owned(), "0".to_owned()]);
        // The port replicas and Sentinels reach the master on: its TLS port with TLS.
        let master_port = master.tls_port.unwrap_or(master.port);
        let replica = node(
            "replica",
            vec!["--replicaof".to_owned(), "127.0.0.1".to_owned(), master_port.to_string()],
        );
        // Wait for the replica to be in sync, so a failover has someone to promote.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let info: String =
                redis::cmd("INFO").arg("replication").query(&mut replica.conn()).unwrap();
            if info.contains("master_link_status:up") {
                break;
            }
            assert!(Instant::now() < deadline, "replica never synced");
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut sentinels = Vec::new();
        for i in 0..3 {
            let sdir = sub(&format!("sentinel{i}"));
            for _ in 0..20 {
                let sport = free_port();
                let stls_port = tls.map(|_| free_port());
                let tls_conf = match (tls, stls_port) {
                    (Some(t), Some(p)) => t.sentinel_conf(p),
                    _ => String::new(),
                };
                let conf = sdir.join("sentinel.conf");
                std::fs::write(
                    &conf,
                    format!(
                        "port {sport}\nbind 127.0.0.1\ndir {}\n{tls_conf}\
                         sentinel monitor {SENTINEL_MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                         sentinel down-after-milliseconds {SENTINEL_MASTER_NAME} 1000\n\
                         sentinel failover-timeout {SENTINEL_MASTER_NAME} 3000\n\
                         sentinel parallel-syncs {SENTINEL_MASTER_NAME} 1\n",
                        sdir.display()
                    ),
                )
                .unwrap();
                // A Sentinel is `redis-server` in Sentinel mode: no separate package.
                let mut child = Command::new(redis_server_binary())
                    .arg(&conf)
                    .arg("--sentinel")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .expect("redis-server must be installed (see .ci/run)");
                if wait_for_ping(sport, &mut child) {
                    sentinels.push(Node {
                        child: Some(child),
                        port: sport,
                        dir: sdir.clone(),
                        args: vec![],
                        tls_port: stls_port,
                    });
                    break;
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        assert_eq!(sentinels.len(), 3, "could not start three sentinels");
        let group = Self { master, replica, sentinels, _dir: dir };
        // Every Sentinel knows the replica and the other Sentinels before a test kills anything.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let ready = group.sentinels.iter().all(|s| {
                let v: redis::Value = redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(SENTINEL_MASTER_NAME)
                    .query(&mut s.conn())
                    .unwrap_or(redis::Value::Nil);
                let text = format!("{v:?}");
                text.contains("num-slaves")
                    && sentinel_field(&v, "num-slaves") == Some(1)
                    && sentinel_field(&v, "num-other-sentinels") == Some(2)
            });
            if ready {
                return group;
            }
            assert!(Instant::now() < deadline, "sentinels never saw the whole group");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The TOML inline table for `store.redis_sentinel`.
    pub fn sentinel_toml(&self) -> String {
        let url = |s: &Node| if s.tls_port.is_some() { s.tls_url() } else { s.url() };
        let nodes: Vec<String> = self.sentinels.iter().map(|s| format!("\"{}\"", url(s))).collect();
        format!(
            "redis_sentinel = {{ master_name = \"{SENTINEL_MASTER_NAME}\", nodes = [{}] }}",
            nodes.join(", ")
        )
    }

    /// The port the Sentinels currently name as master.
    pub fn master_port(&self) -> Option<u16> {
        let s = self.sentinels.iter().find(|s| s.is_running())?;
        let (_host, port): (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(SENTINEL_MASTER_NAME)
            .query(&mut s.conn())
            .ok()?;
        Some(port)
    }
}

/// An integer field of a `SENTINEL MASTER` reply (a flat name/value array or a map).
fn sentinel_field(value: &redis::Value, name: &str) -> Option<i64> {
    let pairs: Vec<(String, String)> = match value {
        redis::Value::Array(items) => items
            .chunks(2)
            .filter_map(|p| {
                Some((
                    redis::from_redis_value(p.first()?.clone()).ok()?,
                    redis::from_redis_value(p.get(1)?.clone()).ok()?,
                ))
            })
            .collect(),
        redis::Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| {
                Some((
                    redis::from_redis_value(k.clone()).ok()?,
                    redis::from_redis_value(v.clone()).ok()?,
                ))
            })
            .collect(),
        _ => return None,
    };
    pairs.into_iter().find(|(k, _)| k == name)?.1.parse().ok()
}

/// The TOML a daemon on a non-standalone store runs with: `store_lines` instead of
/// `redis_url`.
pub fn config_toml_with_store(store_lines: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n{TEST_TOP_LEVEL}[store]\n{store_lines}\noperation_timeout = \"500ms\"\n{REALMS_TOML}"
    )
}

/// Daemon settings from [`config_toml_with_store`].
pub fn settings_with_store(store_lines: &str) -> Settings {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, config_toml_with_store(store_lines)).unwrap();
    Config::load(Some(&path), &Overrides::default()).unwrap().validate(Some(SECRET.into())).unwrap()
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

/// The headers of a unary `RecordAttempt` call to `addr`, for raw HTTP/2 clients (the
/// abuse patterns of tests/hardening.rs and benches/abuse.rs).
pub fn grpc_request(addr: SocketAddr) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/portcullis.v1.Governor/RecordAttempt"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}
