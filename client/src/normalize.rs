//! Identifier normalization: the rule is parity with the account lookup (docs/architecture.md,
//! "Account keys"). Two spellings that reach one account must reach
//! one counter, so a gateway should use [`normalize`] for its own lookup too.
//!
//! Every mode is idempotent: `normalize(m, normalize(m, x)?)? == normalize(m, x)?`.

use std::borrow::Cow;

use icu_casemap::CaseMapper;
use icu_properties::CodePointSetData;
use icu_properties::props::DefaultIgnorableCodePoint;
use serde::{Deserialize, Serialize};
use unicode_normalization::UnicodeNormalization;

/// Longest identifier accepted after normalization, in bytes (an email address is at
/// most 320 bytes: 64 for the local part, 1 for `@`, 255 for the domain; RFC 3696 §3).
pub const MAX_IDENTIFIER_BYTES: usize = 320;

/// Longest identifier read before normalization, in bytes. Normalization may shrink
/// (trimming) or grow (NFKC) a string; this bounds the CPU spent on hostile input.
pub const MAX_RAW_IDENTIFIER_BYTES: usize = 4096;

/// How a realm turns what the user typed into the identifier it counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Normalization {
    /// Email addresses (the default): Unicode NFKC, full case fold (Unicode
    /// `CaseFolding.txt`, C+F) and removal of default-ignorable (invisible) code points,
    /// as Unicode's `NFKC_Casefold`; white space trimmed; the domain after the `@`
    /// to ASCII with IDNA (UTS #46). A domain IDNA rejects keeps its folded form.
    ///
    /// The address grammar (RFC 5321 §4.1.2, RFC 5322 §3.4.1), decided case by case
    /// (`docs/security.md` has the table):
    /// - no `@` at all: a user name, kept as folded;
    /// - one trailing dot of the domain (its fully-qualified form, `example.com.`) is
    ///   dropped: the same mailbox as `example.com`;
    /// - an empty domain label (`example..com`, `example.com..`, `.example.com`) or an
    ///   empty domain: [`IdentifierError::EmptyDomainLabel`];
    /// - an empty local part (`@example.com`): [`IdentifierError::EmptyLocalPart`];
    /// - several `@`: [`IdentifierError::SeveralAt`] (outside a quoted local part `@`
    ///   cannot occur twice, and quoted local parts are refused);
    /// - a quoted local part (any `"` in the local part): [`IdentifierError::QuotedLocalPart`];
    ///   no mail provider issues them to end users, and their unquoting rules would be a
    ///   second spelling of the same mailbox;
    /// - a bracketed address literal (`[192.0.2.1]`, `[IPv6:2001:DB8::1]`): accepted and
    ///   rewritten to one canonical text (RFC 5952 for IPv6, tag `ipv6:`); one that does
    ///   not parse: [`IdentifierError::BadAddressLiteral`];
    /// - dots, `+tags` and case in the local part are kept (after folding): which of them
    ///   reach one mailbox is the provider's rule, and the gateway's lookup decides it.
    #[default]
    Email,
    /// The identifier byte for byte, for lookups that are exact (opaque user ids).
    Exact,
    /// Trim Unicode white space and lowercase ASCII letters only, for lookups that
    /// compare with an ASCII-case-insensitive collation.
    AsciiLowercase,
}

/// Why an identifier cannot be counted. Messages name the field, never its value.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentifierError {
    #[error("account.identifier is empty after normalization")]
    Empty,
    #[error("account.identifier is longer than {MAX_IDENTIFIER_BYTES} bytes after normalization")]
    TooLong,
    #[error("account.identifier is longer than {MAX_RAW_IDENTIFIER_BYTES} bytes")]
    RawTooLong,
    #[error(
        "account.identifier has an empty domain label (an email domain is labels joined by single dots)"
    )]
    EmptyDomainLabel,
    #[error("account.identifier has an empty local part (nothing before the @)")]
    EmptyLocalPart,
    #[error("account.identifier has more than one @")]
    SeveralAt,
    #[error("account.identifier has a quoted local part, which is not supported")]
    QuotedLocalPart,
    #[error(
        "account.identifier has a bracketed domain that is not an IPv4 or IPv6 address literal"
    )]
    BadAddressLiteral,
}

