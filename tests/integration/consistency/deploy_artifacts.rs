//! What ships in deploy/ works as shipped: every example configuration passes the
//! daemon's own `check-config` and selects the store shape its name promises; the
//! Kubernetes manifests parse and keep what an operator relies on (gRPC probes, non-root
//! and read-only pods, named ports, the Secrets the configuration reads, a disruption
//! budget, a NetworkPolicy that admits only gateways and monitoring); the Containerfile
//! and the systemd unit agree with the configurations they run. The container image's
//! configuration and deploy/compose.yaml: `compose`.

mod compose;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
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

/// Runs `portcullis check-config` on `path` as shipped, except that the file named by
/// `store.key_secret_file` (a path on the target host) is replaced by a temporary file
/// holding a test secret. Returns the exit code and both outputs.
fn check_config(path: &str) -> (i32, String) {
    let text = read(path);
    let dir = tempfile::tempdir().unwrap();
    let mut text_to_check = text.clone();
    let store = toml_of(path).get("store").and_then(|s| s.as_table()).cloned().unwrap_or_default();
    if let Some(secret_path) = store.get("key_secret_file").and_then(|v| v.as_str()) {
        assert!(secret_path.starts_with('/'), "{path}: key_secret_file is not absolute");
        let secret = dir.path().join("key_secret");
        std::fs::write(&secret, format!("{TEST_SECRET}\n")).unwrap();
        text_to_check = text.replace(secret_path, secret.to_str().unwrap());
    }
    // The `[tls]` files (paths on the target host) are replaced by a certificate and key
    // made now by a test CA, which also stands in for the gateways' CA.
    if let Some(tls) = toml_of(path).get("tls").and_then(|t| t.as_table()).cloned() {
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
    let out = Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .arg("check-config")
        .arg(&file)
        .env_remove("PORTCULLIS_KEY_SECRET")
        .env_remove("PORTCULLIS_REDIS_URL")
        .env_remove("PORTCULLIS_LISTEN")
        .env_remove("PORTCULLIS_DATA_DIR")
        .output()
        .unwrap();
    let output =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), output)
}

