//! The example gateway (`client/examples/gateway.rs`), run as two replicas against one
//! daemon and one Redis: the lockout holds across both, and a wrong username and a wrong
//! password get the same HTTP response. Against a daemon whose realm flags networks,
//! watches for sprays and screens breached passwords: a breached password logs in and is
//! sent to the password change page, a sprayed one gets the second-factor page and no
//! session, a throttled network and an account near its lockout get the challenge page,
//! and no page tells a right password, a wrong one and an unknown account apart where
//! the signal does not already say the password matched. The flows around the login
//! (docs/flows.md): the reset page is one page, byte for byte, whatever the account and
//! the daemon's decision, and mail goes only to accounts that exist within the caps; a
//! code is counted before it is checked, so the sixth in a window is refused even when
//! it is right, and a right one clears the count. Step-up for unknown devices
//! (docs/devices.md): a right password and a wrong one from a browser without the
//! account's device cookie get the same code page, the code is sent only for the right
//! one, and only its code confirms the device; a breached password past its grace
//! logins gets the change page without a session.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
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
    /// The gateway's log lines that say a reset mail was queued, in order.
    mails: Arc<Mutex<Vec<String>>>,
}

impl Gateway {
    fn spawn(users: &std::path::Path, daemon: SocketAddr) -> Self {
        Self::spawn_with(users, daemon, &[])
    }

