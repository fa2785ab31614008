//! Real `redis-server`s on free loopback ports, each in its own temporary directory
//! (never the shared 6379, never FLUSHDB), with TLS when a test asks for it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::free_port;
use crate::pki;

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

pub(crate) fn redis_server_binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER").map(PathBuf::from).unwrap_or_else(|| "redis-server".into())
}

/// Starts one `redis-server` on a free port with `args` (beyond port, bind, dir and no
/// persistence), in `dir`; returns the child and its port once it answers PING.
pub(crate) fn spawn_redis_node(dir: &Path, args: &[&str]) -> (Child, u16) {
    let (child, port, _) = spawn_redis_node_tls(dir, args, None);
    (child, port)
}

/// As [`spawn_redis_node`], and with `tls`, a TLS port too: returns it and the
/// arguments that open it (kept by a [`Node`] for its restarts).
pub(crate) fn spawn_redis_node_tls(
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

pub(crate) fn wait_for_ping(port: u16, child: &mut Child) -> bool {
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

/// One node of a [`RedisCluster`](crate::cluster::RedisCluster) or [`SentinelGroup`](crate::sentinel::SentinelGroup): a child process on a port.
pub struct Node {
    pub(crate) child: Option<Child>,
    pub port: u16,
    pub(crate) dir: PathBuf,
    pub(crate) args: Vec<String>,
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

    /// SIGSTOP (`true`) or SIGCONT (`false`): a node that stops answering without closing
    /// its connections, as a hung host.
    pub fn freeze(&self, frozen: bool) {
        let pid = self.child.as_ref().expect("a running node").id();
        let signal = if frozen { "-STOP" } else { "-CONT" };
        let status = Command::new("kill").arg(signal).arg(pid.to_string()).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}");
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
