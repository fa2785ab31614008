//! Reading the store the way an auditor would: records, keys, expiries, and the audit
//! that no key or value holds a secret; a minimal HTTP GET for the admin listener.

use std::net::SocketAddr;
use std::time::Duration;

use portcullis::normalize::{Normalization, normalize};
use portcullis::secret::KeySecret;
use portcullis::store::keys::{AccountKey, KEY_CHECK};

use crate::config::SECRET;

/// The record key of (realm, identifier) as the daemon derives it.
pub fn record_key(realm: &str, mode: Normalization, identifier: &str) -> String {
    let secret = KeySecret::new(SECRET.as_bytes().to_vec());
    AccountKey::new(&secret, realm, &normalize(mode, identifier).unwrap()).record()
}

/// `(failures, window_start_ms, step)` of a record, or `None`.
pub fn read_record(conn: &mut redis::Connection, key: &str) -> Option<(u64, u64, u32)> {
    let (f, ws, st): (Option<u64>, Option<u64>, Option<u32>) =
        redis::cmd("HMGET").arg(key).arg("f").arg("ws").arg("st").query(conn).unwrap();
    Some((f?, ws?, st?))
}

/// Moves a record's window start and the end of its lockout `ms` into the past: the
/// same as waiting `ms` on the store's clock, for the rules that compare the time with
/// the window's end.
pub fn age_record(conn: &mut redis::Connection, key: &str, ms: u64) {
    let ws: u64 = redis::cmd("HGET").arg(key).arg("ws").query(conn).unwrap();
    let _: () = redis::cmd("HSET").arg(key).arg("ws").arg(ws - ms).query(conn).unwrap();
    // The end of a lockout set by an attempt and when the door shut (absent: none) move
    // with it.
    for field in ["lu", "sa"] {
        let at: Option<u64> = redis::cmd("HGET").arg(key).arg(field).query(conn).unwrap();
        if let Some(at) = at {
            let _: () = redis::cmd("HSET")
                .arg(key)
                .arg(field)
                .arg(at.saturating_sub(ms))
                .query(conn)
                .unwrap();
        }
    }
}

/// Audits a store after a test: no key or value contains any of `secrets` (in any
/// ASCII case), and every key but the store's key check value has an expiry.
pub fn assert_store_clean(conn: &mut redis::Connection, secrets: &[&str]) {
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(conn).unwrap();
    for key in &keys {
        if key == KEY_CHECK {
            // The one key without an expiry: a keyed check value, 64 hex digits.
            let value: String = redis::cmd("GET").arg(key).query(conn).unwrap();
            assert!(value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()));
            assert!(secrets.iter().all(|s| !value.contains(&s.to_lowercase())));
            continue;
        }
        let lower = key.to_lowercase();
        for s in secrets {
            assert!(
                !lower.contains(&s.to_lowercase()),
                "a store key contains an identifier in clear"
            );
        }
        assert!(key.starts_with("portcullis:v2:{"), "unexpected key layout");
        let ttl: i64 = redis::cmd("PTTL").arg(key).query(conn).unwrap();
        if ttl == -2 {
            // Expired between the listing and this read: gone, as it should be.
            continue;
        }
        // A record at its ceiling is kept until it is cleared (docs/throttle.md, "The
        // ceiling"): the one other key without an expiry, and only with a count.
        let at_ceiling = ttl == -1 && {
            let c: Option<u64> = redis::cmd("HGET").arg(key).arg("c").query(conn).unwrap_or(None);
            c.is_some_and(|c| c >= 1)
        };
        assert!(ttl > 0 || at_ceiling, "a key has no expiry (PTTL {ttl})");
        let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(conn).unwrap();
        let dump = String::from_utf8_lossy(&dump).to_lowercase();
        for s in secrets {
            assert!(!dump.contains(&s.to_lowercase()), "a stored value contains an identifier");
        }
    }
}

/// `GET http://{addr}{path}` over a fresh connection: status code and body. A plain
/// HTTP/1.1 client in a few lines, so the tests need no HTTP client crate.
pub async fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut response))
        .await
        .map_err(|_| std::io::Error::other("admin listener did not answer in 5 s"))??;
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {text:?}")))?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    // axum answers small bodies with Content-Length, larger ones chunked.
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    };
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// Keys in the database but the store's key check value, which every daemon writes
/// once when it first connects (docs/store.md, "One key secret per store").
pub fn dbsize(conn: &mut redis::Connection) -> u64 {
    let keys: u64 = redis::cmd("DBSIZE").query(conn).unwrap();
    // KEYS, not EXISTS: a cluster node answers for its own keys without a redirect.
    let check: Vec<String> = redis::cmd("KEYS").arg(KEY_CHECK).query(conn).unwrap();
    keys - check.len() as u64
}

/// Keys of account keys (records, attempt ids, device buckets): every key but the
/// password-spray counts (`{spray:…}`, docs/spray.md), the network buckets (`{n:…}`),
/// the repeat lists (`:p:`, docs/throttle.md) and a record's window networks (`…:n`,
/// docs/throttle.md, "Why a door is shut"), which a failed `Verify` also writes, a
/// realm's status (`{t:…}`), a candidate's report (`{c:…}`) and the records a realm's
/// candidate keeps beside an account's own (`…}:s`, a flow's `…:f:<tag>:s`;
/// docs/throttle.md, "Trying a policy in shadow"), and the store's key check value.
pub fn account_key_count(conn: &mut redis::Connection) -> usize {
    let keys: Vec<String> = redis::cmd("KEYS").arg("portcullis:v2:*").query(conn).unwrap();
    let apart = ["{spray:", "{n:", "}:p:", "{t:", "{c:"];
    keys.iter()
        .filter(|k| !apart.iter().any(|a| k.contains(a)) && !k.ends_with(":n"))
        .filter(|k| !k.ends_with(":s"))
        .filter(|k| k.as_str() != KEY_CHECK)
        .count()
}
