//! deploy/k8s as kustomize renders it (`kubectl kustomize DIR`, or `kustomize build DIR`):
//! the production overlay passes the security review as shipped (mutual TLS only, a caller
//! table that keeps the Admin service from the gateways, a NetworkPolicy that names the
//! gateway namespaces and the gateway label, the server certificate mounted whole), its
//! cert-manager resources issue what the callers list and only where it belongs, and its
//! Redis with Sentinel survives the loss of one pod; both overlays keep what an operator
//! relies on (probes that never follow the store for liveness, non-root read-only pods,
//! named ports, the Secrets the configuration reads, disruption budgets). The rendered
//! ConfigMap's configuration passes `portcullis check-config`. Without kubectl or
//! kustomize these tests say so and pass, unless PORTCULLIS_REQUIRE_KUSTOMIZE=1.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde::Deserialize;
use serde_yaml_ng::Value;

use super::{assert_valid_text, int, read, repo, s, seq};

mod production;
mod review;

use review::network_policy_findings;

const PRODUCTION: &str = "deploy/k8s/overlays/production";
const DEVELOPMENT: &str = "deploy/k8s/overlays/development";
const OVERLAYS: [&str; 2] = [PRODUCTION, DEVELOPMENT];

/// The RPCs of `portcullis.v1.Admin`, from the one RPC table: for operators only.
fn admin_rpcs() -> Vec<&'static str> {
    use portcullis_client::rpcs::{Rpc, Service};
    Rpc::ALL.iter().filter(|r| r.service() == Service::Admin).map(|r| r.method()).collect()
}

/// The rendered kinds that have no namespace.
const CLUSTER_SCOPED: [&str; 4] =
    ["Namespace", "ClusterIssuer", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"];

/// The daemon's namespace.
const NAMESPACE: &str = "portcullis";

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
}

/// `kubectl kustomize`, else `kustomize build`; `None` when neither is installed.
fn renderer() -> Option<Command> {
    let (program, subcommand) = if on_path("kubectl") {
        ("kubectl", "kustomize")
    } else if on_path("kustomize") {
        ("kustomize", "build")
    } else {
        return None;
    };
    let mut command = Command::new(program);
    command.arg(subcommand);
    Some(command)
}

/// Every document of a multi-document YAML text, empty ones left out.
fn documents(origin: &str, text: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{origin}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// An overlay as kustomize renders it.
#[derive(Clone)]
struct Rendered {
    docs: Vec<Value>,
}

fn render(dir: &str) -> Option<Rendered> {
    let Some(mut command) = renderer() else {
        let required = std::env::var("PORTCULLIS_REQUIRE_KUSTOMIZE").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "PORTCULLIS_REQUIRE_KUSTOMIZE=1, and neither kubectl nor kustomize is on PATH"
        );
        println!(
            "SKIPPED: neither kubectl nor kustomize is on PATH, so {dir} is not rendered \
             (PORTCULLIS_REQUIRE_KUSTOMIZE=1 makes this a failure)"
        );
        return None;
    };
    let out = command.arg(repo(dir)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{command:?} failed: {stderr}");
    Some(Rendered { docs: documents(dir, &String::from_utf8(out.stdout).unwrap()) })
}

/// The overlay `dir` rendered once per test run; `None` when it cannot be (see [`render`]).
fn rendered(dir: &str) -> Option<&'static Rendered> {
    static PRODUCTION_RENDERED: OnceLock<Option<Rendered>> = OnceLock::new();
    static DEVELOPMENT_RENDERED: OnceLock<Option<Rendered>> = OnceLock::new();
    let cell = match dir {
        PRODUCTION => &PRODUCTION_RENDERED,
        DEVELOPMENT => &DEVELOPMENT_RENDERED,
        other => panic!("no overlay {other}"),
    };
    cell.get_or_init(|| render(dir)).as_ref()
}

fn name(v: &Value) -> &str {
    s(&v["metadata"]["name"])
}

fn strings(v: &Value) -> Vec<&str> {
    v.as_sequence().map(|l| l.iter().map(s).collect()).unwrap_or_default()
}

impl Rendered {
    fn all(&self, kind: &str) -> Vec<&Value> {
        self.docs.iter().filter(|d| d["kind"] == kind).collect()
    }

