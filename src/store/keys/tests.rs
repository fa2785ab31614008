//! The key layout, pinned: what a change of derivation would forget, and what each key
//! must never hold.

use super::*;
use crate::normalize::{Normalization, normalize};

fn secret() -> KeySecret {
    KeySecret::new(b"0123456789abcdef0123456789abcdef".to_vec())
}

fn key(realm: &str, id: &str) -> AccountKey {
    AccountKey::new(&secret(), realm, &normalize(Normalization::Exact, id).unwrap())
}

#[test]
fn key_format_is_pinned() {
    let k = key("default", "alice@example.com");
    let record = k.record();
    assert_eq!(record, format!("portcullis:v2:{{{}}}:r", k.digest()));
    // Pinned (and checked with Python's hmac module: the first 128 bits of the
    // HMAC) so a change of derivation, which forgets every count, is deliberate.
    assert_eq!(k.digest(), "6213abbd6884a4636012888f626bf820");
    let id = AttemptId::parse("6f1c0f9e-3f1e-4b8e-9a55-0c0ffee00001").unwrap().unwrap();
    let attempt = k.attempt(&secret(), &id);
    assert!(attempt.as_str().starts_with(&format!("portcullis:v2:{{{}}}:a:", k.digest())));
    assert_eq!(attempt.as_str().len(), record.len() - "r".len() + "a:".len() + 16);
    assert_eq!(k.device_epoch(), format!("portcullis:v2:{{{}}}:e", k.digest()));
}

#[test]
fn keys_carry_no_identifier_and_separate_realms() {
    let k = key("default", "alice@example.com");
    assert!(!k.record().contains("alice"));
    assert_ne!(key("ab", "c"), key("a", "bc"));
    assert_ne!(key("a", "b"), key("b", "a"));
    let other = KeySecret::new(b"fedcba9876543210fedcba9876543210".to_vec());
    let id = normalize(Normalization::Exact, "alice").unwrap();
    assert_ne!(AccountKey::new(&secret(), "r", &id), AccountKey::new(&other, "r", &id));
}

#[test]
fn device_buckets_share_the_hash_tag_and_not_the_record() {
    let k = key("default", "alice@example.com");
    let d = k.device(&secret(), &[7; 16]);
    assert!(d.is_device() && !k.is_device());
    let record = d.record();
    assert!(record.starts_with(&format!("portcullis:v2:{{{}}}:d:", k.digest())));
    assert_eq!(record.len(), "portcullis:v2:{".len() + 32 + "}:d:".len() + 16);
    assert_ne!(record, k.record());
    assert_ne!(d, k.device(&secret(), &[8; 16]));
    let id = AttemptId::parse("x").unwrap().unwrap();
    assert_eq!(d.attempt(&secret(), &id), k.attempt(&secret(), &id));
    // Each has its candidate record beside it, in the same hash tag.
    let (own, device) = (k.candidate_record().unwrap(), d.candidate_record().unwrap());
    assert_eq!(device, format!("{record}:s"));
    assert!(own.starts_with(&format!("portcullis:v2:{{{}}}:", k.digest())) && own != device);
}

#[test]
fn flow_records_share_the_hash_tag_and_not_the_record_or_attempt_ids() {
    let k = key("default", "alice@example.com");
    let id = AttemptId::parse("x").unwrap().unwrap();
    let mut seen = vec![k.record()];
    for (flow, tag) in [
        (Flow::SecondFactor, "2f"),
        (Flow::RecoveryCode, "rc"),
        (Flow::PasswordReset, "pr"),
        (Flow::VerificationResend, "vr"),
    ] {
        let f = k.flow(flow);
        assert_eq!(f.record(), format!("portcullis:v2:{{{}}}:f:{tag}", k.digest()));
        assert_eq!(f.flow_of(), Some(flow));
        assert!(!f.is_device());
        let attempt = f.attempt(&secret(), &id);
        assert!(attempt.as_str().starts_with(&format!("portcullis:v2:{{{}}}:fa:", k.digest())));
        assert_ne!(attempt, k.attempt(&secret(), &id), "{flow:?} shares the login's ids");
        let candidate = f.candidate_record().expect("a flow has a candidate record");
        assert_eq!(candidate, format!("{}:s", f.record()), "in the same hash tag");
        seen.push(f.record());
        seen.push(attempt.as_str().to_owned());
        seen.push(candidate);
    }
    seen.push(k.candidate_record().unwrap());
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 14, "every flow has its own record, candidate and attempt ids");
    let login = NetworkKey::new(&secret(), "default", "ip:203.0.113.7/32");
    let reset = NetworkKey::flow(&secret(), "default", Flow::PasswordReset, "ip:203.0.113.7/32");
    let resend =
        NetworkKey::flow(&secret(), "default", Flow::VerificationResend, "ip:203.0.113.7/32");
    assert!(login != reset && reset != resend && login != resend);
}

#[test]
fn network_keys_hold_no_address_and_separate_realms() {
    let n = NetworkKey::new(&secret(), "default", "ip:203.0.113.7/32");
    let key = n.as_key();
    assert!(key.starts_with("portcullis:v2:{n:") && key.ends_with('}'), "{key}");
    assert_eq!(key.len(), "portcullis:v2:{n:".len() + 32 + 1);
    assert!(!key.contains("203") && !format!("{n:?}").contains("203"));
    assert_eq!(n.tag(), &key["portcullis:v2:{n:".len()..][..16]);
    assert_ne!(n, NetworkKey::new(&secret(), "other", "ip:203.0.113.7/32"));
    assert_ne!(n, NetworkKey::new(&secret(), "default", "ip:203.0.113.8/32"));
    // What an account's RecordAttempts hold there shares the bucket's hash tag.
    let k = self::key("default", "alice@example.com");
    let held = n.held_by(&k);
    assert_eq!(held.as_str(), format!("{key}:h:{}", k.digest()));
    assert_ne!(held, n.held_by(&self::key("default", "bob@example.com")));
}

#[test]
fn repeat_lists_share_the_hash_tag_and_separate_clients_and_buckets() {
    let k = key("default", "alice@example.com");
    let list = k.repeats(&secret(), "ip:203.0.113.7/32");
    assert!(list.as_str().starts_with(&format!("portcullis:v2:{{{}}}:p:", k.digest())));
    assert!(!list.as_str().contains("203"));
    assert_ne!(list, k.repeats(&secret(), "ip:203.0.113.8/32"));
    let d = k.device(&secret(), &[7; 16]);
    assert_ne!(list, d.repeats(&secret(), "ip:203.0.113.7/32"));
}

#[test]
fn attempt_ids_are_validated() {
    assert_eq!(AttemptId::parse(""), Ok(None));
    assert!(AttemptId::parse(&"a".repeat(128)).unwrap().is_some());
    assert!(AttemptId::parse(&"a".repeat(129)).is_err());
    assert!(AttemptId::parse("has space").is_err());
    assert!(AttemptId::parse("ünï").is_err());
}
