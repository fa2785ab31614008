//! Request validation, before any store or CPU work (docs/architecture.md, "The
//! wire contract": validation first): the account (its realm configured and open to the caller, its identifier
//! valid after normalization), the fields of `Verify`, and the caller's deadline. Bad
//! input is `INVALID_ARGUMENT` with a message naming the field, never a panic and never
//! a count.

use std::time::{Duration, Instant};

use tonic::Status;
use tonic::metadata::MetadataMap;

use crate::defence::devices::MAX_DEVICE_TOKEN_BYTES;
use crate::normalize::{NormalizedIdentifier, normalize};
use crate::pb::Account;
use crate::realm::{Realm, Realms};
use crate::secret::KeySecret;
use crate::store::keys::{AccountKey, AttemptId, AttemptKey};
use crate::telemetry::traces::{record_flow, record_realm};
use crate::throttle::flow::Flow;
use crate::verify::MAX_CLIENT_KEY_BYTES;

/// Validates `account` (before any store or CPU work) and derives its key: the account
/// is present, its realm configured and open to the request's caller
/// ([`crate::auth::check_realm`]), its identifier valid after normalization. Shared by
/// `Governor` and `Admin`.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the field: missing account, unknown realm, identifier
/// empty after normalization or over 320 bytes. `PERMISSION_DENIED` when the caller may
/// not use the realm.
pub(crate) fn account<'r>(
    realms: &'r Realms,
    secret: &KeySecret,
    account: Option<&Account>,
    extensions: &tonic::Extensions,
) -> Result<(&'r Realm, AccountKey), Status> {
    let (realm, identifier) = self::identifier(realms, account, extensions)?;
    Ok((realm, AccountKey::new(secret, &realm.name, &identifier)))
}

/// As [`account`], the normalized identifier instead of its key (`CheckPassword`,
/// whose context words include it).
///
/// # Errors
/// As [`account`].
pub(crate) fn identifier<'r>(
    realms: &'r Realms,
    account: Option<&Account>,
    extensions: &tonic::Extensions,
) -> Result<(&'r Realm, NormalizedIdentifier), Status> {
    let account = account.ok_or_else(|| Status::invalid_argument("account is required"))?;
    let realm = realms
        .get(&account.realm)
        .ok_or_else(|| Status::invalid_argument("account.realm is not a configured realm"))?;
    record_realm(&realm.name);
    crate::auth::check_realm(extensions, &realm.name)?;
    let identifier = normalize(realm.normalization, &account.identifier)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok((realm, identifier))
}

/// The store key of the request's `attempt_id`, `None` when it sent none, bound to the
/// rest of the request (`request`: its fields besides the account and the id), so a
/// replay of the id with another request is `INVALID_ARGUMENT` rather than the first
/// call's answer ([`AttemptKey::bound`]).
///
/// # Errors
/// `INVALID_ARGUMENT` naming `attempt_id` when it is too long or not printable ASCII.
pub(crate) fn attempt_key(
    secret: &KeySecret,
    key: &AccountKey,
    attempt_id: &str,
    request: &[&[u8]],
) -> Result<Option<AttemptKey>, Status> {
    let id = AttemptId::parse(attempt_id).map_err(Status::invalid_argument)?;
    Ok(id.map(|id| key.attempt(secret, &id).bound(secret, request)))
}

/// A `client_key`: at most [`MAX_CLIENT_KEY_BYTES`]; `required` (`Verify`) or optional
/// (`RecordAttempt`, `ClearAttempts`, where empty means no network throttle). Any text
/// is a key: one that is no IP address is a bucket of its own.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `client_key`: missing where required, too long.
pub(crate) fn client_key(client_key: &str, required: bool) -> Result<(), Status> {
    if required && client_key.is_empty() {
        return Err(Status::invalid_argument("client_key is required"));
    }
    if client_key.len() > MAX_CLIENT_KEY_BYTES {
        return Err(Status::invalid_argument(format!(
            "client_key is longer than {MAX_CLIENT_KEY_BYTES} bytes"
        )));
    }
    Ok(())
}

/// Longest operator's note (`UnlockRequest.note`, …), in bytes.
pub const MAX_NOTE_BYTES: usize = 256;

/// An operator's free-text note (a ticket reference) for the security event and the
/// audit line: at most [`MAX_NOTE_BYTES`], no control character (Unicode Cc), line or
/// paragraph separator (Zl, Zp) or format character (Cf: the bidirectional overrides and
/// the invisible ones), so a note can neither forge a log line nor show a SIEM text
/// other than it holds. Empty: none.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `note`.
pub(crate) fn note(note: &str) -> Result<&str, Status> {
    match note_refusal(note) {
        Some(why) => Err(Status::invalid_argument(format!("note {why}"))),
        None => Ok(note),
    }
}

/// Why `note` cannot be an operator's note (the daemon answers `INVALID_ARGUMENT`
/// naming `note`), or `None`: the same rule for the daemon and for the commands that
/// take `--note` without it (`adopt-key-secret`).
pub fn note_refusal(note: &str) -> Option<String> {
    if note.len() > MAX_NOTE_BYTES {
        return Some(format!("is longer than {MAX_NOTE_BYTES} bytes"));
    }
    if note.chars().any(|c| c.is_control() || hides_or_reorders(c)) {
        return Some("holds a control, separator or invisible formatting character".into());
    }
    None
}