    fn named(&self, kind: &str, wanted: &str) -> &Value {
        let found: Vec<&Value> = self.all(kind).into_iter().filter(|d| name(d) == wanted).collect();
        assert_eq!(found.len(), 1, "expected one {kind} {wanted}");
        found[0]
    }

    fn named_mut(&mut self, kind: &str, wanted: &str) -> &mut Value {
        self.docs.iter_mut().find(|d| d["kind"] == kind && name(d) == wanted).unwrap()
    }

    fn deployment(&self) -> &Value {
        self.named("Deployment", "portcullis")
    }

    fn pod(&self) -> &Value {
        &self.deployment()["spec"]["template"]["spec"]
    }

    fn container(&self) -> &Value {
        let containers = seq(&self.pod()["containers"]);
        assert_eq!(containers.len(), 1);
        &containers[0]
    }

    fn container_port(&self, port: &str) -> i64 {
        let found = seq(&self.container()["ports"]).iter().find(|p| p["name"] == port);
        int(&found.unwrap_or_else(|| panic!("no container port named {port}"))["containerPort"])
    }

    fn volume(&self, volume: &str) -> &Value {
        let found = seq(&self.pod()["volumes"]).iter().find(|v| v["name"] == volume);
        found.unwrap_or_else(|| panic!("no volume {volume}"))
    }

    /// The container's mount whose directory holds `path`.
    fn mount_holding(&self, path: &str) -> Option<&Value> {
        seq(&self.container()["volumeMounts"]).iter().find(|m| {
            let dir = format!("{}/", s(&m["mountPath"]).trim_end_matches('/'));
            path.starts_with(&dir)
        })
    }

    /// The daemon's portcullis.toml, from the ConfigMap its `config` volume mounts.
    fn config_text(&self) -> String {
        let map = s(&self.volume("config")["configMap"]["name"]);
        s(&self.named("ConfigMap", map)["data"]["portcullis.toml"]).to_owned()
    }

    fn config(&self) -> toml::Table {
        self.config_text().parse().expect("the rendered portcullis.toml is not TOML")
    }

    /// The value of the daemon's environment variable `var`, in order of definition.
    fn env(&self) -> Vec<&Value> {
        self.container()["env"].as_sequence().map(|e| e.iter().collect()).unwrap_or_default()
    }

    /// The Certificates issued by the portcullis-ca ClusterIssuer.
    fn ca_certificates(&self) -> Vec<&Value> {
        self.all("Certificate")
            .into_iter()
            .filter(|c| c["spec"]["issuerRef"]["name"] == "portcullis-ca")
            .collect()
    }

    /// The namespaces the daemon's NetworkPolicy admits gateways from.
    fn gateway_namespaces(&self) -> BTreeSet<String> {
        let np = self.named("NetworkPolicy", "portcullis");
        let mut found = BTreeSet::new();
        for rule in seq(&np["spec"]["ingress"]) {
            if !seq(&rule["ports"]).iter().any(|p| p["port"] == "grpc") {
                continue;
            }
            for peer in seq(&rule["from"]) {
                found.extend(named_namespaces(&peer["namespaceSelector"]).unwrap_or_default());
            }
        }
        found
    }
}

/// The namespaces a namespaceSelector names by `kubernetes.io/metadata.name`; `None` when
/// it selects otherwise (or everything).
fn named_namespaces(selector: &Value) -> Option<BTreeSet<String>> {
    const KEY: &str = "kubernetes.io/metadata.name";
    let mut names = BTreeSet::new();
    if let Some(label) = selector["matchLabels"].get(KEY) {
        names.insert(s(label).to_owned());
    }
    for e in selector["matchExpressions"].as_sequence().into_iter().flatten() {
        if e["key"] != KEY || e["operator"] != "In" {
            return None;
        }
        names.extend(strings(&e["values"]).into_iter().map(str::to_owned));
    }
    let others = selector["matchLabels"].as_mapping().is_some_and(|m| m.len() > 1);
    (!names.is_empty() && !others).then_some(names)
}

