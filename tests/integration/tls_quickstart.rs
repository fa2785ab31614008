//! docs/tls.md's quick start, as a reader runs it: its one ```` ```sh tls-quickstart ````
//! block, run with bash in an empty directory, makes the CA, the daemon's certificate and
//! the two callers' certificates (X.509 v3, the extended key usages it says, keys 0600);
//! its one ```` ```toml tls-quickstart ```` block, pointed at those files, configures two
//! daemons on one Redis, where the gateway's certificate locks an account through one and
//! sees it locked through the other, the operator's certificate inspects it (tonic and
//! the binary's `inspect`, with the page's flags), and the gateway's certificate is
//! refused the Admin service.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use portcullis::client::{Client, ClientConfig, ClientTls, Decision};
use portcullis::pb::DoorState;
use portcullis_test_support::pki::{Leaf, client_tls};
use portcullis_test_support::*;
use tonic::Code;

/// Where the page's daemon configuration keeps the files the recipe makes in `pki/`.
const DOC_TLS_DIR: &str = "/etc/portcullis/tls/";

const ACCOUNT: &str = "quickstart@example.com";

/// The body of the one fenced block of docs/tls.md whose opening fence is
/// ```` ```INFO ````; panics when there is none, more than one, or it is not closed.
fn block(info: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/tls.md");
    let doc = std::fs::read_to_string(&path).unwrap();
    let fence = format!("```{info}");
    let mut found = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        if line.trim_end() != fence {
            continue;
        }
        let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim_end() != "```").collect();
        found.push(body.join("\n") + "\n");
    }
    assert_eq!(found.len(), 1, "docs/tls.md must have exactly one ```{info} block");
    let body = found.pop().unwrap();
    assert!(body.lines().count() > 3, "the ```{info} block is (nearly) empty, or never closed");
    body
}

fn run(command: &mut Command) -> Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `openssl x509 -noout -text` of `pki/NAME.pem`.
fn text(pki: &Path, name: &str) -> String {
    let out = run(Command::new("openssl")
        .args(["x509", "-noout", "-text", "-in"])
        .arg(pki.join(format!("{name}.pem"))));
    String::from_utf8(out.stdout).unwrap()
}

/// The line after `heading` in a certificate's text (an extension's value).
fn after(text: &str, heading: &str) -> String {
    let mut lines = text.lines().map(str::trim);
    lines.find(|l| l.starts_with(heading));
    lines.next().unwrap_or_else(|| panic!("no {heading} in:\n{text}")).to_owned()
}

/// Whether `pki/NAME.pem` is still valid `days` from now (`openssl x509 -checkend`).
fn valid_in(pki: &Path, name: &str, days: u64) -> bool {
    Command::new("openssl")
        .args(["x509", "-noout", "-checkend", &(days * 86_400).to_string(), "-in"])
        .arg(pki.join(format!("{name}.pem")))
        .stdout(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Runs the recipe as the page says (`bash -euo pipefail tls-quickstart.sh` in an empty
/// directory) and checks what it made; returns the `pki/` directory.
fn make_certificates(dir: &Path) -> PathBuf {
    std::fs::write(dir.join("tls-quickstart.sh"), block("sh tls-quickstart")).unwrap();
    let out = run(Command::new("bash")
        .args(["-euo", "pipefail", "tls-quickstart.sh"])
        .current_dir(dir)
        .stdin(Stdio::null()));
    let printed =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!printed.contains("PRIVATE KEY"), "the recipe printed a key:\n{printed}");
    let pki = dir.join("pki");
    let mut serials = Vec::new();
    for name in ["ca", "server", "gateway", "operator"] {
        let mode = std::fs::metadata(pki.join(format!("{name}.key"))).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "pki/{name}.key is {:o}", mode & 0o777);
        let text = text(&pki, name);
        assert!(text.contains("Version: 3 (0x2)"), "pki/{name}.pem is not X.509 v3:\n{text}");
        serials.push(after(&text, "Serial Number:"));
    }
    serials.sort();
    serials.dedup();
    assert_eq!(serials.len(), 4, "certificates share a serial: {serials:?}");

    let ca = text(&pki, "ca");
    assert_eq!(after(&ca, "X509v3 Basic Constraints: critical"), "CA:TRUE");
    assert_eq!(after(&ca, "X509v3 Key Usage: critical"), "Certificate Sign, CRL Sign");
    assert!(
        valid_in(&pki, "ca", 4 * 365) && !valid_in(&pki, "ca", 6 * 365),
        "the CA is for 5 years"
    );
    let leaves = [
        ("server", "TLS Web Server Authentication", "DNS:localhost"),
        ("gateway", "TLS Web Client Authentication", "DNS:gateway.portcullis.internal"),
        ("operator", "TLS Web Client Authentication", "DNS:operator.portcullis.internal"),
    ];
    for (name, eku, san) in leaves {
        let text = text(&pki, name);
        assert_eq!(after(&text, "X509v3 Extended Key Usage:"), eku, "pki/{name}.pem");
        assert_eq!(
            after(&text, "X509v3 Key Usage: critical"),
            "Digital Signature",
            "pki/{name}.pem"
        );
        let names = after(&text, "X509v3 Subject Alternative Name:");
        assert!(names.split(", ").any(|n| n == san), "pki/{name}.pem names {names}, not {san}");
        assert!(
            valid_in(&pki, name, 89) && !valid_in(&pki, name, 91),
            "pki/{name}.pem is for 90 days"
        );
    }
    let server = after(&text(&pki, "server"), "X509v3 Subject Alternative Name:");
    assert!(server.contains("IP Address:127.0.0.1"), "{server}");
    pki
}

/// The page's daemon configuration, reading the files from `pki`.
fn daemon_toml(pki: &Path) -> String {
    let toml = block("toml tls-quickstart");
    assert_eq!(
        toml.matches(DOC_TLS_DIR).count(),
        3,
        "cert_file, key_file, client_ca_file in {DOC_TLS_DIR}"
    );
    toml.replace(DOC_TLS_DIR, &format!("{}/", pki.display()))
}

/// The recipe's `NAME.pem` and `NAME.key`.
fn leaf(pki: &Path, name: &str) -> Leaf {
    let read = |ext: &str| std::fs::read_to_string(pki.join(format!("{name}.{ext}"))).unwrap();
    Leaf { cert_pem: read("pem"), key_pem: read("key") }
}

/// The gateway library with the gateway's certificate, as docs/tls.md configures it.
fn gateway(pki: &Path, daemons: &[SocketAddr]) -> Client {
    Client::new(ClientConfig {
        endpoints: daemons.iter().map(|a| format!("https://localhost:{}", a.port())).collect(),
        tls: Some(ClientTls {
            ca_file: pki.join("ca.pem"),
            cert_file: Some(pki.join("gateway.pem")),
            key_file: Some(pki.join("gateway.key")),
            domain_name: None,
        }),
        ..ClientConfig::default()
    })
    .unwrap()
}

/// `portcullis inspect` with the page's flags and `NAME`'s certificate, from `dir`.
async fn cli_inspect(dir: &Path, daemon: SocketAddr, name: &str) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_portcullis"));
    command
        .args(["inspect", "--realm", "default", "--identifier", "-", "--addr"])
        .arg(format!("https://localhost:{}", daemon.port()))
        .args(["--ca-file", "pki/ca.pem", "--cert-file"])
        .arg(format!("pki/{name}.pem"))
        .arg("--key-file")
        .arg(format!("pki/{name}.key"))
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    use tokio::io::AsyncWriteExt;
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(format!("{ACCOUNT}\n").as_bytes()).await.unwrap();
    drop(stdin);
    child.wait_with_output().await.unwrap()
}

