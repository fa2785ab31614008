//! deploy/compose-mtls.yaml works as shipped: its two daemons mount the TLS quick start's
//! files from deploy/pki/ (the daemon's certificate and key, the CA, the health check's
//! certificate; never the CA's key nor a caller's), serve mutual TLS only with the
//! production overlay's caller table, publish on the host's loopback address only, and
//! check their health over mutual TLS. Then the configuration, started with the real
//! binary on certificates made by docs/tls.md's quick start and deploy/health-cert.sh
//! (only its addresses, its Redis and its key secret moved, as in `compose`): the health
//! check answers SERVING and may call nothing else, a gateway's lockout through one daemon
//! holds on the other, and the Admin service is the operators' alone. No container engine
//! is needed; OpenSSL 3 and bash are.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use portcullis_test_support::{DaemonProcess, RedisServer};
use serde_yaml_ng::Value;

use super::compose::{addr, mounted_config, on_loopback, replicas};
use super::{TEST_SECRET, assert_valid, read, repo, s, seq, toml_of};

const COMPOSE: &str = "deploy/compose-mtls.yaml";

/// Where the daemons' containers find the TLS files.
const TLS_DIR: &str = "/etc/portcullis/tls/";

/// What of deploy/pki/ a daemon's container may hold: its own certificate and key, the CA
/// it trusts, and the health check's certificate, which names no caller.
const MOUNTABLE: [&str; 5] = ["server.pem", "server.key", "ca.pem", "health.pem", "health.key"];

fn compose() -> Value {
    serde_yaml_ng::from_str(&read(COMPOSE)).expect("deploy/compose-mtls.yaml is YAML")
}

/// The `./pki/FILE:/etc/portcullis/tls/FILE:ro` mounts of `service`: container path to
/// the file's name in deploy/pki/.
fn tls_mounts(service: &Value) -> BTreeMap<String, String> {
    let mut mounts = BTreeMap::new();
    for volume in seq(&service["volumes"]).iter().map(s) {
        let parts: Vec<&str> = volume.split(':').collect();
        let Some(file) = parts[0].strip_prefix("./pki/") else {
            assert!(!parts[0].contains("pki"), "{volume}: the pki directory, or part of it");
            continue;
        };
        assert!(!file.is_empty() && !file.contains('/'), "{volume}: mount single files");
        assert_eq!(parts.get(2), Some(&"ro"), "{volume} is mounted writable");
        assert!(parts[1].starts_with(TLS_DIR), "{volume}: not under {TLS_DIR}");
        mounts.insert(parts[1].to_owned(), file.to_owned());
    }
    mounts
}

/// The health check's command line, less the leading `CMD`.
fn healthcheck(service: &Value) -> Vec<String> {
    let test: Vec<&str> = seq(&service["healthcheck"]["test"]).iter().map(s).collect();
    assert_eq!(test.first(), Some(&"CMD"), "{test:?}");
    test[1..].iter().map(|a| (*a).to_owned()).collect()
}

/// The value after `--name` in `args`.
fn flag<'a>(args: &'a [String], name: &str) -> &'a str {
    let at = args.iter().position(|a| a == name).unwrap_or_else(|| panic!("no {name}: {args:?}"));
    &args[at + 1]
}