#[test]
fn the_rendered_configurations_pass_check_config() {
    for dir in OVERLAYS {
        let Some(r) = rendered(dir) else { return };
        assert_valid_text(&format!("{dir} (rendered ConfigMap)"), &r.config_text());
        // The ConfigMap carries the overlay's file as it is.
        assert_eq!(r.config_text(), read(&format!("{dir}/portcullis.toml")), "{dir}");
    }
    let production = rendered(PRODUCTION).unwrap().config();
    assert!(production.get("allow_plaintext").is_none(), "allow_plaintext in {PRODUCTION}");
    let development = read(&format!("{DEVELOPMENT}/portcullis.toml"));
    assert!(development.starts_with("# DEVELOPMENT ONLY: never for real users."));
}

/// The development overlay's plaintext is reached only through the base's NetworkPolicy,
/// and it brings no cert-manager resource a development cluster may not have.
#[test]
fn the_development_overlay_is_plaintext_behind_the_network_policy() {
    let Some(r) = rendered(DEVELOPMENT) else { return };
    let findings = network_policy_findings(r);
    assert!(findings.is_empty(), "{DEVELOPMENT}:\n{}", findings.join("\n"));
    assert_eq!(r.config()["allow_plaintext"].as_bool(), Some(true));
    assert!(r.config().get("callers").is_none());
    for doc in &r.docs {
        assert!(!s(&doc["apiVersion"]).starts_with("cert-manager.io/"), "{doc:?}");
        assert_eq!(doc["metadata"].get("namespace").map(s).unwrap_or(NAMESPACE), NAMESPACE);
    }
}

#[test]
fn every_object_is_in_a_named_namespace() {
    let Some(r) = rendered(PRODUCTION) else { return };
    let mut allowed = r.gateway_namespaces();
    allowed.extend([NAMESPACE.to_owned(), "cert-manager".to_owned()]);
    for doc in &r.docs {
        let kind = s(&doc["kind"]);
        let namespace = doc["metadata"].get("namespace").map(s);
        if CLUSTER_SCOPED.contains(&kind) {
            assert!(namespace.is_none(), "{kind} {} has a namespace", name(doc));
            continue;
        }
        let namespace =
            namespace.unwrap_or_else(|| panic!("{kind} {} has no namespace", name(doc)));
        assert!(allowed.contains(namespace), "{kind} {} in {namespace}", name(doc));
    }
}