/// A normalized identifier: non-empty and at most [`MAX_IDENTIFIER_BYTES`] bytes.
/// Its `Debug` is redacted so it cannot reach a log line by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct NormalizedIdentifier(String);

impl NormalizedIdentifier {
    /// The normalized text, for the gateway's own account lookup and for key derivation.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for NormalizedIdentifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NormalizedIdentifier(<redacted>)")
    }
}

/// Normalizes `raw` with `mode` and checks the length rules of docs/architecture.md.
///
/// # Errors
/// [`IdentifierError`] when `raw` is over [`MAX_RAW_IDENTIFIER_BYTES`], or the result is
/// empty or over [`MAX_IDENTIFIER_BYTES`].
pub fn normalize(mode: Normalization, raw: &str) -> Result<NormalizedIdentifier, IdentifierError> {
    if raw.len() > MAX_RAW_IDENTIFIER_BYTES {
        return Err(IdentifierError::RawTooLong);
    }
    let normalized: Cow<'_, str> = match mode {
        Normalization::Exact => Cow::Borrowed(raw),
        Normalization::AsciiLowercase => Cow::Owned(raw.trim().to_ascii_lowercase()),
        Normalization::Email => Cow::Owned(email(raw)?),
    };
    if normalized.is_empty() {
        return Err(IdentifierError::Empty);
    }
    if normalized.len() > MAX_IDENTIFIER_BYTES {
        return Err(IdentifierError::TooLong);
    }
    Ok(NormalizedIdentifier(normalized.into_owned()))
}

fn email(raw: &str) -> Result<String, IdentifierError> {
    let folded = caseless(raw);
    // Trimmed after folding: NFKC can turn a compatibility space (U+3000) at an edge into
    // U+0020, and removing an invisible character can leave a space at an edge.
    let folded = folded.trim();
    let Some((local, domain)) = folded.split_once('@') else {
        // No `@`: a user name, not an address.
        return Ok(folded.to_owned());
    };
    if domain.contains('@') {
        return Err(IdentifierError::SeveralAt);
    }
    if local.contains('"') {
        return Err(IdentifierError::QuotedLocalPart);
    }
    if local.trim().is_empty() {
        return Err(IdentifierError::EmptyLocalPart);
    }
    // A bracket anywhere makes it an address literal (no DNS name holds one), judged
    // whole: deciding on the first or last character let `a@ [` or `a@x].` pass as a
    // DNS name whose normalized form (`a@[`, `a@x]`) a second pass then refused
    // (found by tests/integration/properties.rs).
    let domain = if domain.contains(['[', ']']) {
        address_literal(domain.trim())?
    } else {
        // Cleaned before IDNA and after: IDNA refuses a label with white space at its
        // edge (so a first pass would keep the text a second pass converts), and maps
        // full stops such as U+3002 to `.` (which may leave a trailing dot).
        let cleaned = dns_domain(domain)?;
        let ascii = idna::domain_to_ascii(&cleaned).unwrap_or(cleaned);
        dns_domain(&ascii)?
    };
    // One allocation of the right size, without `format!`'s machinery: every call
    // normalizes.
    Ok([local, "@", &domain].concat())
}

/// A domain name with one trailing dot (the root) dropped and white space around each
/// label removed (never meaningful, and a space left at the end would be trimmed by the
/// next pass, breaking idempotence); an empty label is refused.
fn dns_domain(domain: &str) -> Result<String, IdentifierError> {
    let domain = domain.trim();
    let relative = domain.strip_suffix('.').unwrap_or(domain);
    let labels: Vec<&str> = relative.split('.').map(str::trim).collect();
    if labels.iter().any(|label| label.is_empty()) {
        return Err(IdentifierError::EmptyDomainLabel);
    }
    Ok(labels.join("."))
}