#[tokio::test]
async fn the_tls_quick_start_works_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_certificates(dir.path());
    let toml = daemon_toml(&pki);
    let redis = RedisServer::start();
    let one = Daemon::start(TestConfig::redis(&redis.url()).extra(&toml).settings()).await;
    let two = Daemon::start(TestConfig::redis(&redis.url()).extra(&toml).settings()).await;

    // The gateway locks the account through the first daemon ...
    let via_one = gateway(&pki, &[one.addr]);
    let mut allowed = 0;
    loop {
        let answer = via_one.record_attempt("default", ACCOUNT, None).await;
        if !answer.is_allowed() {
            assert!(!answer.retryable, "a failure, not a closed door: {answer:?}");
            break;
        }
        allowed += 1;
        assert!(allowed <= 20, "the door never closed");
    }
    assert!(allowed > 0, "the gateway's certificate was never served");
    // ... and finds it locked through the second, which serves its other accounts.
    let via_two = gateway(&pki, &[two.addr]);
    let answer = via_two.admit("default", ACCOUNT).await;
    assert_eq!((answer.decision, answer.retryable), (Decision::Deny, false), "{answer:?}");
    assert!(via_two.admit("default", "someone-else@example.com").await.is_allowed());
    let via_both = gateway(&pki, &[one.addr, two.addr]);
    assert_eq!(via_both.admit("default", ACCOUNT).await.decision, Decision::Deny);

    // The operator's certificate may inspect (on either daemon), not count attempts.
    let ca = std::fs::read_to_string(pki.join("ca.pem")).unwrap();
    let operator = || Some(client_tls(&ca, Some(&leaf(&pki, "operator"))));
    let mut op = caller(two.addr, operator(), None).await.unwrap();
    let state = op.inspect("default", ACCOUNT).await.unwrap();
    assert_eq!(state.door, DoorState::Closed as i32, "{state:?}");
    let refused = op.attempt("default", ACCOUNT).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    // The gateway's certificate is refused the Admin service.
    let mut gw =
        caller(one.addr, Some(client_tls(&ca, Some(&leaf(&pki, "gateway")))), None).await.unwrap();
    let refused = gw.inspect("default", ACCOUNT).await.unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");

    // The binary's `inspect`, with the page's flags: closed (exit 1) for the operator,
    // an error (exit 2) for the gateway.
    let out = cli_inspect(dir.path(), one.addr, "operator").await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.lines().any(|l| l == "door: closed"), "{stdout}");
    let out = cli_inspect(dir.path(), one.addr, "gateway").await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.to_lowercase().contains("permission"), "{stderr}");

    one.shutdown().await;
    two.shutdown().await;
}
