//! docs/compliance.md's realm profiles, loaded as a user would load them and held to the
//! numbers of the requirement each one names: NIST SP 800-63B-4 §3.2.2 (at most 100
//! consecutive failures), OWASP ASVS 5.0 V6, PCI DSS 4.0 8.3.4 (at most 10 attempts, a
//! lockout of 30 minutes at least). The profiles are read from the page itself, so the
//! page cannot drift from what the daemon does.

use std::path::Path;

use portcullis::config::{Config, Overrides};
use portcullis::defence::devices::UnknownDevice;
use portcullis::realm::Realm;
use portcullis::throttle::{self, Policy, Record};

const MIN: u64 = 60_000;
const DAY: u64 = 24 * 60 * MIN;

/// The ```toml blocks of docs/compliance.md, each one profile.
fn profiles() -> Vec<String> {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/compliance.md"))
            .unwrap();
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        match (&mut current, line.trim()) {
            (None, "```toml") => current = Some(String::new()),
            (Some(block), "```") => {
                blocks.push(std::mem::take(block));
                current = None;
            }
            (Some(block), _) => {
                block.push_str(line);
                block.push('\n');
            }
            (None, _) => {}
        }
    }
    blocks
}

/// The realm `name` of the profile that defines it, validated as the daemon validates it.
fn realm(name: &str) -> Realm {
    let header = format!("[realms.{name}]");
    let text = profiles()
        .into_iter()
        .find(|p| p.lines().any(|l| l.trim() == header))
        .unwrap_or_else(|| panic!("docs/compliance.md has no profile {header}"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.toml");
    std::fs::write(&path, text).unwrap();
    let settings = Config::load(Some(&path), &Overrides::default())
        .and_then(|c| c.validate(Some("0123456789abcdef0123456789abcdef".into())))
        .unwrap_or_else(|e| panic!("the {name} profile does not load: {e}"));
    settings.realms.get(name).unwrap().clone()
}

/// Attempts allowed in `days` to an attacker who tries once a second whenever the door
/// is open (never a success).
fn allowed_over(policy: &Policy, days: u64) -> usize {
    let (mut record, mut allowed, mut t) = (None::<Record>, 0, 0);
    while t < days * DAY {
        if throttle::attempt_count::is_open(policy, record.as_ref(), t) {
            let out = throttle::attempt_count::attempt(policy, record, t);
            allowed += usize::from(out.allowed);
            record = Some(out.record);
            t += 1000;
        } else {
            // Jump to the next second at which the door may have opened.
            let r = record.unwrap();
            let end = throttle::attempt_count::window_end_ms(policy, &r);
            if policy.at_ceiling(r.consecutive) {
                break;
            }
            t = end.max(t + 1000);
        }
    }
    allowed
}

#[test]
fn every_profile_on_the_page_loads() {
    let names: Vec<_> =
        profiles().iter().map(|p| p.lines().next().unwrap_or("").to_owned()).collect();
    assert_eq!(names, ["[realms.nist]", "[realms.asvs]", "[realms.pci]"]);
    for name in ["nist", "asvs", "pci"] {
        realm(name);
    }
}

#[test]
fn the_nist_profile_allows_at_most_100_consecutive_failures_on_every_record() {
    let nist = realm("nist");
    for policy in [nist.policy, nist.flows.second_factor, nist.flows.recovery_code] {
        assert!(policy.max_consecutive_failures <= 100);
        let month = allowed_over(&policy, 30);
        assert!(month <= 100, "{month} attempts in 30 days: {policy:?}");
        assert!(month > 90, "the ceiling, not the windows, should be what stops {policy:?}");
    }
    assert!(nist.policy.retention >= std::time::Duration::from_secs(7 * DAY / 1000));
}

#[test]
fn the_asvs_profile_counts_every_pathway_under_the_ceiling_and_steps_up() {
    let asvs = realm("asvs");
    assert_eq!(asvs.unknown_device, UnknownDevice::StepUp);
    for policy in [asvs.policy, asvs.flows.second_factor, asvs.flows.recovery_code] {
        assert!(allowed_over(&policy, 30) <= 100);
    }
}

#[test]
fn the_pci_profile_locks_after_at_most_10_attempts_for_at_least_30_minutes() {
    let pci = realm("pci");
    assert_eq!(pci.repeat.list_length, 0, "every invalid attempt must count");
    for policy in [pci.policy, pci.flows.second_factor] {
        assert!(policy.max_failures <= 10, "{policy:?}");
        // One failure, then the rest of the window's allowance a second before it ends.
        let window = policy.window_ms(0);
        let mut record = Some(throttle::attempt_count::attempt(&policy, None, 0).record);
        let late = window - 1000;
        let mut allowed = 1;
        while throttle::attempt_count::is_open(&policy, record.as_ref(), late) {
            let out = throttle::attempt_count::attempt(&policy, record, late);
            assert!(out.allowed);
            allowed += 1;
            record = Some(out.record);
        }
        assert!(allowed <= 10, "{allowed} attempts before the lockout");
        assert!(!throttle::attempt_count::is_open(&policy, record.as_ref(), late + 30 * MIN - 1));
        assert!(!throttle::attempt_count::attempt(&policy, record, late + 30 * MIN - 1).allowed);
    }
}
