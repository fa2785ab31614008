//! The example gateway (`examples/gateway.rs`), run as two replicas against one daemon
//! and one Redis: the lockout holds across both, and a wrong username and a wrong
//! password get the same HTTP response.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `target/debug/examples/gateway`, which `cargo test` builds beside the test binaries.
fn gateway_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    profile_dir.join("examples").join(format!("gateway{}", std::env::consts::EXE_SUFFIX))
}

struct Gateway {
    child: Child,
    addr: SocketAddr,
}

impl Gateway {
    fn spawn(users: &std::path::Path, daemon: SocketAddr) -> Self {
        let mut child = Command::new(gateway_binary())
            .arg("--users")
            .arg(users)
            .args(["--listen", "127.0.0.1:0", "--daemon", &format!("http://{daemon}")])
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the example gateway is built by `cargo test`");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("gateway listening on ").nth(1) {
                    let _ = tx.send(addr.trim().to_owned());
                }
            }
        });
        let addr =
            rx.recv_timeout(Duration::from_secs(10)).expect("gateway started").parse().unwrap();
        Self { child, addr }
    }

    /// POSTs a login and returns the raw response, less its `date` header (the one part
    /// that differs with the clock).
    async fn login(&self, username: &str, password: &str) -> String {
        self.login_with_cookie(username, password, None).await
    }

    /// [`Gateway::login`] sending `cookie` (`name=value`) as a browser would.
    async fn login_with_cookie(
        &self,
        username: &str,
        password: &str,
        cookie: Option<&str>,
    ) -> String {
        let body = format!("username={username}&password={password}");
        let cookie = cookie.map(|c| format!("cookie: {c}\r\n")).unwrap_or_default();
        let request = format!(
            "POST /login HTTP/1.1\r\nhost: gw\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n{cookie}connection: close\r\n\r\n{body}",
            body.len()
        );
        let mut s = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut response = String::new();
        s.read_to_string(&mut response).await.unwrap();
        response
            .lines()
            .filter(|l| !l.to_ascii_lowercase().starts_with("date:"))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status(response: &str) -> &str {
    response.split(' ').nth(1).unwrap_or("")
}

/// The `Set-Cookie` header's value, if the response has one.
fn set_cookie(response: &str) -> Option<&str> {
    response.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("set-cookie").then(|| value.trim())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_lockout_and_failures_look_alike() {
    let redis = RedisServer::start();
    let daemon = DaemonProcess::spawn(&config_toml(&redis.url(), ""));
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.htpasswd");
    let alice = StoredHash::generate(b"correct-horse", &HashParams::Bcrypt { cost: 5 }).unwrap();
    let bob = StoredHash::generate(b"battery-staple", &HashParams::Bcrypt { cost: 5 }).unwrap();
    std::fs::write(
        &users,
        format!(
            "# test users\nalice@example.com:{}\nbob@example.com:{}\n",
            alice.as_str(),
            bob.as_str()
        ),
    )
    .unwrap();
    let a = Gateway::spawn(&users, daemon.addr);
    let b = Gateway::spawn(&users, daemon.addr);

    assert_eq!(status(&a.login("bob@example.com", "battery-staple").await), "200");
    // A wrong username and a wrong password: the same response, byte for byte.
    let wrong_user = a.login("nobody@example.com", "battery-staple").await;
    let wrong_password = a.login("bob@example.com", "nope").await;
    assert_eq!(status(&wrong_user), "401");
    assert_eq!(wrong_user, wrong_password);

    // Five wrong passwords spread over both replicas close the door on both.
    for n in 0..5 {
        let gw = if n % 2 == 0 { &a } else { &b };
        // Distinct guesses: a repeated wrong password would be forgiven (throttle.md).
        let guess = format!("guess-{n}");
        assert_eq!(status(&gw.login("alice@example.com", &guess).await), "401");
    }
    for gw in [&a, &b] {
        let locked = gw.login("ALICE@example.com", "correct-horse").await;
        assert_eq!(locked, wrong_password, "a closed door answers like any failed login");
    }

    // The daemon is gone: 503 with Retry-After, never 200.
    drop(daemon);
    let down = a.login("bob@example.com", "battery-staple").await;
    assert_eq!(status(&down), "503");
    assert!(down.to_ascii_lowercase().contains("retry-after: 1"), "{down}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_with_the_device_cookie_logs_in_through_a_lockout() {
    let redis = RedisServer::start();
    let daemon = DaemonProcess::spawn(&config_toml(&redis.url(), ""));
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.htpasswd");
    let carol = StoredHash::generate(b"correct-horse", &HashParams::Bcrypt { cost: 5 }).unwrap();
    std::fs::write(&users, format!("carol@example.com:{}\n", carol.as_str())).unwrap();
    let gw = Gateway::spawn(&users, daemon.addr);

    let ok = gw.login("carol@example.com", "correct-horse").await;
    assert_eq!(status(&ok), "200");
    let cookie =
        set_cookie(&ok).unwrap_or_else(|| panic!("an accepted login sets the device cookie: {ok}"));
    let attributes: Vec<&str> = cookie.split("; ").collect();
    for want in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(attributes.contains(&want), "cookie lacks {want}: {cookie}");
    }
    let pair = attributes[0];
    assert!(pair.starts_with("__Host-portcullis-device-"), "{pair}");
    assert!(!pair.contains("carol"), "the cookie names the account in clear: {pair}");

    // Someone else locks Carol's account.
    for n in 0..6 {
        let r = gw.login("carol@example.com", &format!("guess-{n}")).await;
        assert_eq!(status(&r), "401");
        assert_eq!(set_cookie(&r), None, "a failed login set a cookie");
    }
    let stranger = gw.login("carol@example.com", "correct-horse").await;
    assert_eq!(status(&stranger), "401", "a browser without the cookie got past the lockout");
    // Carol's browser sends its cookie back and gets in, with a fresh cookie.
    let back = gw.login_with_cookie("carol@example.com", "correct-horse", Some(pair)).await;
    assert_eq!(status(&back), "200", "{back}");
    assert_ne!(set_cookie(&back).unwrap().split("; ").next(), Some(pair));
}