/// Every file of base/ and of each overlay is used by its kustomization: a manifest
/// left out of `resources` would be reviewed and never applied.
#[test]
fn kustomizations_use_every_file_beside_them() {
    for dir in ["deploy/k8s/base", PRODUCTION, DEVELOPMENT] {
        let k: Value =
            serde_yaml_ng::from_str(&read(&format!("{dir}/kustomization.yaml"))).unwrap();
        let mut used: BTreeSet<String> = strings(&k["resources"])
            .into_iter()
            .filter(|r| !r.starts_with(".."))
            .map(str::to_owned)
            .collect();
        for patch in k["patches"].as_sequence().into_iter().flatten() {
            used.insert(s(&patch["path"]).to_owned());
        }
        for generator in k["configMapGenerator"].as_sequence().into_iter().flatten() {
            used.extend(strings(&generator["files"]).into_iter().map(str::to_owned));
        }
        let mut on_disk = BTreeSet::new();
        for entry in walk(&repo(dir)) {
            let relative = entry.strip_prefix(repo(dir)).unwrap().to_string_lossy().into_owned();
            if relative != "kustomization.yaml" {
                on_disk.insert(relative);
            }
        }
        assert_eq!(used, on_disk, "{dir}: files its kustomization does not use, or lacks");
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn probes_follow_readyz_for_readiness_and_not_the_store_for_liveness() {
    for dir in OVERLAYS {
        let Some(r) = rendered(dir) else { return };
        let c = r.container();
        let grpc = r.container_port("grpc");
        assert_eq!(grpc, 50051);
        let listen = r.config()["listen"].as_str().unwrap().to_owned();
        assert!(listen.ends_with(&format!(":{grpc}")), "{dir}: the daemon listens on {listen}");
        // Readiness follows the store (/readyz); liveness the process (/healthz), never the
        // store: restarting every pod in a Redis outage would not bring Redis back.
        for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
            assert_eq!(s(&c[probe]["httpGet"]["path"]), path, "{dir}: {probe}");
            assert_eq!(s(&c[probe]["httpGet"]["port"]), "admin", "{dir}: {probe}");
        }
        let admin = r.container_port("admin");
        let admin_listen = r.config()["telemetry"]["admin_listen"].as_str().unwrap().to_owned();
        assert_eq!(
            admin_listen,
            format!("0.0.0.0:{admin}"),
            "{dir}: probes cannot reach {admin_listen}"
        );
    }
}

#[test]
fn every_pod_runs_restricted() {
    for dir in OVERLAYS {
        let Some(r) = rendered(dir) else { return };
        let namespace = r.named("Namespace", NAMESPACE);
        assert_eq!(
            s(&namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]),
            "restricted"
        );
        let workloads: Vec<&Value> =
            r.all("Deployment").into_iter().chain(r.all("StatefulSet")).collect();
        assert!(workloads.len() >= 2, "{dir}: no store");
        for w in workloads {
            let what = format!("{dir}: {} {}", s(&w["kind"]), name(w));
            let pod = &w["spec"]["template"]["spec"];
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{what}");
            assert!(int(&pod["securityContext"]["runAsUser"]) > 0, "{what}");
            assert_eq!(
                s(&pod["securityContext"]["seccompProfile"]["type"]),
                "RuntimeDefault",
                "{what}"
            );
            assert_eq!(pod["automountServiceAccountToken"], false, "{what}");
            for c in seq(&pod["containers"]) {
                let sc = &c["securityContext"];
                assert_eq!(sc["readOnlyRootFilesystem"], true, "{what}");
                assert_eq!(sc["allowPrivilegeEscalation"], false, "{what}");
                assert_eq!(seq(&sc["capabilities"]["drop"]), &[Value::from("ALL")], "{what}");
                assert!(
                    c["resources"]["limits"].get("memory").is_some(),
                    "{what}: no memory limit"
                );
                assert!(c["resources"]["requests"].get("cpu").is_some(), "{what}: no cpu request");
            }
        }
        // Hashing is bounded by verify.max_concurrent, set to half the CPU request.
        let cpu: f64 = s(&r.container()["resources"]["requests"]["cpu"]).parse().unwrap();
        let max_concurrent = r.config()["verify"]["max_concurrent"].as_integer().unwrap();
        assert_eq!(max_concurrent as f64, (cpu / 2.0).max(1.0), "{dir}");
    }
}

#[test]
fn the_daemon_reads_the_key_secret_the_config_names() {
    for dir in OVERLAYS {
        let Some(r) = rendered(dir) else { return };
        let c = r.container();
        let key_volume = seq(&r.pod()["volumes"])
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
        assert_eq!(
            r.config()["store"]["key_secret_file"].as_str(),
            Some(mounted.as_str()),
            "{dir}"
        );
        let mode = int(&key_volume["secret"]["defaultMode"]);
        assert_eq!(mode, 0o440, "{dir}: the key secret's mode is {mode:o}, not 0440");
        // The configuration: the generated ConfigMap, at the path the daemon is given.
        let config_mount = seq(&c["volumeMounts"]).iter().find(|m| m["name"] == "config").unwrap();
        let args: Vec<&str> = seq(&c["args"]).iter().map(s).collect();
        assert_eq!(args, ["serve", "--config", s(&config_mount["mountPath"])], "{dir}");
    }
}

#[test]
fn termination_grace_covers_shutdown_delay_and_the_drain() {
    for dir in OVERLAYS {
        let Some(r) = rendered(dir) else { return };
        let d = r.deployment();
        let grace = int(&d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]);
        let delay = r.config()["shutdown_delay"].as_str().map(humantime::parse_duration);
        let needed =
            delay.expect("shutdown_delay is not set").unwrap() + portcullis::SHUTDOWN_GRACE;
        assert!(Duration::from_secs(grace as u64) > needed, "{dir}: {grace} s < {needed:?}");
        // Rolling updates add a ready pod before draining one.
        assert_eq!(int(&d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"]), 0);
    }
}

/// The pod template of the workload whose pods `selector` (a Service's label map, or a
/// label selector's matchLabels) selects; panics unless exactly one does.
fn selected_pods<'a>(r: &'a Rendered, selector: &Value) -> &'a Value {
    let selector = selector.get("matchLabels").unwrap_or(selector);
    assert!(selector.get("matchExpressions").is_none(), "selector not understood");
    let selector = selector.as_mapping().expect("a selector");
    assert!(!selector.is_empty(), "an empty selector matches everything");
    let matching: Vec<&Value> = r
        .all("Deployment")
        .into_iter()
        .chain(r.all("StatefulSet"))
        .filter(|w| {
            let labels = &w["spec"]["template"]["metadata"]["labels"];
            selector.iter().all(|(k, v)| &labels[s(k)] == v)
        })
        .collect();
    assert_eq!(matching.len(), 1, "{selector:?} selects {} workloads", matching.len());
    &matching[0]["spec"]["template"]
}