/// The line and paragraph separators and the format characters of Unicode 16 (general
/// categories Zl, Zp and Cf), written out: std has no general category, and these
/// ranges change rarely.
fn hides_or_reorders(c: char) -> bool {
    matches!(c,
        '\u{00AD}' | '\u{0600}'..='\u{0605}' | '\u{061C}' | '\u{06DD}' | '\u{070F}'
        | '\u{0890}'..='\u{0891}' | '\u{08E2}' | '\u{180E}' | '\u{200B}'..='\u{200F}'
        | '\u{2028}'..='\u{202E}' | '\u{2060}'..='\u{2064}' | '\u{2066}'..='\u{206F}'
        | '\u{FEFF}' | '\u{FFF9}'..='\u{FFFB}' | '\u{110BD}' | '\u{110CD}'
        | '\u{13430}'..='\u{1343F}' | '\u{1BCA0}'..='\u{1BCA3}' | '\u{1D173}'..='\u{1D17A}'
        | '\u{E0001}' | '\u{E0020}'..='\u{E007F}')
}

/// The wire's `portcullis.v1.Flow` as a [`Flow`] (docs/flows.md), recorded on the
/// call's span.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `flow`: `FLOW_UNSPECIFIED` or a value this version does not
/// know (fail closed: never a guess).
pub(crate) fn flow(value: i32) -> Result<Flow, Status> {
    let flow = flow_or_login(value)?.ok_or_else(|| {
        Status::invalid_argument(
            "flow is required: FLOW_SECOND_FACTOR, FLOW_RECOVERY_CODE, FLOW_PASSWORD_RESET or FLOW_VERIFICATION_RESEND",
        )
    })?;
    record_flow(flow.as_str());
    Ok(flow)
}

/// As [`flow`] for the Admin service, where `FLOW_UNSPECIFIED` (or an absent field)
/// names the login throttle's record: `None`.
///
/// # Errors
/// `INVALID_ARGUMENT` naming `flow` for a value this version does not know.
pub(crate) fn flow_or_login(value: i32) -> Result<Option<Flow>, Status> {
    match crate::pb::Flow::try_from(value) {
        Ok(wire) => Ok(Flow::from_wire(wire)),
        Err(_) => Err(Status::invalid_argument(format!("flow {value} is not a known flow"))),
    }
}

/// The size bounds of `Verify`'s own fields.
///
/// # Errors
/// `INVALID_ARGUMENT` naming the field: `client_key` missing or too long, `device_token`
/// too long, `password` over `max_password_bytes`.
pub(crate) fn verify_fields(
    client_key: &str,
    device_token: &str,
    password: &[u8],
    max_password_bytes: usize,
) -> Result<(), Status> {
    self::client_key(client_key, true)?;
    if device_token.len() > MAX_DEVICE_TOKEN_BYTES {
        return Err(Status::invalid_argument(format!(
            "device_token is longer than {MAX_DEVICE_TOKEN_BYTES} bytes"
        )));
    }
    if password.len() > max_password_bytes {
        return Err(Status::invalid_argument(format!(
            "password is longer than {max_password_bytes} bytes"
        )));
    }
    Ok(())
}

/// The caller's deadline from the `grpc-timeout` header (gRPC over HTTP/2: 1–8 digits
/// and a unit H, M, S, m, u or n). tonic enforces the header but does not expose it, and
/// the parse is a few lines, so no library is pulled in for it. A malformed header is
/// ignored here; tonic answers it.
pub(crate) fn grpc_deadline(metadata: &MetadataMap) -> Option<Instant> {
    let value = metadata.get("grpc-timeout")?.to_str().ok()?;
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    let timeout = match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    };
    Instant::now().checked_add(timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_holds_what_it_shows_and_nothing_more() {
        assert_eq!(
            note("TICKET-4711: owner called, ID checked").unwrap(),
            "TICKET-4711: owner called, ID checked"
        );
        assert!(note("Fahrrad-Ärger №5").is_ok(), "any language");
        for forged in
            ["a\nb", "a\rb", "a\u{1b}[31m", "a\u{202E}b", "a\u{2028}b", "a\u{200B}b", "a\u{FEFF}"]
        {
            let refused = note(forged).unwrap_err();
            assert!(refused.message().starts_with("note "), "{forged:?}: {refused:?}");
        }
        assert!(note(&"x".repeat(MAX_NOTE_BYTES)).is_ok());
        assert!(note(&"x".repeat(MAX_NOTE_BYTES + 1)).is_err());
    }

    fn with_timeout(value: &str) -> MetadataMap {
        let mut m = MetadataMap::new();
        m.insert("grpc-timeout", value.parse().unwrap());
        m
    }

    #[test]
    fn grpc_timeout_header_is_parsed() {
        let now = Instant::now();
        let at = |v: &str| grpc_deadline(&with_timeout(v)).map(|d| d.duration_since(now));
        let near = |d: Option<Duration>, want: Duration| {
            d.is_some_and(|d| d >= want && d < want + Duration::from_secs(1))
        };
        assert!(near(at("1H"), Duration::from_secs(3600)));
        assert!(near(at("2M"), Duration::from_secs(120)));
        assert!(near(at("3S"), Duration::from_secs(3)));
        assert!(near(at("250m"), Duration::from_millis(250)));
        assert!(near(at("1000u"), Duration::from_millis(1)));
        assert!(near(at("5n"), Duration::ZERO));
        for bad in ["", "S", "123456789S", "10x", "-1S", "1.5S"] {
            assert_eq!(at(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_deadline(&MetadataMap::new()), None);
    }
}
