//! What ships in deploy/ works as shipped: every example configuration passes the
//! daemon's own `check-config` and selects the store shape its name promises; the
//! Containerfile and the systemd unit agree with the configurations they run. The
//! Kubernetes overlays, rendered by kustomize: `kubernetes`. The container image's
//! configuration and deploy/compose.yaml: `compose`; deploy/compose-mtls.yaml:
//! `compose_mtls`.

mod compose;
mod compose_mtls;
mod kubernetes;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml_ng::Value;

use portcullis_test_support::pki;

/// A test key secret (32+ bytes; test data, not a real secret).
const TEST_SECRET: &str = "deploy-artifacts-test-secret-0123456789abcdef";

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn toml_of(path: &str) -> toml::Table {
    read(path).parse().unwrap_or_else(|e| panic!("{path} is not TOML: {e}"))
}

/// Runs `portcullis check-config` on `text` (the configuration `origin` names), except that
/// the file named by `store.key_secret_file` (a path on the target host) is replaced by a
/// temporary file holding a test secret. Returns the exit code and both outputs.
fn check_config_text(origin: &str, text: &str) -> (i32, String) {
    let table: toml::Table = text.parse().unwrap_or_else(|e| panic!("{origin} is not TOML: {e}"));
    let dir = tempfile::tempdir().unwrap();
    let mut text_to_check = text.to_owned();
    let store = table.get("store").and_then(|s| s.as_table()).cloned().unwrap_or_default();
    if let Some(secret_path) = store.get("key_secret_file").and_then(|v| v.as_str()) {
        assert!(secret_path.starts_with('/'), "{origin}: key_secret_file is not absolute");
        let secret = dir.path().join("key_secret");
        std::fs::write(&secret, format!("{TEST_SECRET}\n")).unwrap();
        text_to_check = text_to_check.replace(secret_path, secret.to_str().unwrap());
    }
    // The `[tls]` files (paths on the target host) are replaced by a certificate and key
    // made now by a test CA, which also stands in for the gateways' CA.
    if let Some(tls) = table.get("tls").and_then(|t| t.as_table()).cloned() {
        let ca = pki::Ca::new("test gateways CA");
        let leaf = ca.leaf(&["portcullis.internal"], &[]);
        let files = [
            ("cert_file", pki::write(dir.path(), "server.pem", &leaf.cert_pem)),
            ("key_file", pki::write(dir.path(), "server.key", &leaf.key_pem)),
            ("client_ca_file", pki::write(dir.path(), "ca.pem", &ca.pem())),
        ];
        for (key, file) in files {
            if let Some(shipped) = tls.get(key).and_then(|v| v.as_str()) {
                text_to_check = text_to_check.replace(shipped, file.to_str().unwrap());
            }
        }
    }
    let file = dir.path().join("portcullis.toml");
    std::fs::write(&file, text_to_check).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_portcullis"));
    command.arg("check-config").arg(&file);
    // The configuration alone: no variable of the test's environment overrides it.
    for (name, _) in std::env::vars() {
        if name.starts_with("PORTCULLIS_") {
            command.env_remove(name);
        }
    }
    let out = command.output().unwrap();
    let output =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), output)
}

/// `path`, as shipped, passes `check-config` (with the files it names replaced by test
/// files: [`check_config_text`]).
fn assert_valid(path: &str) {
    assert_valid_text(path, &read(path));
}

/// `text` (the configuration `origin` names) passes `check-config`.
fn assert_valid_text(origin: &str, text: &str) {
    let (code, output) = check_config_text(origin, text);
    assert_eq!(code, 0, "{origin} fails check-config: {output}");
    assert!(output.contains("configuration is valid"), "{origin}: {output}");
}

/// The store keys that choose a shape, present in `path`'s `[store]`.
fn shape_keys(path: &str) -> BTreeSet<String> {
    let table = toml_of(path);
    let store = table.get("store").and_then(|s| s.as_table()).cloned().unwrap_or_default();
    ["redis_url", "redis_cluster_nodes", "redis_sentinel"]
        .into_iter()
        .filter(|k| store.contains_key(*k))
        .map(str::to_owned)
        .collect()
}

