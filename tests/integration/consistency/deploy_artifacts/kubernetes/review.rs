//! The security review of the production overlay, as code: what it refuses (plaintext, no
//! mutual TLS, no caller table, the Admin service for anyone but operators, a NetworkPolicy
//! that admits any namespace or any pod, a TLS Secret mounted with subPath), that the
//! overlay passes it, and that it refuses each of those when planted.

use serde_yaml_ng::Value;

use super::{PRODUCTION, Rendered, admin_rpcs, named_namespaces, rendered, s, seq};

/// What a security review of the production overlay refuses, one line per finding.
fn security_findings(r: &Rendered, config: &toml::Table) -> Vec<String> {
    let mut findings = Vec::new();
    if config.get("allow_plaintext").and_then(toml::Value::as_bool) == Some(true) {
        findings.push("allow_plaintext = true: the listener would accept plaintext".to_owned());
    }
    let tls = config.get("tls").and_then(toml::Value::as_table);
    match tls {
        None => findings.push("no [tls]".to_owned()),
        Some(tls) if !tls.contains_key("client_ca_file") => {
            findings.push("[tls] without client_ca_file: no mutual TLS".to_owned());
        }
        Some(_) => {}
    }
    let callers = config.get("callers").and_then(toml::Value::as_table).cloned();
    let callers = callers.unwrap_or_default();
    if callers.is_empty() {
        findings.push("no [callers]: every connection may call everything".to_owned());
    }
    for (caller, table) in &callers {
        let rpcs: Vec<&str> =
            table["rpcs"].as_array().into_iter().flatten().filter_map(|r| r.as_str()).collect();
        let admin: Vec<&&str> = rpcs.iter().filter(|r| admin_rpcs().contains(r)).collect();
        if caller != "operators" && !admin.is_empty() {
            findings.push(format!("callers.{caller} may call the Admin RPCs {admin:?}"));
        }
    }
    match callers.get("gateways") {
        None => findings.push("no callers.gateways".to_owned()),
        Some(g)
            if g["realms"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r.as_str() == Some("*"))) =>
        {
            findings.push("callers.gateways may use every realm".to_owned());
        }
        Some(_) => {}
    }
    findings.extend(network_policy_findings(r));
    // The server certificate's Secret, mounted whole: a subPath mount never sees a renewal.
    if let Some(tls) = tls {
        for key in ["cert_file", "key_file", "client_ca_file"] {
            let Some(path) = tls.get(key).and_then(toml::Value::as_str) else { continue };
            match r.mount_holding(path) {
                None => findings.push(format!("tls.{key} {path} is on no volume")),
                Some(m) if m.get("subPath").is_some() => {
                    findings.push(format!(
                        "tls.{key} is mounted with subPath: renewals never reach it"
                    ));
                }
                Some(m) if r.volume(s(&m["name"]))["secret"]["secretName"].as_str().is_none() => {
                    findings.push(format!("tls.{key} is not from a Secret"));
                }
                Some(_) => {}
            }
        }
    }
    if r.container()["readinessProbe"].get("grpc").is_some() && tls.is_some() {
        findings.push("a gRPC readiness probe cannot connect to a TLS listener".to_owned());
    }
    findings
}

/// The daemon's NetworkPolicy: gRPC from gateway pods (the label) in named namespaces only.
pub(super) fn network_policy_findings(r: &Rendered) -> Vec<String> {
    let mut findings = Vec::new();
    let np = r.named("NetworkPolicy", "portcullis");
    if !seq(&np["spec"]["policyTypes"]).contains(&Value::from("Ingress")) {
        findings.push("the NetworkPolicy does not restrict ingress".to_owned());
    }
    for rule in seq(&np["spec"]["ingress"]) {
        // A rule without `from` or without `ports` admits every source or every port.
        let from = rule["from"].as_sequence().filter(|f| !f.is_empty());
        let ports = rule["ports"].as_sequence().filter(|p| !p.is_empty());
        let (Some(from), Some(ports)) = (from, ports) else {
            findings.push(format!("a NetworkPolicy rule admits everything: {rule:?}"));
            continue;
        };
        if !ports.iter().any(|p| p["port"] == "grpc") {
            continue;
        }
        for peer in from {
            if peer.get("ipBlock").is_some() {
                findings.push("the gRPC port admits an ipBlock".to_owned());
            }
            if named_namespaces(&peer["namespaceSelector"]).is_none() {
                findings.push(format!(
                    "the gRPC port admits namespaces by {:?}",
                    peer["namespaceSelector"]
                ));
            }
            if peer["podSelector"]["matchLabels"]["portcullis.io/gateway"] != "true" {
                findings.push(
                    "the gRPC port admits pods without portcullis.io/gateway=true".to_owned(),
                );
            }
        }
    }
    findings
}

#[test]
fn the_production_overlay_passes_the_security_review() {
    let Some(r) = rendered(PRODUCTION) else { return };
    let findings = security_findings(r, &r.config());
    assert!(findings.is_empty(), "{PRODUCTION}:\n{}", findings.join("\n"));
}

/// The first source of the daemon's NetworkPolicy rule for the gRPC port.
fn grpc_peer(r: &mut Rendered) -> &mut Value {
    let np = r.named_mut("NetworkPolicy", "portcullis");
    let rules = np["spec"]["ingress"].as_sequence_mut().unwrap();
    let rule = rules.iter_mut().find(|r| seq(&r["ports"])[0]["port"] == "grpc").unwrap();
    &mut rule["from"].as_sequence_mut().unwrap()[0]
}

/// The review above can fail: each of its refusals, planted in the production overlay.
#[test]
fn the_security_review_refuses_what_it_is_for() {
    let Some(r) = rendered(PRODUCTION) else { return };
    let config = r.config();
    let found = |r: &Rendered, config: &toml::Table, wanted: &str| {
        let findings = security_findings(r, config);
        assert!(findings.iter().any(|f| f.contains(wanted)), "{wanted:?} not in {findings:?}");
    };
    let mut plaintext = config.clone();
    plaintext.insert("allow_plaintext".into(), true.into());
    found(r, &plaintext, "allow_plaintext");
    let mut no_mtls = config.clone();
    no_mtls["tls"].as_table_mut().unwrap().remove("client_ca_file");
    found(r, &no_mtls, "client_ca_file");
    let mut open = config.clone();
    open.remove("callers");
    found(r, &open, "no [callers]");
    let mut admin = config.clone();
    admin["callers"]["gateways"]["rpcs"].as_array_mut().unwrap().push("Unlock".into());
    found(r, &admin, "callers.gateways may call the Admin RPCs");

    let mut any_namespace = r.clone();
    grpc_peer(&mut any_namespace)["namespaceSelector"] = serde_yaml_ng::from_str("{}").unwrap();
    found(&any_namespace, &config, "admits namespaces");
    let mut any_pod = r.clone();
    grpc_peer(&mut any_pod).as_mapping_mut().unwrap().remove("podSelector");
    found(&any_pod, &config, "without portcullis.io/gateway=true");
    let mut sub_path = r.clone();
    let deployment = sub_path.named_mut("Deployment", "portcullis");
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    for m in container["volumeMounts"].as_sequence_mut().unwrap() {
        if m["name"] == "tls" {
            m["subPath"] = "tls.crt".into();
        }
    }
    found(&sub_path, &config, "subPath");
}