#[test]
fn services_have_named_ports_and_select_their_pods() {
    for dir in OVERLAYS {
        let Some(r) = rendered(dir) else { return };
        for svc in r.all("Service") {
            let pods = selected_pods(r, &svc["spec"]["selector"]);
            for p in seq(&svc["spec"]["ports"]) {
                let port = s(&p["name"]);
                assert_eq!(s(&p["targetPort"]), port, "{dir}: port {port} targets by number");
                let container_port = seq(&pods["spec"]["containers"])
                    .iter()
                    .flat_map(|c| seq(&c["ports"]))
                    .find(|cp| cp["name"] == port)
                    .unwrap_or_else(|| panic!("{dir}: {} has no pod port {port}", name(svc)));
                assert_eq!(int(&p["port"]), int(&container_port["containerPort"]), "{dir}");
            }
        }
        let main = r.named("Service", "portcullis");
        let names: BTreeSet<&str> =
            seq(&main["spec"]["ports"]).iter().map(|p| s(&p["name"])).collect();
        assert_eq!(names, BTreeSet::from(["grpc", "admin"]));
    }
}

#[test]
fn disruption_budgets_keep_every_replicated_workload_up() {
    let Some(r) = rendered(PRODUCTION) else { return };
    let pdbs = r.all("PodDisruptionBudget");
    for w in r.all("Deployment").into_iter().chain(r.all("StatefulSet")) {
        let replicas = int(&w["spec"]["replicas"]);
        let template = &w["spec"]["template"];
        let pdb = pdbs
            .iter()
            .find(|p| std::ptr::eq(selected_pods(r, &p["spec"]["selector"]), template))
            .unwrap_or_else(|| panic!("no PodDisruptionBudget for {}", name(w)));
        let max_unavailable = int(&pdb["spec"]["maxUnavailable"]);
        assert!(max_unavailable >= 1 && max_unavailable < replicas, "{}", name(w));
    }
}

#[test]
fn network_policies_admit_monitoring_to_the_admin_port_only() {
    for dir in OVERLAYS {
        let Some(r) = rendered(dir) else { return };
        let np = r.named("NetworkPolicy", "portcullis");
        selected_pods(r, &np["spec"]["podSelector"]);
        let rules = seq(&np["spec"]["ingress"]);
        assert_eq!(rules.len(), 2, "{dir}");
        let admin = rules.iter().find(|r| seq(&r["ports"])[0]["port"] == "admin").unwrap();
        assert_eq!(seq(&admin["ports"]).len(), 1);
        for peer in seq(&admin["from"]) {
            assert_eq!(
                named_namespaces(&peer["namespaceSelector"]),
                Some(BTreeSet::from(["monitoring".to_owned()]))
            );
        }
        assert!(r.gateway_namespaces().contains("login"), "{dir}: the example namespace");
        // The store is reached by the daemon's own namespace's pods only.
        for np in r.all("NetworkPolicy").into_iter().filter(|n| name(n) != "portcullis") {
            selected_pods(r, &np["spec"]["podSelector"]);
            for rule in seq(&np["spec"]["ingress"]) {
                assert!(!seq(&rule["ports"]).is_empty(), "{dir}: {} admits every port", name(np));
                for peer in seq(&rule["from"]) {
                    assert!(
                        peer.get("namespaceSelector").is_none() && peer.get("ipBlock").is_none()
                    );
                    selected_pods(r, &peer["podSelector"]);
                }
            }
        }
    }
}