#[test]
fn there_is_one_example_config_per_store_shape() {
    let found: BTreeSet<String> = std::fs::read_dir(repo("deploy/config"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    // container.toml (the image's) and compose.toml (deploy/compose.yaml's) are tested
    // in `compose`, compose-mtls.toml (deploy/compose-mtls.yaml's) in `compose_mtls`.
    let want: BTreeSet<String> = [
        "embedded.toml",
        "redis.toml",
        "sentinel.toml",
        "cluster.toml",
        "container.toml",
        "compose.toml",
        "compose-mtls.toml",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    assert_eq!(found, want, "every file in deploy/config needs a test here");

    assert!(shape_keys("deploy/config/embedded.toml").is_empty());
    assert_eq!(shape_keys("deploy/config/redis.toml"), BTreeSet::from(["redis_url".to_owned()]));
    assert_eq!(
        shape_keys("deploy/config/cluster.toml"),
        BTreeSet::from(["redis_cluster_nodes".to_owned()])
    );
    assert_eq!(
        shape_keys("deploy/config/sentinel.toml"),
        BTreeSet::from(["redis_sentinel".to_owned()])
    );
    let sentinel = toml_of("deploy/config/sentinel.toml");
    let sentinel = &sentinel["store"]["redis_sentinel"];
    assert!(sentinel["master_name"].as_str().is_some_and(|m| !m.is_empty()));
    assert!(sentinel["nodes"].as_array().is_some_and(|n| n.len() >= 3), "fewer than 3 Sentinels");
    let cluster = toml_of("deploy/config/cluster.toml");
    let nodes = cluster["store"]["redis_cluster_nodes"].as_array().unwrap();
    assert!(nodes.iter().all(|n| n.as_str().is_some_and(|n| n.starts_with("redis"))));
}

#[test]
fn embedded_example_is_valid() {
    assert_valid("deploy/config/embedded.toml");
}

#[test]
fn redis_example_is_valid() {
    assert_valid("deploy/config/redis.toml");
}

#[test]
fn sentinel_example_is_valid() {
    assert_valid("deploy/config/sentinel.toml");
}

#[test]
fn cluster_example_is_valid() {
    assert_valid("deploy/config/cluster.toml");
}

#[test]
fn reference_config_is_valid() {
    assert_valid("deploy/portcullis.toml");
}

#[test]
fn kubernetes_overlay_configs_are_valid() {
    assert_valid("deploy/k8s/overlays/production/portcullis.toml");
    assert_valid("deploy/k8s/overlays/development/portcullis.toml");
}

/// The harness above can fail: a misspelt key in an otherwise shipped file is refused.
#[test]
fn check_config_refuses_a_misspelt_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typo.toml");
    let text = read("deploy/config/embedded.toml").replace("data_dir", "data_directory");
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("check-config")
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("data_directory"));
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v:?}"))
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not an integer: {v:?}"))
}

fn seq(v: &Value) -> &Vec<Value> {
    v.as_sequence().unwrap_or_else(|| panic!("not a list: {v:?}"))
}

// ---- Containerfile and systemd unit ----