    /// [`Gateway::spawn`] with more arguments (`--realm`, `--trusted-proxy-hops`).
    fn spawn_with(users: &std::path::Path, daemon: SocketAddr, args: &[&str]) -> Self {
        let mut child = Command::new(gateway_binary())
            .arg("--users")
            .arg(users)
            .args(["--listen", "127.0.0.1:0", "--daemon", &format!("http://{daemon}")])
            .args(args)
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect(
                "the example gateway: `cargo test` builds it; a filtered run (`--test \
                 integration`) does not: run `cargo build --locked --example gateway` first",
            );
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let mails = Arc::new(Mutex::new(Vec::new()));
        let queued = Arc::clone(&mails);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(addr) = line.split("gateway listening on ").nth(1) {
                    let _ = tx.send(addr.trim().to_owned());
                }
                if line.contains("mail queued") {
                    queued.lock().unwrap().push(line);
                }
            }
        });
        let addr =
            rx.recv_timeout(Duration::from_secs(10)).expect("gateway started").parse().unwrap();
        Self { child, addr, mails }
    }

    /// The mails queued so far, once `want` have been logged (or 5 s passed) and a
    /// moment more, so one too many would show.
    async fn mails_settled(&self, want: usize) -> Vec<String> {
        for _ in 0..50 {
            if self.mails.lock().unwrap().len() >= want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.mails.lock().unwrap().clone()
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
        let cookie = cookie.map(|c| format!("cookie: {c}\r\n")).unwrap_or_default();
        self.post(username, password, &cookie).await
    }

    /// [`Gateway::login`] from a client at `address`, as the one proxy in front of the
    /// gateway (`--trusted-proxy-hops 1`) reports it.
    async fn login_from(&self, address: &str, username: &str, password: &str) -> String {
        self.post(username, password, &format!("x-forwarded-for: {address}\r\n")).await
    }

    /// POSTs the login form with `headers` (each line ending in CRLF).
    async fn post(&self, username: &str, password: &str, headers: &str) -> String {
        self.post_form("/login", &format!("username={username}&password={password}"), headers).await
    }

    /// POSTs the "forgot password" form from a client at `address` (as the one proxy in
    /// front of the gateway reports it).
    async fn reset_from(&self, address: &str, username: &str) -> String {
        let headers = format!("x-forwarded-for: {address}\r\n");
        self.post_form("/password/reset", &format!("username={username}"), &headers).await
    }

    /// POSTs the one-time code form.
    async fn code(&self, username: &str, code: &str) -> String {
        self.post_form("/login/code", &format!("username={username}&code={code}"), "").await
    }

    /// POSTs the one-time code form with a cookie (`name=value`), no name in the form:
    /// the pending login the cookie names says whose code it is.
    async fn code_with_cookie(&self, code: &str, cookie: &str) -> String {
        self.post_form("/login/code", &format!("code={code}"), &format!("cookie: {cookie}\r\n"))
            .await
    }

    /// POSTs the form `body` to `path` with `headers` (each line ending in CRLF).
    async fn post_form(&self, path: &str, body: &str, headers: &str) -> String {
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: gw\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\n{headers}",
            body.len()
        );
        self.send(&format!("{head}connection: close\r\n\r\n{body}")).await
    }

    /// GETs `path`.
    async fn get(&self, path: &str) -> String {
        self.send(&format!("GET {path} HTTP/1.1\r\nhost: gw\r\nconnection: close\r\n\r\n")).await
    }

    async fn send(&self, request: &str) -> String {
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

/// The body of the challenge page (a throttled network, an account near its lockout).
const CHALLENGE: &str = "solve the challenge, then sign in again";

/// The value of header `name`, if the response has one.
fn header<'a>(response: &'a str, name: &str) -> Option<&'a str> {
    response.lines().find_map(|l| {
        let (n, value) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// The `Set-Cookie` header's value, if the response has one.
fn set_cookie(response: &str) -> Option<&str> {
    header(response, "set-cookie")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_share_one_lockout_and_failures_look_alike() {
    let redis = RedisServer::start();
    let daemon = DaemonProcess::spawn(&TestConfig::redis(&redis.url()).toml());
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

    // Five wrong passwords spread over both replicas close the door on both; an unknown
    // account guessed at alike gets the same page at every count (from the third
    // failure on, the challenge page of an account near its lockout).
    for n in 0..5 {
        let gw = if n % 2 == 0 { &a } else { &b };
        // Distinct guesses: a repeated wrong password would be forgiven (throttle.md).
        let guess = format!("guess-{n}");
        let known = gw.login("alice@example.com", &guess).await;
        let unknown = gw.login("ghost@example.com", &guess).await;
        assert_eq!(status(&known), "401");
        assert_eq!(known, unknown, "failure {n}: a known and an unknown account differ");
        assert_eq!(known == wrong_password, n < 2, "failure {n}: {known}");
    }
    let ghost = a.login("ghost@example.com", "correct-horse").await;
    for gw in [&a, &b] {
        let locked = gw.login("ALICE@example.com", "correct-horse").await;
        assert_eq!(locked, ghost, "a closed door answers like any failed login at its count");
        assert!(locked.ends_with(CHALLENGE), "{locked}");
    }
    // The attempt that shut alice's door (on replica a) queued one notice to her; the
    // ghost's lockout none (no account), and the later refusal on b none.
    let notices = a.mails_settled(1).await;
    assert_eq!(notices.len(), 1, "{notices:#?}");
    assert!(notices[0].contains("lockout_notice") && !notices[0].contains("example"));
    assert!(b.mails.lock().unwrap().is_empty(), "a second notice for one lockout");

    // The daemon is gone: 503 with Retry-After, never 200.
    drop(daemon);
    let down = a.login("bob@example.com", "battery-staple").await;
    assert_eq!(status(&down), "503");
    assert!(down.to_ascii_lowercase().contains("retry-after: 1"), "{down}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_with_the_device_cookie_logs_in_through_a_lockout() {
    let redis = RedisServer::start();
    let daemon = DaemonProcess::spawn(&TestConfig::redis(&redis.url()).toml());
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

/// A realm that flags a network after 2 failures, watches for a password failing on 10
/// accounts, and compares bcrypt cost 4; and a breach filter listing [`BREACHED`].
fn signals_daemon(dir: &std::path::Path) -> DaemonProcess {
    use sha1::Digest;
    let corpus = dir.join("corpus.txt");
    let sha1 = hex::encode_upper(sha1::Sha1::digest(BREACHED.as_bytes()));
    std::fs::write(&corpus, format!("{sha1}:42\r\n")).unwrap();
    let filter = dir.join("breach.filter");
    portcullis::defence::breach::build::build(&corpus, &filter, &Default::default()).unwrap();
    let extra = format!(
        "[breach]\nfilter_file = {:?}\n[realms.gw]\nhash = {{ algorithm = \"bcrypt\", bcrypt_cost = 4 }}\n\
         network_capacity = 2\nnetwork_action = \"flag\"\nspray_threshold = 10\n",
        filter.to_str().unwrap()
    );
    DaemonProcess::spawn(&TestConfig::embedded(&dir.join("data")).extra(&extra).toml())
}

/// A password in the test's breach filter.
const BREACHED: &str = "Summer2026!";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_signal_gets_its_page_and_no_page_is_an_oracle() {
    let dir = tempfile::tempdir().unwrap();
    let daemon = signals_daemon(dir.path());
    let users = dir.path().join("users.htpasswd");
    let hash = |p: &str| StoredHash::generate(p.as_bytes(), &HashParams::Bcrypt { cost: 4 });
    let lines: String = [
        ("alice", BREACHED),
        ("bob", "bob's own passphrase"),
        ("carol", "carol's own passphrase"),
        ("dave", "Winter2026!"),
    ]
    .iter()
    .map(|(name, password)| format!("{name}@example.com:{}\n", hash(password).unwrap().as_str()))
    .collect();
    std::fs::write(&users, lines).unwrap();
    let gw =
        Gateway::spawn_with(&users, daemon.addr, &["--realm", "gw", "--trusted-proxy-hops", "1"]);
    let plain_401 = gw.login_from("192.0.2.1", "nobody@example.com", "guess").await;
    assert_eq!(status(&plain_401), "401");
    assert!(plain_401.ends_with("invalid username or password"), "{plain_401}");

    // password_breached: in, with the device cookie, and sent to the change page. A
    // wrong breached password says nothing: the plain 401, as for an unknown account.
    let ok = gw.login_from("192.0.2.2", "alice@example.com", BREACHED).await;
    assert_eq!(status(&ok), "303", "{ok}");
    assert_eq!(header(&ok, "location"), Some("/password/change"));
    assert!(set_cookie(&ok).is_some_and(|c| c.starts_with("__Host-")), "{ok}");
    let page = gw.get("/password/change").await;
    assert_eq!(status(&page), "200");
    assert!(page.contains("choose a new one"), "{page}");
    let wrong_breached = gw.login_from("192.0.2.3", "carol@example.com", BREACHED).await;
    let unknown_breached = gw.login_from("192.0.2.4", "nobody@example.com", BREACHED).await;
    assert_eq!(wrong_breached, plain_401);
    assert_eq!(unknown_breached, plain_401);

    // step_up on a reject (the account near its lockout: 3 failures of 5): the challenge
    // page, which an unknown account gets at the same count. One network a step, so no
    // network is throttled.
    for n in 1..=4 {
        let address = format!("198.51.100.{n}");
        let known = gw.login_from(&address, "bob@example.com", &format!("guess {n}")).await;
        let unknown = gw.login_from(&address, "ghost@example.com", &format!("guess {n}")).await;
        assert_eq!(known, unknown, "failure {n}");
        let want = if n >= 3 { CHALLENGE } else { "invalid username or password" };
        assert!(known.ends_with(want), "failure {n}: {known}");
        assert_eq!(set_cookie(&known), None);
    }

    // network_throttled: two failures empty 203.0.113.9's bucket. From then on a right
    // password, a wrong one and an unknown account get the same challenge page, and the
    // right one no session.
    for n in 0..2 {
        let r = gw.login_from("203.0.113.9", &format!("k{n}@example.com"), "guess").await;
        assert_eq!(r, plain_401, "failure {n}");
    }
    let right = gw.login_from("203.0.113.9", "carol@example.com", "carol's own passphrase").await;
    let wrong = gw.login_from("203.0.113.9", "carol@example.com", "not it").await;
    let unknown = gw.login_from("203.0.113.9", "nobody@example.com", "not it").await;
    assert!(right.ends_with(CHALLENGE), "{right}");
    assert_eq!(right, wrong, "a throttled network learns the password was right");
    assert_eq!(wrong, unknown);
    assert_eq!(set_cookie(&right), None, "a throttled network got a device cookie");

    // spray_suspected: one password failed at 10 accounts (from 10 networks). A match
    // is asked for a second factor, with no session; a miss is the plain 401.
    for n in 0..10 {
        let r = gw
            .login_from(&format!("100.64.0.{n}"), &format!("s{n}@example.com"), "Winter2026!")
            .await;
        assert_eq!(r, plain_401, "spray {n}");
    }
    let sprayed = gw.login_from("100.64.1.1", "dave@example.com", "Winter2026!").await;
    assert_eq!(status(&sprayed), "401", "{sprayed}");
    assert!(sprayed.ends_with("second factor required"), "{sprayed}");
    assert_eq!(set_cookie(&sprayed), None, "a sprayed password got a device cookie");
    let missed = gw.login_from("100.64.1.2", "carol@example.com", "Winter2026!").await;
    assert_eq!(missed, plain_401);
    // And a password nobody sprays still just logs in.
    let fine = gw.login_from("100.64.1.3", "carol@example.com", "carol's own passphrase").await;
    assert_eq!(status(&fine), "200", "{fine}");
    assert!(fine.ends_with("welcome"), "{fine}");
}

/// The body of the page every reset request gets.
const RESET_PAGE: &str =
    "if an account exists for that name, we have sent it a link to reset its password";

/// A users file of `names` (`NAME@example.com`), one bcrypt cost-4 hash for all.
fn users_file(dir: &std::path::Path, names: &[&str]) -> PathBuf {
    let hash = StoredHash::generate(b"a passphrase", &HashParams::Bcrypt { cost: 4 }).unwrap();
    let lines: String =
        names.iter().map(|n| format!("{n}@example.com:{}\n", hash.as_str())).collect();
    let users = dir.join("users.htpasswd");
    std::fs::write(&users, lines).unwrap();
    users
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reset_page_is_one_page_and_mail_goes_only_to_known_accounts_within_the_caps() {
    let dir = tempfile::tempdir().unwrap();
    // Realm `mail`: one client network may cause 3 reset mails an hour; the account's
    // caps at their defaults (one a minute, 5 a day).
    let extra = "[realms.mail.flows.password_reset]\nnetwork_budget = 3\n";
    let daemon =
        DaemonProcess::spawn(&TestConfig::embedded(&dir.path().join("data")).extra(extra).toml());
    let users = users_file(dir.path(), &["alice", "bob", "carol"]);
    let gw =
        Gateway::spawn_with(&users, daemon.addr, &["--realm", "mail", "--trusted-proxy-hops", "1"]);

    let page = gw.reset_from("192.0.2.1", "alice@example.com").await;
    assert_eq!(status(&page), "200", "{page}");
    assert!(page.ends_with(RESET_PAGE), "{page}");
    // Allowed or refused, an account or none: the same bytes.
    for (address, name, what) in [
        ("192.0.2.1", "ghost@example.com", "no account (allowed: no mail)"),
        ("192.0.2.1", "Alice@Example.COM", "the same account inside the minute (refused)"),
        ("192.0.2.1", "bob@example.com", "the network's third mail (allowed)"),
        ("192.0.2.1", "carol@example.com", "the network's budget spent (refused)"),
        ("192.0.2.1", "", "no name (INVALID_ARGUMENT)"),
        ("198.51.100.1", "carol@example.com", "another network (allowed)"),
    ] {
        assert_eq!(gw.reset_from(address, name).await, page, "{what}");
    }
    // Alice's, Bob's, and Carol's from the second network; none names its account.
    let mails = gw.mails_settled(3).await;
    assert_eq!(mails.len(), 3, "{mails:#?}");
    assert!(
        mails.iter().all(|m| !m.contains("example")),
        "a log line names an account: {mails:#?}"
    );

    // The daemon is gone: 503, as for every account.
    drop(daemon);
    let down = gw.reset_from("203.0.113.1", "alice@example.com").await;
    assert_eq!(status(&down), "503", "{down}");
    assert_eq!(gw.reset_from("203.0.113.1", "ghost@example.com").await, down);
    assert_eq!(gw.mails_settled(3).await.len(), 3, "a mail without the daemon's allow");
}

mod pending_logins;
