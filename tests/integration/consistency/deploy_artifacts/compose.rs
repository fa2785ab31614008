//! The container image's configuration and `deploy/compose.yaml` work as shipped: the
//! image's configuration (deploy/config/container.toml) listens on the container's
//! address at the ports the Containerfile publishes and keeps its data on the image's
//! volume; the compose file's daemons share one key secret source and point at its Redis
//! service; and every configuration they name, started with the real binary (only its
//! addresses moved to free loopback ports, its Redis URL to a test redis-server and its
//! key secret file to a test one), answers on its listen address, the replicas sharing
//! counts. No container engine is needed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;

use portcullis_test_support::{DaemonProcess, RedisServer};
use serde_yaml_ng::Value;

use super::{TEST_SECRET, assert_valid, read, repo, s, seq, toml_of};

/// The image's configuration path (`ENV PORTCULLIS_CONFIG` in the Containerfile).
fn image_config_path() -> String {
    let file = read("deploy/Containerfile");
    let env = file.lines().find_map(|l| l.trim().strip_prefix("ENV PORTCULLIS_CONFIG="));
    env.expect("the Containerfile sets PORTCULLIS_CONFIG").split_whitespace().next().unwrap().into()
}

/// The ports the Containerfile's `EXPOSE` lines publish.
fn exposed_ports() -> BTreeSet<u16> {
    read("deploy/Containerfile")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("EXPOSE "))
        .flat_map(|ports| ports.split_whitespace().map(|p| p.parse().unwrap()))
        .collect()
}

pub(super) fn addr(table: &toml::Table, key: &str) -> SocketAddr {
    let value = match key.split_once('.') {
        Some((section, key)) => &table[section][key],
        None => &table[key],
    };
    value.as_str().unwrap_or_else(|| panic!("{key} is not set")).parse().unwrap()
}

#[test]
fn the_image_runs_the_container_config_on_its_published_ports_and_volume() {
    let path = "deploy/config/container.toml";
    assert_valid(path);
    let containerfile = read("deploy/Containerfile");
    // The build copies container.toml to where the image reads its configuration.
    let install = containerfile
        .lines()
        .find(|l| !l.starts_with('#') && l.contains(path))
        .expect("the Containerfile does not install deploy/config/container.toml");
    let target = image_config_path();
    assert!(install.trim_end_matches([' ', '\\']).ends_with(&format!("/out{target}")), "{install}");

    let config = toml_of(path);
    let exposed = exposed_ports();
    for key in ["listen", "telemetry.admin_listen"] {
        let a = addr(&config, key);
        assert!(a.ip().is_unspecified(), "{key} = {a}: published ports would reach nothing");
        assert!(exposed.contains(&a.port()), "{key} = {a}, the image exposes {exposed:?}");
    }
    // The HEALTHCHECK's `portcullis health` asks 127.0.0.1:50051 (its default).
    assert_eq!(addr(&config, "listen").port(), 50051);
    assert_eq!(config.get("allow_plaintext").and_then(|v| v.as_bool()), Some(true));

    // The embedded store's data directory is the image's volume, made for its user.
    let data_dir = config["store"]["data_dir"].as_str().unwrap();
    let volume = containerfile.lines().find_map(|l| l.trim().strip_prefix("VOLUME "));
    assert_eq!(volume, Some(format!("[\"{data_dir}\"]").as_str()), "no VOLUME at {data_dir}");
    assert!(containerfile.contains(&format!("--chown=65532:65532 /out{data_dir} {data_dir}")));
}

/// `config` with its listen and admin addresses on free loopback ports (port 0: the
/// daemon logs the one it got).
pub(super) fn on_loopback(mut config: toml::Table) -> toml::Table {
    config.insert("listen".into(), "127.0.0.1:0".into());
    let telemetry = config.entry("telemetry").or_insert(toml::Table::new().into());
    telemetry.as_table_mut().unwrap().insert("admin_listen".into(), "127.0.0.1:0".into());
    config
}