#[test]
fn the_mtls_compose_file_serves_mutual_tls_only_with_the_production_callers() {
    let compose = compose();
    let replicas = replicas(&compose);
    assert_eq!(replicas.len(), 2, "two daemons, built from deploy/Containerfile");
    let redis = &compose["services"]["redis"];
    let redis_command: Vec<&str> = seq(&redis["command"]).iter().map(s).collect();
    assert!(redis_command.windows(2).any(|w| w == ["--maxmemory-policy", "noeviction"]));
    assert!(redis.get("ports").is_none(), "Redis is published");
    let production = toml_of("deploy/k8s/overlays/production/portcullis.toml");
    let mut published = BTreeSet::new();
    for (name, svc) in &replicas {
        let path = mounted_config(svc);
        assert_eq!(path, "deploy/config/compose-mtls.toml", "{name}");
        assert_valid(&path);
        let config = toml_of(&path);
        assert!(config.get("allow_plaintext").is_none(), "{name}: allow_plaintext");
        let tls = config["tls"].as_table().expect("no [tls]");
        let mounts = tls_mounts(svc);
        for key in ["cert_file", "key_file", "client_ca_file"] {
            let file = tls.get(key).and_then(|v| v.as_str());
            let file = file.unwrap_or_else(|| panic!("{name}: no tls.{key}"));
            assert!(mounts.contains_key(file), "{name}: tls.{key} {file} is not from deploy/pki/");
        }
        let files: BTreeSet<&str> = mounts.values().map(String::as_str).collect();
        assert!(files.iter().all(|f| MOUNTABLE.contains(f)), "{name} mounts {files:?}");
        assert_eq!(config["callers"], production["callers"], "{name}: not the production callers");

        // The health check: grpc.health.v1 over mutual TLS, trusting the CA the daemon
        // trusts, with a client certificate mounted for it (server.pem is for server
        // authentication only).
        let check = healthcheck(svc);
        assert_eq!(check[..2], ["/usr/local/bin/portcullis", "health"], "{name}");
        let listen = addr(&config, "listen");
        assert_eq!(listen.to_string(), "0.0.0.0:50051", "{name}");
        assert_eq!(flag(&check, "--addr"), format!("https://127.0.0.1:{}", listen.port()));
        assert_eq!(flag(&check, "--ca-file"), tls["client_ca_file"].as_str().unwrap());
        for f in ["--cert-file", "--key-file"] {
            assert!(mounts.contains_key(flag(&check, f)), "{name}: {f} is not mounted");
        }
        assert_ne!(flag(&check, "--cert-file"), tls["cert_file"].as_str().unwrap());

        // Published on the host's loopback address, each host port once: the admin
        // listener is plain HTTP.
        let container_ports: BTreeSet<u16> = seq(&svc["ports"])
            .iter()
            .map(|p| {
                let parts: Vec<&str> = s(p).split(':').collect();
                assert_eq!(parts.len(), 3, "{name}: {p:?} publishes on every address");
                assert_eq!(parts[0], "127.0.0.1", "{name}: published off loopback");
                assert!(published.insert(parts[1].to_owned()), "host port {} twice", parts[1]);
                parts[2].parse().unwrap()
            })
            .collect();
        let wanted =
            BTreeSet::from([listen.port(), addr(&config, "telemetry.admin_listen").port()]);
        assert_eq!(container_ports, wanted, "{name}");
        assert_eq!(s(&svc["depends_on"]["redis"]["condition"]), "service_healthy", "{name}");
        let secrets: Vec<&str> = seq(&svc["secrets"]).iter().map(s).collect();
        let wanted = format!("/run/secrets/{}", secrets[0]);
        assert_eq!(config["store"]["key_secret_file"].as_str(), Some(wanted.as_str()));
        assert!(config["store"]["redis_url"].as_str().unwrap().starts_with("redis://redis:6379/"));
    }
    // The keys are made on the host and never committed or built in.
    for file in [".gitignore", ".dockerignore"] {
        assert!(
            read(file).lines().any(|l| l == "/deploy/pki/"),
            "{file} does not ignore /deploy/pki/"
        );
    }
}

/// The body of docs/tls.md's one ```` ```sh tls-quickstart ```` block.
fn quick_start() -> String {
    let doc = read("docs/tls.md");
    let mut lines = doc.lines().skip_while(|l| l.trim_end() != "```sh tls-quickstart").skip(1);
    let body: Vec<&str> = lines.by_ref().take_while(|l| l.trim_end() != "```").collect();
    assert!(body.len() > 3, "docs/tls.md has no ```sh tls-quickstart block");
    body.join("\n") + "\n"
}