#[test]
fn containerfile_is_multi_stage_non_root_with_the_health_probe() {
    let file = read("deploy/Containerfile");
    let lines: Vec<&str> = file.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    assert!(lines.iter().filter(|l| l.starts_with("FROM ")).count() >= 2, "not multi-stage");
    let user = lines.iter().rfind(|l| l.starts_with("USER ")).expect("no USER");
    assert!(!user.contains(" 0") && !user.contains("root"), "{user}");
    let health = lines.iter().position(|l| l.starts_with("HEALTHCHECK")).expect("no HEALTHCHECK");
    assert!(lines[health + 1].contains(r#""/usr/local/bin/portcullis", "health""#));
    assert!(lines.iter().any(|l| l.starts_with("EXPOSE ") && l.contains("50051")));
}

#[test]
fn systemd_unit_is_sandboxed_and_loads_the_key_secret_the_configs_name() {
    let unit = read("deploy/portcullis.service");
    let settings: Vec<(&str, &str)> =
        unit.lines().filter(|l| !l.starts_with('#')).filter_map(|l| l.split_once('=')).collect();
    let has = |key: &str, value: &str| settings.iter().any(|(k, v)| *k == key && *v == value);
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallFilter", "@system-service"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("StateDirectory", "portcullis"),
    ] {
        assert!(has(key, value), "the unit lacks {key}={value}");
    }
    let credential = settings.iter().find(|(k, _)| *k == "LoadCredential").expect("LoadCredential");
    let name = credential.1.split(':').next().unwrap();
    let path = format!("/run/credentials/portcullis.service/{name}");
    for config in ["redis.toml", "sentinel.toml", "cluster.toml"] {
        let table = toml_of(&format!("deploy/config/{config}"));
        assert_eq!(table["store"]["key_secret_file"].as_str(), Some(path.as_str()), "{config}");
    }
    let data_dir = toml_of("deploy/config/embedded.toml")["store"]["data_dir"].clone();
    assert_eq!(data_dir.as_str(), Some("/var/lib/portcullis"), "not the StateDirectory");
}

/// Every key of the configuration, `section.key` (realms under `realms.default`), with its
/// default as TOML text, from `Config::default()` itself.
fn default_keys() -> std::collections::BTreeMap<String, String> {
    fn walk(
        prefix: &str,
        table: &toml::Table,
        out: &mut std::collections::BTreeMap<String, String>,
    ) {
        for (key, value) in table {
            let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
            match value {
                toml::Value::Table(inner) => walk(&path, inner, out),
                other => {
                    out.insert(path, other.to_string());
                }
            }
        }
    }
    let text = toml::to_string(&portcullis::config::Config::default()).unwrap();
    let mut out = std::collections::BTreeMap::new();
    walk("", &text.parse().unwrap(), &mut out);
    out
}

/// The keys `deploy/portcullis.toml` shows, set or commented out (`# key = value`), with
/// the value written and whether the line is set.
fn shown_keys() -> std::collections::BTreeMap<String, (String, bool)> {
    let mut section = String::new();
    let mut out = std::collections::BTreeMap::new();
    for line in read("deploy/portcullis.toml").lines() {
        let set = !line.starts_with('#');
        let body = line.trim_start_matches('#').trim();
        if let Some(name) = body.strip_prefix('[').and_then(|b| b.split_once(']')).map(|b| b.0) {
            section = name.to_string();
            continue;
        }
        let Some((key, value)) = body.split_once(" = ") else { continue };
        if key.contains(' ') || key.is_empty() {
            continue; // prose
        }
        // The value alone, as TOML reads it (drops a trailing comment).
        let Ok(parsed) = format!("v = {value}").parse::<toml::Table>() else { continue };
        let path = if section.is_empty() { key.to_string() } else { format!("{section}.{key}") };
        out.insert(path, (parsed["v"].to_string(), set));
    }
    out
}

/// Keys whose shipped value is deliberately not the default, each said so in the file.
const NOT_DEFAULT: &[&str] = &["store.data_dir"];

#[test]
fn the_reference_config_shows_every_key_with_its_default() {
    let defaults = default_keys();
    let shown = shown_keys();
    assert!(defaults.len() > 40, "the walk found too few keys: {defaults:?}");
    let missing: Vec<&String> = defaults.keys().filter(|k| !shown.contains_key(*k)).collect();
    assert!(missing.is_empty(), "deploy/portcullis.toml does not show {missing:?}");
    for (key, (value, set)) in &shown {
        if !*set || NOT_DEFAULT.contains(&key.as_str()) {
            continue;
        }
        let default = defaults.get(key).unwrap_or_else(|| panic!("{key} is no setting"));
        // A duration may be written another way ("90days" for "3months 2days 12h...").
        let as_duration = |v: &str| humantime::parse_duration(v.trim_matches('"')).ok();
        if let (Some(a), Some(b)) = (as_duration(value), as_duration(default)) {
            assert_eq!(a, b, "deploy/portcullis.toml sets {key} to other than its default");
            continue;
        }
        assert_eq!(value, default, "deploy/portcullis.toml sets {key} to other than its default");
    }
}