/// `portcullis health` against `addr`: its output, after it exited 0.
/// Polls until it answers SERVING (the first readiness check follows the start by up to
/// a health interval, longer on a loaded machine), 10 s at most.
fn health(addr: SocketAddr) -> String {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
            .args(["health", "--addr", &format!("http://{addr}")])
            .output()
            .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if out.status.success() || std::time::Instant::now() > deadline {
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{addr}: {printed} {stderr}");
            return printed;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// One operator command (`attempt`, `admit`) against `addr`: what it printed.
fn operator(addr: SocketAddr, command: &str, identifier: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args([command, "--addr", &format!("http://{addr}"), "--realm", "default"])
        .args(["--identifier", identifier])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[test]
fn the_container_config_serves_on_its_listen_address() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = on_loopback(toml_of("deploy/config/container.toml"));
    let store = config["store"].as_table_mut().unwrap();
    store.insert("data_dir".into(), dir.path().to_str().unwrap().into());
    // No key secret: the embedded store makes its own in the data directory, as in the
    // image.
    let daemon = DaemonProcess::spawn_with_secret(&toml::to_string(&config).unwrap(), None);
    assert_eq!(health(daemon.addr), "SERVING");
    assert_eq!(operator(daemon.addr, "attempt", "container@example.com"), "ALLOW");
    assert!(dir.path().join("key_secret").exists(), "no key secret made in the data directory");
}

// ---- deploy/compose.yaml ----

fn compose() -> Value {
    serde_yaml_ng::from_str(&read("deploy/compose.yaml")).expect("deploy/compose.yaml is YAML")
}

/// The compose services built from deploy/Containerfile (the daemons), by name.
pub(super) fn replicas(compose: &Value) -> Vec<(String, Value)> {
    let services = compose["services"].as_mapping().expect("no services");
    services
        .iter()
        .filter(|(_, svc)| svc["build"]["dockerfile"] == "deploy/Containerfile")
        .map(|(name, svc)| (s(name).to_owned(), svc.clone()))
        .collect()
}

/// The repository path of the configuration `service` mounts at the image's
/// configuration path (a `./HOST:CONTAINER:ro` volume, relative to deploy/).
pub(super) fn mounted_config(service: &Value) -> String {
    let target = image_config_path();
    let mount = seq(&service["volumes"])
        .iter()
        .map(s)
        .find(|v| v.split(':').nth(1) == Some(target.as_str()))
        .unwrap_or_else(|| panic!("nothing mounted at {target}"));
    let parts: Vec<&str> = mount.split(':').collect();
    assert_eq!(parts.get(2), Some(&"ro"), "the configuration is mounted writable: {mount}");
    let host = parts[0].strip_prefix("./").expect("a path relative to the compose file");
    let path = format!("deploy/{host}");
    assert!(repo(&path).is_file(), "{mount}: {path} does not exist");
    let args: Vec<&str> = seq(&service["command"]).iter().map(s).collect();
    assert_eq!(args, ["serve", "--config", target.as_str()]);
    path
}

#[test]
fn the_compose_replicas_share_one_key_secret_and_the_redis_service() {
    let compose = compose();
    let replicas = replicas(&compose);
    assert_eq!(replicas.len(), 2, "two daemons, built from deploy/Containerfile");
    let redis = &compose["services"]["redis"];
    assert!(s(&redis["image"]).contains("redis:"), "the redis service runs no Redis image");
    let redis_command: Vec<&str> = seq(&redis["command"]).iter().map(s).collect();
    assert!(redis_command.windows(2).any(|w| w == ["--maxmemory-policy", "noeviction"]));
    let mut secret_sources = BTreeSet::new();
    let mut published = BTreeSet::new();
    for (name, svc) in &replicas {
        let path = mounted_config(svc);
        assert_valid(&path);
        let config = toml_of(&path);
        // The key secret: one compose secret, from one file, where the config reads it.
        let secrets: Vec<&str> = seq(&svc["secrets"]).iter().map(s).collect();
        assert_eq!(secrets.len(), 1, "{name}: {secrets:?}");
        let file = s(&compose["secrets"][secrets[0]]["file"]);
        secret_sources.insert(file.to_owned());
        let wanted = format!("/run/secrets/{}", secrets[0]);
        assert_eq!(config["store"]["key_secret_file"].as_str(), Some(wanted.as_str()), "{name}");
        assert!(svc.get("environment").is_none(), "{name}: environment overrides the config");
        // Redis: the compose service, by name, on its port, and healthy first.
        let url = config["store"]["redis_url"].as_str().expect("no store.redis_url");
        assert!(url.starts_with("redis://redis:6379/"), "{name}: {path} points at {url}");
        assert_eq!(s(&svc["depends_on"]["redis"]["condition"]), "service_healthy", "{name}");
        // The health check is the image's: `portcullis health` on the listen port.
        let test: Vec<&str> = seq(&svc["healthcheck"]["test"]).iter().map(s).collect();
        assert_eq!(test, ["CMD", "/usr/local/bin/portcullis", "health"], "{name}");
        assert_eq!(addr(&config, "listen").to_string(), "0.0.0.0:50051", "{name}");
        // Published ports: the container's listen and admin ports, on the host's loopback
        // address (the listener is plaintext), each host port once.
        let container_ports: BTreeSet<u16> = seq(&svc["ports"])
            .iter()
            .map(|p| {
                let parts: Vec<&str> = s(p).split(':').collect();
                assert_eq!(parts.len(), 3, "{name}: {p:?} publishes on every address");
                assert_eq!(parts[0], "127.0.0.1", "{name}: plaintext published off loopback");
                assert!(published.insert(parts[1].to_owned()), "host port {} twice", parts[1]);
                parts[2].parse().unwrap()
            })
            .collect();
        let wanted = BTreeSet::from([
            addr(&config, "listen").port(),
            addr(&config, "telemetry.admin_listen").port(),
        ]);
        assert_eq!(container_ports, wanted, "{name}");
    }
    assert_eq!(secret_sources.len(), 1, "the replicas read different key secrets");
    // The secret file itself is made on the host and never committed or built in.
    let secret = secret_sources.into_iter().next().unwrap();
    let ignored = format!("/deploy/{}", secret.trim_start_matches("./"));
    for file in [".gitignore", ".dockerignore"] {
        assert!(read(file).lines().any(|l| l == ignored), "{file} does not ignore {ignored}");
    }
}

#[test]
fn the_compose_configs_start_the_daemon_and_the_replicas_share_counts() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let compose = compose();
    // The one secret file every replica reads (checked above), made here.
    let secret = dir.path().join("key_secret");
    std::fs::write(&secret, format!("{TEST_SECRET}\n")).unwrap();
    let daemons: Vec<DaemonProcess> = replicas(&compose)
        .iter()
        .map(|(_, svc)| {
            let shipped = toml_of(&mounted_config(svc));
            let mut config = on_loopback(shipped.clone());
            let store = config["store"].as_table_mut().unwrap();
            store.insert("redis_url".into(), redis.url().into());
            store.insert("key_secret_file".into(), secret.to_str().unwrap().into());
            // Nothing else was changed.
            let mut back = config.clone();
            for key in ["listen", "telemetry", "store"] {
                back.insert(key.into(), shipped[key].clone());
            }
            assert_eq!(back, shipped);
            DaemonProcess::spawn_with_secret(&toml::to_string(&config).unwrap(), None)
        })
        .collect();
    assert_eq!(daemons.len(), 2);
    for d in &daemons {
        assert_eq!(health(d.addr), "SERVING", "a replica does not answer on its listen address");
    }
    // Five failures through one replica close the door on the other: one Redis, one key
    // secret.
    for _ in 0..5 {
        assert_eq!(operator(daemons[0].addr, "attempt", "compose@example.com"), "ALLOW");
    }
    assert_eq!(operator(daemons[1].addr, "admit", "compose@example.com"), "DENY");
}