fn run(command: &mut Command) -> Output {
    let out = command.output().unwrap();
    let (stdout, stderr) =
        (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{command:?} failed ({}):\n{stdout}{stderr}", out.status);
    out
}

/// Makes deploy/pki/ as a user does, in `dir`: the quick start, then deploy/health-cert.sh.
fn make_pki(dir: &Path) -> PathBuf {
    let script = dir.join("tls-quickstart.sh");
    std::fs::write(&script, quick_start()).unwrap();
    run(Command::new("bash").args(["-euo", "pipefail"]).arg(&script).current_dir(dir));
    let pki = dir.join("pki");
    run(Command::new("bash").arg(repo("deploy/health-cert.sh")).arg(&pki));
    pki
}

/// A command of the binary against `addr` over mutual TLS with `pki/IDENTITY.pem`.
fn call(pki: &Path, addr: SocketAddr, identity: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(args)
        .args(["--addr", &format!("https://127.0.0.1:{}", addr.port())])
        .arg("--ca-file")
        .arg(pki.join("ca.pem"))
        .arg("--cert-file")
        .arg(pki.join(format!("{identity}.pem")))
        .arg("--key-file")
        .arg(pki.join(format!("{identity}.key")))
        .env_remove("PORTCULLIS_ADDR")
        .output()
        .unwrap()
}

fn printed(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// `service`'s health check as its container runs it, on the host: its mounted files
/// replaced by `pki`'s, its port by the daemon's. Polls until it exits 0 (10 s at most).
fn run_healthcheck(service: &Value, pki: &Path, daemon: SocketAddr) -> String {
    let mounts = tls_mounts(service);
    let check: Vec<String> = healthcheck(service)
        .into_iter()
        .skip(1)
        .map(|a| match mounts.get(&a) {
            Some(file) => pki.join(file).to_string_lossy().into_owned(),
            None => a.replace(":50051", &format!(":{}", daemon.port())),
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_portcullis")).args(&check).output().unwrap();
        if out.status.success() || Instant::now() > deadline {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{check:?}: {} {stderr}", printed(&out));
            return printed(&out);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_mtls_compose_config_serves_the_quick_start_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let pki = make_pki(dir.path());
    let redis = RedisServer::start();
    let secret = dir.path().join("key_secret");
    std::fs::write(&secret, format!("{TEST_SECRET}\n")).unwrap();
    let compose = compose();
    let services = replicas(&compose);
    let daemons: Vec<DaemonProcess> = services
        .iter()
        .map(|(_, svc)| {
            let mut config = on_loopback(toml_of(&mounted_config(svc)));
            let store = config["store"].as_table_mut().unwrap();
            store.insert("redis_url".into(), redis.url().into());
            store.insert("key_secret_file".into(), secret.to_str().unwrap().into());
            // The files the compose file mounts, where the test made them.
            let mounts = tls_mounts(svc);
            for (_, path) in config["tls"].as_table_mut().unwrap().iter_mut() {
                if let Some(file) = path.as_str().and_then(|p| mounts.get(p)) {
                    *path = pki.join(file).to_str().unwrap().into();
                }
            }
            DaemonProcess::spawn_with_secret(&toml::to_string(&config).unwrap(), None)
        })
        .collect();
    for (d, (_, svc)) in daemons.iter().zip(&services) {
        assert_eq!(run_healthcheck(svc, &pki, d.addr), "SERVING");
    }
    let account = ["--realm", "default", "--identifier", "compose-mtls@example.com"];
    let with = |command: &'static str| [&[command][..], &account[..]].concat();
    // The health check's certificate opens a connection, and names no caller.
    let refused = call(&pki, daemons[0].addr, "health", &with("admit"));
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(why.contains("no configured caller"), "{why}");
    // Five failures through one daemon close the door on the other.
    for _ in 0..5 {
        assert_eq!(printed(&call(&pki, daemons[0].addr, "gateway", &with("attempt"))), "ALLOW");
    }
    assert_eq!(printed(&call(&pki, daemons[1].addr, "gateway", &with("admit"))), "DENY");
    // The Admin service: the operators', not the gateways'. (inspect exits 1 on a closed
    // door, 2 on an error.)
    let gateway = call(&pki, daemons[1].addr, "gateway", &with("inspect"));
    let why = String::from_utf8_lossy(&gateway.stderr);
    assert_eq!(gateway.status.code(), Some(2), "a gateway inspected: {}", printed(&gateway));
    assert!(why.contains("caller \"gateways\" may not call portcullis.v1.Admin/Inspect"), "{why}");
    let operator = call(&pki, daemons[1].addr, "operator", &with("inspect"));
    let why = String::from_utf8_lossy(&operator.stderr);
    assert_eq!(operator.status.code(), Some(1), "{why}");
    assert!(printed(&operator).contains("door: closed"), "{}", printed(&operator));
}
