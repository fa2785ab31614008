//! Parity with the account lookup: spellings that reach one account reach one counter;
//! different realms never share one.

use portcullis::normalize::{Normalization, normalize};
use portcullis_test_support::*;

/// `joe.doe@example.org` has 16 letters: 2^16 = 65,536 upper/lower-case spellings.
const ADDRESS: &str = "joe.doe@example.org";

fn spelling(mask: u32) -> String {
    let mut bit = 0;
    ADDRESS
        .chars()
        .map(|ch| {
            if ch.is_ascii_alphabetic() {
                let upper = mask & (1 << bit) != 0;
                bit += 1;
                if upper { ch.to_ascii_uppercase() } else { ch }
            } else {
                ch
            }
        })
        .collect()
}

#[test]
fn all_65536_case_spellings_normalize_to_one_identifier() {
    assert_eq!(ADDRESS.chars().filter(char::is_ascii_alphabetic).count(), 16);
    for mode in [Normalization::Email, Normalization::AsciiLowercase] {
        let one = normalize(mode, ADDRESS).unwrap();
        for mask in 0..(1u32 << 16) {
            assert_eq!(normalize(mode, &spelling(mask)).unwrap(), one, "{mode:?} mask {mask:#x}");
        }
    }
    // `exact` keeps them apart, as an exact lookup would.
    let exact: std::collections::HashSet<_> = (0..(1u32 << 16))
        .map(|m| normalize(Normalization::Exact, &spelling(m)).unwrap().as_str().to_owned())
        .collect();
    assert_eq!(exact.len(), 1 << 16);
}

#[tokio::test]
async fn case_spellings_reach_one_counter_through_the_daemon() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    // 256 distinct spellings, spread over the whole space (odd stride: a permutation).
    for i in 0..256u32 {
        c.attempt("default", &spelling(i.wrapping_mul(40_503) & 0xFFFF)).await.unwrap();
    }
    let mut conn = redis.conn();
    assert_eq!(dbsize(&mut conn), 1, "spellings split across counters");
    let key = record_key("default", Normalization::Email, ADDRESS);
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 256);
    assert_store_clean(&mut conn, &[ADDRESS, "joe.doe", "example.org"]);
    daemon.shutdown().await;
}

#[tokio::test]
async fn unicode_case_and_compatibility_forms_reach_one_counter_in_email_mode() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let groups: [&[&str]; 4] = [
        // Precomposed, decomposed, upper case, full-width, padded.
        &[
            "åsa@exämple.se",
            "A\u{030A}SA@EXA\u{0308}MPLE.SE",
            "ÅSA@xn--exmple-cua.se",
            "  åsa@exämple.se\t",
        ],
        // Full case folding: ß folds to ss; the Kelvin sign to k; the fi ligature to fi.
        &["strasse.kfi@x.de", "STRAßE.\u{212A}\u{FB01}@X.DE", "Straße.KFI@x.de"],
        // Full-width letters and at sign (compatibility forms).
        &["alice@example.com", "ＡＬＩＣＥ＠ＥＸＡＭＰＬＥ．ＣＯＭ", "ａｌｉｃｅ@example.com"],
        // Greek final sigma and capital sigma fold alike.
        &["οδυσσεας@example.gr", "ΟΔΥΣΣΕΑΣ@EXAMPLE.GR", "οδυσσεας@EXAMPLE.GR"],
    ];
    let mut conn = redis.conn();
    for (n, group) in groups.iter().enumerate() {
        for spelling in group.iter() {
            c.attempt("default", spelling).await.unwrap();
        }
        assert_eq!(dbsize(&mut conn), n as u64 + 1, "group {n} split across counters");
        let key = record_key("default", Normalization::Email, group[0]);
        assert_eq!(read_record(&mut conn, &key).unwrap().0, group.len() as u64, "group {n}");
    }
    daemon.shutdown().await;
}

#[tokio::test]
async fn realms_never_share_a_counter() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    let mut conn = redis.conn();
    // ("ab", "c@x.io") and ("a", "bc@x.io") concatenate to the same string.
    for _ in 0..6 {
        c.attempt("ab", "c@x.io").await.unwrap();
    }
    assert_eq!(c.attempt("a", "bc@x.io").await.unwrap(), portcullis::pb::Decision::Allow);
    assert_eq!(c.admit("ab", "c@x.io").await.unwrap(), portcullis::pb::Decision::Deny);
    // One identifier in two realms: two counters.
    assert_eq!(c.attempt("default", "c@x.io").await.unwrap(), portcullis::pb::Decision::Allow);
    assert_eq!(c.attempt("mfa", "c@x.io").await.unwrap(), portcullis::pb::Decision::Allow);
    assert_eq!(dbsize(&mut conn), 4);
    let key = record_key("a", Normalization::Email, "bc@x.io");
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 1);
    daemon.shutdown().await;
}

/// The fully-qualified spelling of a domain (one trailing dot) is the same mailbox, so
/// it reaches the same counter; an address literal reaches one counter in any spelling.
#[tokio::test]
async fn a_trailing_dot_and_literal_spellings_reach_one_counter() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    let mut c = daemon.client().await;
    for spelling in
        ["dave@example.com", "dave@example.com.", "Dave@EXAMPLE.com.", "dave@example.com"]
    {
        c.attempt("default", spelling).await.unwrap();
    }
    for spelling in ["ops@[IPv6:2001:DB8::1]", "ops@[ipv6:2001:db8:0:0:0:0:0:1]"] {
        c.attempt("default", spelling).await.unwrap();
    }
    let mut conn = redis.conn();
    assert_eq!(dbsize(&mut conn), 2, "spellings split across counters");
    let key = record_key("default", Normalization::Email, "dave@example.com");
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 4);
    let key = record_key("default", Normalization::Email, "ops@[ipv6:2001:db8::1]");
    assert_eq!(read_record(&mut conn, &key).unwrap().0, 2);
    daemon.shutdown().await;
}