fn assert_valid(path: &str) {
    let (code, output) = check_config(path);
    assert_eq!(code, 0, "{path} fails check-config: {output}");
    assert!(output.contains("configuration is valid"), "{path}: {output}");
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
    // in `compose`.
    let want: BTreeSet<String> = [
        "embedded.toml",
        "redis.toml",
        "sentinel.toml",
        "cluster.toml",
        "container.toml",
        "compose.toml",
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
fn kubernetes_config_is_valid() {
    assert_valid("deploy/k8s/portcullis.toml");
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

// ---- Kubernetes ----

/// Every document of every `deploy/k8s/*.yaml` but the kustomization, by kind.
fn manifests() -> Vec<(String, Value)> {
    let mut docs = Vec::new();
    for file in kustomization_resources() {
        let text = read(&format!("deploy/k8s/{file}"));
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value = Value::deserialize(doc).unwrap_or_else(|e| panic!("{file}: {e}"));
            if value.is_null() {
                continue;
            }
            docs.push((file.clone(), value));
        }
    }
    docs
}

fn kustomization() -> Value {
    serde_yaml_ng::from_str(&read("deploy/k8s/kustomization.yaml")).unwrap()
}

fn kustomization_resources() -> Vec<String> {
    kustomization()["resources"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_owned())
        .collect()
}

fn one(kind: &str) -> Value {
    let found: Vec<Value> =
        manifests().into_iter().filter(|(_, d)| d["kind"] == kind).map(|(_, d)| d).collect();
    assert_eq!(found.len(), 1, "expected one {kind}");
    found.into_iter().next().unwrap()
}

fn all(kind: &str) -> Vec<Value> {
    manifests().into_iter().filter(|(_, d)| d["kind"] == kind).map(|(_, d)| d).collect()
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

/// The pod's labels, which every selector must match.
fn pod_labels() -> Value {
    one("Deployment")["spec"]["template"]["metadata"]["labels"].clone()
}

/// `selector` (a Service's label map, or a label selector's `matchLabels`) matches the
/// Deployment's pods.
fn selects_pods(selector: &Value) {
    let labels = pod_labels();
    let selector = selector.get("matchLabels").unwrap_or(selector);
    assert!(selector.get("matchExpressions").is_none(), "selector not understood");
    let selector = selector.as_mapping().expect("a selector");
    assert!(!selector.is_empty(), "an empty selector matches everything");
    for (k, v) in selector {
        assert_eq!(&labels[k.as_str().unwrap()], v, "selector {k:?} does not match the pods");
    }
}

fn container() -> Value {
    let d = one("Deployment");
    let containers = seq(&d["spec"]["template"]["spec"]["containers"]);
    assert_eq!(containers.len(), 1);
    containers[0].clone()
}

fn container_port(name: &str) -> i64 {
    let c = container();
    let port = seq(&c["ports"]).iter().find(|p| p["name"] == name);
    int(&port.unwrap_or_else(|| panic!("no container port named {name}"))["containerPort"])
}

fn k8s_config() -> toml::Table {
    toml_of("deploy/k8s/portcullis.toml")
}

#[test]
fn kustomization_lists_every_manifest_and_generates_the_config() {
    let listed: BTreeSet<String> = kustomization_resources().into_iter().collect();
    let on_disk: BTreeSet<String> = std::fs::read_dir(repo("deploy/k8s"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f.ends_with(".yaml") && f != "kustomization.yaml")
        .collect();
    assert_eq!(listed, on_disk);
    let k = kustomization();
    let generator = &seq(&k["configMapGenerator"])[0];
    assert_eq!(s(&generator["name"]), "portcullis-config");
    assert_eq!(seq(&generator["files"]), &[Value::from("portcullis.toml")]);
    let kinds: BTreeSet<String> =
        manifests().iter().map(|(_, d)| s(&d["kind"]).to_owned()).collect();
    for kind in ["Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"] {
        assert!(kinds.contains(kind), "no {kind}");
    }
}

#[test]
fn deployment_probes_use_grpc_health_for_readiness_and_not_the_store_for_liveness() {
    let c = container();
    let grpc = container_port("grpc");
    assert_eq!(grpc, 50051);
    let listen = k8s_config()["listen"].as_str().unwrap().to_owned();
    assert!(listen.ends_with(&format!(":{grpc}")), "the daemon listens on {listen}");
    assert_eq!(int(&c["readinessProbe"]["grpc"]["port"]), grpc, "readiness is not a gRPC probe");
    // Liveness follows the process (the admin listener's /healthz), never the store.
    let live = &c["livenessProbe"];
    assert!(live.get("grpc").is_none(), "a gRPC liveness probe restarts pods in a Redis outage");
    assert_eq!(s(&live["httpGet"]["path"]), "/healthz");
    assert_eq!(s(&live["httpGet"]["port"]), "admin");
    let admin = container_port("admin");
    let admin_listen = k8s_config()["telemetry"]["admin_listen"].as_str().unwrap().to_owned();
    assert_eq!(admin_listen, format!("0.0.0.0:{admin}"), "probes cannot reach {admin_listen}");
}

#[test]
fn deployment_runs_non_root_read_only_without_privileges() {
    let d = one("Deployment");
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(int(&pod["securityContext"]["runAsUser"]) > 0);
    assert_eq!(s(&pod["securityContext"]["seccompProfile"]["type"]), "RuntimeDefault");
    assert_eq!(pod["automountServiceAccountToken"], false);
    let c = container();
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(seq(&sc["capabilities"]["drop"]), &[Value::from("ALL")]);
    for r in ["cpu", "memory"] {
        assert!(c["resources"]["requests"].get(r).is_some(), "no {r} request");
    }
    assert!(c["resources"]["limits"].get("memory").is_some(), "no memory limit");
    // Hashing is bounded by verify.max_concurrent, set to half the CPU request.
    let cpu: f64 = s(&c["resources"]["requests"]["cpu"]).parse().unwrap();
    let max_concurrent = k8s_config()["verify"]["max_concurrent"].as_integer().unwrap();
    assert_eq!(max_concurrent as f64, (cpu / 2.0).max(1.0));
}

#[test]
fn deployment_reads_the_secrets_the_config_names() {
    let d = one("Deployment");
    let pod = &d["spec"]["template"]["spec"];
    let c = container();
    let config = k8s_config();

    // The Redis URL (with its ACL credentials) from a Secret, never the ConfigMap.
    let redis_env = seq(&c["env"]).iter().find(|e| e["name"] == "PORTCULLIS_REDIS_URL").cloned();
    let redis_ref =
        &redis_env.expect("PORTCULLIS_REDIS_URL is not set")["valueFrom"]["secretKeyRef"];
    assert_eq!(s(&redis_ref["name"]), "portcullis-redis");
    assert_eq!(s(&redis_ref["key"]), "url");
    let placeholder = config["store"]["redis_url"].as_str().unwrap();
    assert!(!placeholder.contains('@'), "credentials in the ConfigMap");

    // The key secret: a Secret volume, mounted where store.key_secret_file points.
    let volumes = seq(&pod["volumes"]);
    let key_volume = volumes
        .iter()
        .find(|v| v["secret"]["secretName"] == "portcullis-key-secret")
        .expect("no volume from the portcullis-key-secret Secret");
    let mount = seq(&c["volumeMounts"])
        .iter()
        .find(|m| m["name"] == key_volume["name"])
        .expect("the key secret volume is not mounted");
    assert_eq!(mount["readOnly"], true);
    let item = &seq(&key_volume["secret"]["items"])[0];
    let mounted = format!("{}/{}", s(&mount["mountPath"]), s(&item["path"]));
    assert_eq!(config["store"]["key_secret_file"].as_str(), Some(mounted.as_str()));
    let mode = int(&key_volume["secret"]["defaultMode"]);
    assert_eq!(mode, 0o440, "the key secret's mode is {mode:o}, not 0440");

    // The configuration: the generated ConfigMap, at the path the daemon is given.
    let config_volume = volumes
        .iter()
        .find(|v| v["configMap"]["name"] == "portcullis-config")
        .expect("no volume from the portcullis-config ConfigMap");
    let config_mount = seq(&c["volumeMounts"])
        .iter()
        .find(|m| m["name"] == config_volume["name"])
        .expect("the configuration is not mounted");
    let args: Vec<&str> = seq(&c["args"]).iter().map(s).collect();
    assert_eq!(args, ["serve", "--config", s(&config_mount["mountPath"])]);
}

#[test]
fn termination_grace_covers_shutdown_delay_and_the_drain() {
    let d = one("Deployment");
    let grace = int(&d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]);
    let delay = k8s_config()["shutdown_delay"].as_str().map(humantime::parse_duration);
    let delay = delay.expect("shutdown_delay is not set").unwrap();
    let needed = delay + portcullis::SHUTDOWN_GRACE;
    assert!(
        Duration::from_secs(grace as u64) > needed,
        "terminationGracePeriodSeconds {grace} s does not cover {needed:?}"
    );
    // Rolling updates add a ready pod before draining one.
    assert_eq!(int(&d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"]), 0);
}

#[test]
fn services_have_named_ports_and_select_the_pods() {
    let services = all("Service");
    assert!(!services.is_empty());
    for svc in &services {
        selects_pods(&svc["spec"]["selector"]);
        for p in seq(&svc["spec"]["ports"]) {
            let name = s(&p["name"]);
            assert_eq!(s(&p["targetPort"]), name, "port {name} targets by number");
            assert_eq!(int(&p["port"]), container_port(name));
        }
    }
    let main = services.iter().find(|s| s["metadata"]["name"] == "portcullis").unwrap();
    let names: BTreeSet<&str> = seq(&main["spec"]["ports"]).iter().map(|p| s(&p["name"])).collect();
    assert_eq!(names, BTreeSet::from(["grpc", "admin"]));
}

#[test]
fn disruption_budget_keeps_daemons_up() {
    let pdb = one("PodDisruptionBudget");
    selects_pods(&pdb["spec"]["selector"]);
    let replicas = int(&one("Deployment")["spec"]["replicas"]);
    let max_unavailable = int(&pdb["spec"]["maxUnavailable"]);
    assert!(max_unavailable >= 1 && max_unavailable < replicas);
}

#[test]
fn network_policy_admits_only_gateways_to_grpc_and_monitoring_to_admin() {
    let np = one("NetworkPolicy");
    selects_pods(&np["spec"]["podSelector"]);
    assert!(seq(&np["spec"]["policyTypes"]).contains(&Value::from("Ingress")));
    let rules = seq(&np["spec"]["ingress"]);
    assert_eq!(rules.len(), 2);
    for rule in rules {
        // A rule without `from` or without `ports` admits every source or every port.
        assert!(!seq(&rule["from"]).is_empty() && !seq(&rule["ports"]).is_empty());
        assert_eq!(seq(&rule["ports"]).len(), 1);
    }
    let rule_for = |port: &str| {
        rules
            .iter()
            .find(|r| seq(&r["ports"])[0]["port"] == port)
            .unwrap_or_else(|| panic!("{port}"))
    };
    for peer in seq(&rule_for("grpc")["from"]) {
        assert_eq!(s(&peer["podSelector"]["matchLabels"]["portcullis.io/gateway"]), "true");
        assert!(peer.get("ipBlock").is_none());
    }
    for peer in seq(&rule_for("admin")["from"]) {
        let ns = &peer["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"];
        assert_eq!(s(ns), "monitoring");
    }
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
