//! The production overlay's store and certificates: Redis with Sentinel that survives the
//! loss of one pod, a server certificate for every name the daemon is dialled by, one
//! client certificate per caller with the names it lists, and an issuance policy that
//! admits each of those names only in the namespace that owns it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_yaml_ng::Value;

use super::{NAMESPACE, PRODUCTION, int, name, rendered, s, seq, strings};

/// The setting `sentinel NAME …` that sentinel.sh writes (`echo "sentinel NAME …"`), its
/// words after the name.
fn sentinel_setting(script: &str, setting: &str) -> Vec<String> {
    let prefix = format!("echo \"sentinel {setting} ");
    let line = script.lines().map(str::trim).find(|l| l.starts_with(&prefix));
    let line = line.unwrap_or_else(|| panic!("sentinel.sh sets no sentinel {setting}"));
    line[prefix.len()..].trim_end_matches('"').split_whitespace().map(str::to_owned).collect()
}

#[test]
fn production_redis_with_sentinel_survives_the_loss_of_one_pod() {
    let Some(r) = rendered(PRODUCTION) else { return };
    let config = r.config();
    let store = config["store"].as_table().unwrap();
    let (redis, sentinel) = (r.named("StatefulSet", "redis"), r.named("StatefulSet", "sentinel"));
    let (redis_pods, sentinels) =
        (int(&redis["spec"]["replicas"]), int(&sentinel["spec"]["replicas"]));
    assert_eq!((redis_pods, sentinels), (3, 3), "one master, two replicas; three Sentinels");
    // After one loss (a failover) a replica is still there to confirm each count:
    // wait_replicas is at most the replicas less one.
    let wait_replicas = store["wait_replicas"].as_integer().unwrap();
    let replicas = redis_pods - 1;
    let survivable = replicas - 1;
    assert!(
        (1..=survivable).contains(&wait_replicas),
        "wait_replicas {wait_replicas} with {replicas} replicas"
    );
    assert_eq!(store["wait_timeout"].as_str(), Some("100ms"));
    for w in [redis, sentinel] {
        let c = &seq(&w["spec"]["template"]["spec"]["containers"])[0];
        assert_eq!(s(&c["image"]), "docker.io/library/redis:7.4", "{}", name(w));
    }

    let scripts =
        r.all("ConfigMap").into_iter().find(|m| name(m).starts_with("redis-scripts")).unwrap();
    let redis_sh = s(&scripts["data"]["redis.sh"]);
    for line in [
        "appendonly yes",
        "maxmemory-policy noeviction",
        "requirepass $REDIS_PASSWORD",
        "masterauth $REDIS_PASSWORD",
        "replica-announce-ip $self",
        "repl-diskless-sync-delay 0",
    ] {
        assert!(redis_sh.contains(&format!("echo \"{line}\"")), "redis.sh does not set {line}");
    }
    let sentinel_sh = s(&scripts["data"]["sentinel.sh"]);
    let master_name = store["redis_sentinel"]["master_name"].as_str().unwrap();
    let monitor = sentinel_setting(sentinel_sh, "monitor");
    assert_eq!(monitor[0], master_name, "the Sentinels monitor another master");
    let quorum: i64 = monitor.last().unwrap().parse().unwrap();
    // A majority, and still reached with one Sentinel lost.
    let survivable = sentinels - 1;
    assert!(quorum > sentinels / 2 && quorum <= survivable, "quorum {quorum} of {sentinels}");
    assert_eq!(sentinel_setting(sentinel_sh, "down-after-milliseconds"), [master_name, "5000"]);
    assert_eq!(sentinel_setting(sentinel_sh, "failover-timeout")[0], master_name);
    for setting in ["auth-pass", "sentinel-pass", "announce-hostnames", "resolve-hostnames"] {
        sentinel_setting(sentinel_sh, setting);
    }

    // The daemons ask every Sentinel, each by its stable name in the headless Service.
    let service = r.named("Service", s(&sentinel["spec"]["serviceName"]));
    assert_eq!(s(&service["spec"]["clusterIP"]), "None");
    assert_eq!(service["spec"]["publishNotReadyAddresses"], true);
    let nodes: Vec<&str> = store["redis_sentinel"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let wanted: Vec<String> = (0..sentinels)
        .map(|i| {
            format!(
                "redis://{}-{i}.{}.{NAMESPACE}.svc.cluster.local:26379",
                name(sentinel),
                name(service)
            )
        })
        .collect();
    assert_eq!(nodes, wanted);
    assert!(nodes.iter().all(|n| !n.contains('@')), "credentials in the ConfigMap");

    // The same Sentinels, with the password of the portcullis-redis Secret, in the
    // environment: the variable it expands is defined before it.
    let env = r.env();
    let position = |var: &str| {
        env.iter().position(|e| e["name"] == var).unwrap_or_else(|| panic!("{var} unset"))
    };
    let password = position("PORTCULLIS_REDIS_PASSWORD");
    let secret = &env[password]["valueFrom"]["secretKeyRef"];
    assert_eq!((s(&secret["name"]), s(&secret["key"])), ("portcullis-redis", "password"));
    let from_env = s(&env[position("PORTCULLIS_REDIS_SENTINEL_NODES")]["value"]);
    assert!(position("PORTCULLIS_REDIS_SENTINEL_NODES") > password);
    let stripped: Vec<String> =
        from_env.split(',').map(|n| n.replace(":$(PORTCULLIS_REDIS_PASSWORD)@", "")).collect();
    assert_eq!(stripped, wanted, "PORTCULLIS_REDIS_SENTINEL_NODES names other Sentinels");
    assert_eq!(s(&env[position("PORTCULLIS_REDIS_SENTINEL_MASTER_NAME")]["value"]), master_name);
    // Every Redis and Sentinel pod reads its password from the same Secret.
    for w in [redis, sentinel] {
        let c = &seq(&w["spec"]["template"]["spec"]["containers"])[0];
        let var = seq(&c["env"]).iter().find(|e| e["name"] == "REDIS_PASSWORD").unwrap();
        assert_eq!(s(&var["valueFrom"]["secretKeyRef"]["name"]), "portcullis-redis");
    }
}

fn duration(v: &Value) -> Duration {
    humantime::parse_duration(s(v)).unwrap_or_else(|e| panic!("{v:?}: {e}"))
}

/// A leaf Certificate on portcullis-ca: ECDSA P-256, a new key each renewal, renewed well
/// before it expires, for `usage` and not the other side's.
fn assert_leaf(cert: &Value, usage: &str, not: &str) {
    let spec = &cert["spec"];
    let what = name(cert);
    assert_eq!(s(&spec["privateKey"]["algorithm"]), "ECDSA", "{what}");
    assert_eq!(int(&spec["privateKey"]["size"]), 256, "{what}");
    assert_eq!(s(&spec["privateKey"]["rotationPolicy"]), "Always", "{what}");
    let usages = strings(&spec["usages"]);
    assert!(usages.contains(&usage) && usages.contains(&"digital signature"), "{what}: {usages:?}");
    assert!(!usages.contains(&not), "{what}: {usages:?}");
    assert!(duration(&spec["renewBefore"]) < duration(&spec["duration"]), "{what}");
    assert_eq!(s(&spec["issuerRef"]["kind"]), "ClusterIssuer", "{what}");
    assert!(spec.get("isCA").is_none(), "{what}");
}

#[test]
fn production_certificates_come_from_one_ca_and_carry_the_callers_names() {
    let Some(r) = rendered(PRODUCTION) else { return };
    let config = r.config();
    // The CA: bootstrapped by a self-signed issuer of cert-manager's namespace, kept
    // where the ClusterIssuer reads it, its key kept across renewals.
    let secret = s(&r.named("ClusterIssuer", "portcullis-ca")["spec"]["ca"]["secretName"]);
    let ca = r.all("Certificate").into_iter().find(|c| c["spec"]["secretName"] == secret).unwrap();
    assert_eq!(ca["spec"]["isCA"], true);
    assert_eq!(s(&ca["metadata"]["namespace"]), "cert-manager");
    assert_eq!(s(&ca["spec"]["privateKey"]["rotationPolicy"]), "Never");
    let bootstrap =
        r.named(s(&ca["spec"]["issuerRef"]["kind"]), s(&ca["spec"]["issuerRef"]["name"]));
    assert!(bootstrap["spec"].get("selfSigned").is_some());

    // The server certificate: the Secret the daemon mounts, naming every Service it is
    // dialled by.
    let tls_dir = config["tls"]["cert_file"].as_str().unwrap();
    let mount = r.mount_holding(tls_dir).unwrap();
    let server_secret = s(&r.volume(s(&mount["name"]))["secret"]["secretName"]);
    let server = r.ca_certificates().into_iter().find(|c| c["spec"]["secretName"] == server_secret);
    let server = server.expect("the mounted TLS Secret is no Certificate of portcullis-ca");
    assert_eq!(s(&server["metadata"]["namespace"]), NAMESPACE);
    assert_leaf(server, "server auth", "client auth");
    let dns: BTreeSet<&str> = strings(&server["spec"]["dnsNames"]).into_iter().collect();
    for svc in r
        .all("Service")
        .into_iter()
        .filter(|v| seq(&v["spec"]["ports"]).iter().any(|p| p["name"] == "grpc"))
    {
        for n in [
            name(svc).to_owned(),
            format!("{}.{NAMESPACE}.svc", name(svc)),
            format!("{}.{NAMESPACE}.svc.cluster.local", name(svc)),
        ] {
            assert!(dns.contains(n.as_str()), "the server certificate lacks {n}");
        }
    }

    // One client certificate per caller, with the names the caller lists: the gateways'
    // in a gateway namespace, the operators' in the daemon's.
    let gateway_namespaces = r.gateway_namespaces();
    for (caller, table) in config["callers"].as_table().unwrap() {
        let names: Vec<&str> =
            table["san_dns"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
        let cert =
            r.ca_certificates().into_iter().find(|c| strings(&c["spec"]["dnsNames"]) == names);
        let cert = cert.unwrap_or_else(|| panic!("no Certificate for callers.{caller}"));
        assert_leaf(cert, "client auth", "server auth");
        let namespace = s(&cert["metadata"]["namespace"]);
        match caller.as_str() {
            "gateways" => assert!(gateway_namespaces.contains(namespace), "{namespace}"),
            _ => assert_eq!(namespace, NAMESPACE, "callers.{caller}"),
        }
    }
}

#[test]
fn production_issuance_policy_admits_each_name_only_where_it_belongs() {
    let Some(r) = rendered(PRODUCTION) else { return };
    let policy = r.named("ValidatingAdmissionPolicy", "portcullis-ca-issuance");
    let binding = r.named("ValidatingAdmissionPolicyBinding", "portcullis-ca-issuance");
    assert_eq!(s(&binding["spec"]["policyName"]), name(policy));
    assert_eq!(strings(&binding["spec"]["validationActions"]), ["Deny"]);
    assert_eq!(s(&policy["spec"]["failurePolicy"]), "Fail");
    let rules = seq(&policy["spec"]["matchConstraints"]["resourceRules"]);
    let resources: BTreeSet<&str> = rules.iter().flat_map(|r| strings(&r["resources"])).collect();
    assert_eq!(resources, BTreeSet::from(["certificates", "certificaterequests"]));
    let variable = |wanted: &str| {
        let v = seq(&policy["spec"]["variables"]).iter().find(|v| v["name"] == wanted);
        s(&v.unwrap_or_else(|| panic!("no variable {wanted}"))["expression"]).to_owned()
    };
    // The CEL map literal, which is JSON once its quotes are.
    let allowed: BTreeMap<String, BTreeSet<String>> =
        serde_json::from_str(&variable("allowed").replace('\'', "\""))
            .expect("`allowed` is a map of namespace to names");
    let mut namespaces = r.gateway_namespaces();
    namespaces.insert(NAMESPACE.to_owned());
    assert_eq!(
        allowed.keys().cloned().collect::<BTreeSet<_>>(),
        namespaces,
        "the NetworkPolicy's and the policy's namespaces differ"
    );
    // A gateway namespace may obtain the gateways' names and nothing else.
    let config = r.config();
    let gateway_names: BTreeSet<String> = config["callers"]["gateways"]["san_dns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_owned())
        .collect();
    for (namespace, names) in &allowed {
        if namespace != NAMESPACE {
            assert!(names.is_subset(&gateway_names), "{namespace} may obtain {names:?}");
        }
    }
    // Every Certificate shipped is one the policy admits.
    for cert in r.ca_certificates() {
        let namespace = s(&cert["metadata"]["namespace"]);
        let mut names: Vec<&str> = strings(&cert["spec"]["dnsNames"]);
        names.extend(cert["spec"].get("commonName").map(s));
        let admitted = allowed.get(namespace).is_some_and(|a| names.iter().all(|n| a.contains(*n)));
        assert!(admitted, "the policy refuses Certificate {} ({namespace}: {names:?})", name(cert));
    }
    let validations: String =
        seq(&policy["spec"]["validations"]).iter().map(|v| s(&v["expression"])).collect();
    assert!(validations.contains(
        "request.userInfo.username == 'system:serviceaccount:cert-manager:cert-manager'"
    ));
}