/// `[a.b.c.d]` or `[IPv6:…]` (RFC 5321 §4.1.3) in one canonical text: IPv4 dotted quad,
/// IPv6 in RFC 5952 form with the tag in lower case, like the rest of the folded text.
fn address_literal(domain: &str) -> Result<String, IdentifierError> {
    let inner = domain
        .strip_prefix('[')
        .and_then(|d| d.strip_suffix(']'))
        .ok_or(IdentifierError::BadAddressLiteral)?;
    if let Some(v6) = inner.get(..5).filter(|tag| tag.eq_ignore_ascii_case("ipv6:")) {
        let addr: std::net::Ipv6Addr =
            inner[v6.len()..].parse().map_err(|_| IdentifierError::BadAddressLiteral)?;
        return Ok(format!("[ipv6:{addr}]"));
    }
    let addr: std::net::Ipv4Addr = inner.parse().map_err(|_| IdentifierError::BadAddressLiteral)?;
    Ok(format!("[{addr}]"))
}

/// Unicode compatibility caseless form with default-ignorable code points removed: the
/// closure of `NFKC(fold(NFKC(s)))` (Unicode §3.13, D146: folding once is not enough,
/// a fold can produce a string NFKC changes again), as in Unicode's `NFKC_Casefold`,
/// which also removes `Default_Ignorable_Code_Point` characters (zero-width spaces, soft
/// hyphens, bidi controls, byte order marks): invisible, so two spellings that look the
/// same must reach one counter. Public for comparisons that must ignore case and
/// compatibility forms the same way (the daemon's context words of a password check).
pub fn caseless(s: &str) -> String {
    // ASCII holds no default-ignorable code point, NFKC leaves it unchanged and case
    // folding maps only A–Z (to a–z): the same answer as the Unicode path, without its six
    // passes (`caseless_is_ascii_lowercase_on_ascii` checks every pair of ASCII characters).
    if s.is_ascii() {
        return s.to_ascii_lowercase();
    }
    caseless_unicode(s)
}

/// [`caseless`] without its ASCII shortcut.
fn caseless_unicode(s: &str) -> String {
    let mapper = CaseMapper::new();
    let ignorable = CodePointSetData::new::<DefaultIgnorableCodePoint>();
    let visible = |s: &str| -> String { s.chars().filter(|c| !ignorable.contains(*c)).collect() };
    let once: String = visible(s).nfkc().collect();
    let once: String = visible(&mapper.fold_string(&once)).nfkc().collect();
    visible(&mapper.fold_string(&once)).nfkc().collect()
}

/// Characters that interact with trimming, NFKC, case folding, IDNA and the address
/// grammar: white space of several kinds, invisible and bidi characters, combining marks,
/// letters whose case folds change length or script, compatibility forms of `@` and `.`,
/// brackets and quotes. The normalization tests (unit and property) draw strings from it;
/// a gateway's own tests of its lookup may too.
#[doc(hidden)]
pub const HOSTILE_CHARACTERS: &[char] = &[
    'a',
    'B',
    'z',
    '@',
    '.',
    '-',
    ' ',
    '\t',
    '"',
    '[',
    ']',
    ':',
    '\u{3000}',
    '\u{00A0}',
    '\u{FEFF}',
    '\u{200B}',
    '\u{00AD}',
    '\u{202E}',
    '\u{0301}',
    '\u{0345}',
    '\u{0399}',
    'ß',
    '\u{1E9E}',
    'İ',
    'ı',
    '\u{212A}',
    '\u{FB01}',
    '\u{FF21}',
    '\u{FF20}',
    '\u{FF0E}',
    '\u{3002}',
    '\u{FF61}',
    'Σ',
    'ς',
    'ǅ',
    '\u{FDFA}',
    '\u{0663}',
    '\u{06F3}',
    '1',
    '9',
    'x',
    'n',
    '\u{1F600}',
    '\u{0000}',
    '\u{E000}',
];

#[cfg(test)]
mod tests {
    use super::*;

    fn email_n(s: &str) -> String {
        normalize(Normalization::Email, s).unwrap().0
    }

    #[test]
    fn caseless_is_ascii_lowercase_on_ascii() {
        // Pairs, not just single characters: NFKC composes and folding may look at a
        // neighbour; no ASCII pair does either, and this holds the shortcut to that.
        let ascii: Vec<char> = (0u8..=0x7F).map(char::from).collect();
        for &a in &ascii {
            for &b in &ascii {
                let s = String::from_iter([a, b]);
                assert_eq!(caseless_unicode(&s), s.to_ascii_lowercase(), "{s:?}");
            }
        }
        let address = " Dave.O'Brien+Tag@Sub.EXAMPLE.com. ";
        assert_eq!(caseless(address), caseless_unicode(address));
    }

    #[test]
    fn email_mode_folds_case_width_and_idna() {
        assert_eq!(email_n("  Alice@Example.COM \t"), "alice@example.com");
        assert_eq!(email_n("ＡＬＩＣＥ＠ＥＸＡＭＰＬＥ.ＣＯＭ"), "alice@example.com");
        assert_eq!(email_n("STRASSE@x.de"), email_n("straße@x.de"));
        assert_eq!(email_n("\u{212A}elvin@x.org"), "kelvin@x.org");
        assert_eq!(email_n("A\u{030A}sa@x.se"), email_n("\u{00C5}SA@x.se"));
        assert_eq!(email_n("u@BÜCHER.example"), "u@xn--bcher-kva.example");
        assert_eq!(email_n("u@xn--bcher-kva.example"), "u@xn--bcher-kva.example");
        assert_eq!(email_n("u@BÜCHER.example."), "u@xn--bcher-kva.example");
        assert_eq!(email_n("\u{FB01}le@x.org"), "file@x.org");
    }

    #[test]
    fn other_modes() {
        let n = |m, s| normalize(m, s).unwrap().0;
        assert_eq!(n(Normalization::Exact, " Bob "), " Bob ");
        assert_eq!(n(Normalization::AsciiLowercase, " BoB\u{00C9} "), "bob\u{00C9}");
    }

    #[test]
    fn every_mode_is_idempotent() {
        let samples = [
            "Alice@Example.COM",
            "straße@x.de",
            "\u{0345}\u{0399}@x",
            "\u{1E9E}\u{FB00}@\u{FF21}.com",
            "İstanbul@TÜRKİYE.tr",
            "ǅ\u{0301}@x",
            "\u{3000}a\u{3000}@b",
            "x@-bad-.\u{0663}\u{06F3}",
            "no-at-sign",
            "trailing@",
            "@only-domain.example",
            "a@b@Ｃ.example",
            "\u{FDFA}@x",
            "\u{1F600}@emoji.example",
        ];
        for mode in [Normalization::Email, Normalization::Exact, Normalization::AsciiLowercase] {
            for s in samples {
                // Some samples are refused in email mode (see `email_grammar`).
                let Ok(once) = normalize(mode, s) else { continue };
                let twice = normalize(mode, once.as_str()).unwrap();
                assert_eq!(once, twice, "{mode:?} not idempotent on sample {s:?}");
            }
        }
    }

    /// Each case of the address grammar, decided (see [`Normalization::Email`]).
    #[test]
    fn email_grammar() {
        use IdentifierError::*;
        let e = |s: &str| normalize(Normalization::Email, s).map(|n| n.0);
        // The fully-qualified domain (one trailing dot) is the same mailbox.
        assert_eq!(e("dave@example.com."), Ok("dave@example.com".into()));
        assert_eq!(e("Dave@Example.COM.  "), Ok("dave@example.com".into()));
        assert_eq!(e("dave@example\u{3002}com\u{3002}"), Ok("dave@example.com".into()));
        // An empty label is not a domain.
        for s in
            ["dave@example.com..", "dave@example..com", "dave@.example.com", "dave@.", "d@", "d@ "]
        {
            assert_eq!(e(s), Err(EmptyDomainLabel), "{s:?}");
        }
        assert_eq!(e("dave@example. .com"), Err(EmptyDomainLabel));
        assert_eq!(e("@example.com"), Err(EmptyLocalPart));
        assert_eq!(e(" \u{200B} @example.com"), Err(EmptyLocalPart));
        assert_eq!(e("a@b@example.com"), Err(SeveralAt));
        assert_eq!(e("a@b\u{FF20}example.com"), Err(SeveralAt));
        assert_eq!(e("\"a@b\"@example.com"), Err(SeveralAt));
        assert_eq!(e("\"john doe\"@example.com"), Err(QuotedLocalPart));
        assert_eq!(e("\"john\"@example.com"), Err(QuotedLocalPart));
        // Address literals, one canonical text each.
        assert_eq!(e("a@[192.0.2.1]"), Ok("a@[192.0.2.1]".into()));
        assert_eq!(e("a@ [192.0.2.1] "), Ok("a@[192.0.2.1]".into()), "spaces around it");
        // IDNA sees the domain as the next pass will (found by tests/integration/properties.rs).
        let once = e("\u{301}\u{FF20}\u{85}\u{345}").unwrap();
        assert_eq!(e(&once), Ok(once.clone()));
        assert_eq!(e("a@x\u{3002}"), Ok("a@x".into()), "an ideographic full stop at the end");
        assert_eq!(e("A@[IPv6:2001:DB8:0:0:0:0:0:1]"), Ok("a@[ipv6:2001:db8::1]".into()));
        assert_eq!(e("a@[ipv6:2001:db8::1]"), Ok("a@[ipv6:2001:db8::1]".into()));
        for s in [
            "a@[192.0.2.256]",
            "a@[192.0.2.1",
            "a@192.0.2.1]",
            "a@[example.com]",
            "a@[]",
            "a@[IPv6:xyz]",
            "a@[2001:db8::1]",
            "a\u{FF20} [",
            "a@ [",
            "a@] ",
            "a@x].",
            "a@\u{301}.].",
        ] {
            assert_eq!(e(s), Err(BadAddressLiteral), "{s:?}");
        }
        // Kept as typed (after folding): the provider's rules, the gateway's lookup.
        assert_eq!(e("First.Last+tag@x.org"), Ok("first.last+tag@x.org".into()));
        assert_eq!(e(".a..b.@x.org"), Ok(".a..b.@x.org".into()));
        // No @: a user name.
        assert_eq!(e("Bob."), Ok("bob.".into()));
    }

    #[test]
    fn invisible_characters_do_not_split_counters() {
        for s in [
            "bob@example.com \u{FEFF}",
            "bob\u{200B}@example.com",
            "b\u{00AD}ob@example.com",
            "\u{202E}bob@example.com",
            "bob@example.com\u{3000}\u{200B}",
        ] {
            assert_eq!(email_n(s), "bob@example.com", "{s:?}");
        }
    }

    /// A deterministic fuzz: 50,000 strings drawn from [`HOSTILE_CHARACTERS`]. Every mode
    /// must be idempotent on all of them.
    #[test]
    fn idempotent_on_hostile_strings() {
        let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..50_000 {
            let len = 1 + (next() % 12) as usize;
            let s: String = (0..len)
                .map(|_| HOSTILE_CHARACTERS[(next() % HOSTILE_CHARACTERS.len() as u64) as usize])
                .collect();
            for mode in [Normalization::Email, Normalization::Exact, Normalization::AsciiLowercase]
            {
                if let Ok(once) = normalize(mode, &s) {
                    assert_eq!(
                        normalize(mode, once.as_str()),
                        Ok(once.clone()),
                        "{mode:?} on {s:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn empty_and_long_identifiers_are_refused() {
        assert_eq!(normalize(Normalization::Email, " \u{3000}\t"), Err(IdentifierError::Empty));
        assert_eq!(normalize(Normalization::Exact, ""), Err(IdentifierError::Empty));
        let long = format!("{}@example.com", "a".repeat(309));
        assert_eq!(long.len(), 321);
        assert_eq!(normalize(Normalization::Email, &long), Err(IdentifierError::TooLong));
        assert!(normalize(Normalization::Email, &long[1..]).is_ok());
        let raw = " ".repeat(MAX_RAW_IDENTIFIER_BYTES + 1);
        assert_eq!(normalize(Normalization::Exact, &raw), Err(IdentifierError::RawTooLong));
    }

    #[test]
    fn debug_is_redacted() {
        let n = normalize(Normalization::Email, "secret-user@example.com").unwrap();
        assert!(!format!("{n:?}").contains("secret"));
    }
}
