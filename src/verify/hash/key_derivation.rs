//! PBKDF2 (RFC 8018) and scrypt (RFC 7914) stored hashes, in the forms the frameworks
//! write them, with RustCrypto's `pbkdf2` and `scrypt` crates doing the work:
//!
//! | form | written by |
//! |---|---|
//! | `pbkdf2_sha256$ITER$SALT$B64` (also `pbkdf2_sha1$`) | Django's `PBKDF2PasswordHasher` (its default) |
//! | `scrypt$N$SALT$R$P$B64` | Django's `ScryptPasswordHasher` |
//! | `pbkdf2:sha256:ITER$SALT$HEX` (also `sha1`, `sha512`) | Werkzeug's `generate_password_hash` |
//! | `scrypt:N:R:P$SALT$HEX` | Werkzeug's default |
//! | `$pbkdf2-sha256$ITER$AB64$AB64` (also `$pbkdf2$`, `$pbkdf2-sha512$`) | passlib |
//! | `$pbkdf2-sha256$i=ITER,l=LEN$B64$B64` | the PHC string of RustCrypto's `pbkdf2` (and the realm's dummy) |
//! | `$scrypt$ln=LOG_N,r=R,p=P$B64$B64` | passlib, RustCrypto's `scrypt` (and the realm's dummy) |
//!
//! Django's and Werkzeug's salts are text, used as their UTF-8 bytes; `B64` is standard
//! base64 (padded in Django's forms, unpadded in PHC strings); passlib's `AB64` writes `.`
//! for `+`.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use sha1::Sha1;
use sha2::{Sha256, Sha512};
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use super::params::{Ceilings, HashError, HashParams, Prf};

/// Longest salt accepted, in bytes (the frameworks write 12 to 22).
pub const KDF_MAX_SALT_BYTES: usize = 64;
/// Shortest derived key accepted, in bytes: a shorter one would match many passwords.
pub const KDF_MIN_OUTPUT_BYTES: usize = 16;
/// Longest scrypt derived key accepted, in bytes (Django and Werkzeug write 64). A PBKDF2
/// key is at most its PRF's output (20, 32 or 64 bytes): a longer one costs more blocks
/// of work than its iteration count says.
pub const SCRYPT_MAX_OUTPUT_BYTES: usize = 64;

/// The salt and derived key of a parsed PBKDF2 or scrypt hash.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Derived {
    pub salt: Vec<u8>,
    pub expected: Vec<u8>,
}

impl std::fmt::Debug for Derived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Derived { .. }")
    }
}

/// How a field is encoded in one form.
#[derive(Clone, Copy)]
enum Encoding {
    /// The text's UTF-8 bytes (Django's and Werkzeug's salts).
    Text,
    /// Standard base64 with padding (Django).
    Padded,
    /// Standard base64 without padding, `.` read as `+` (PHC strings and passlib's ab64).
    Unpadded,
    /// Lowercase hex (Werkzeug).
    Hex,
}

fn decode(field: &str, encoding: Encoding) -> Option<Vec<u8>> {
    match encoding {
        Encoding::Text => Some(field.as_bytes().to_vec()),
        Encoding::Padded => STANDARD.decode(field).ok(),
        Encoding::Unpadded => STANDARD_NO_PAD.decode(field.replace('.', "+")).ok(),
        Encoding::Hex => hex::decode(field).ok(),
    }
}

/// A decimal field: digits only, no sign, no leading `+`.
fn decimal(field: &str) -> Option<u64> {
    if field.is_empty() || field.len() > 19 || !field.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    field.parse().ok()
}

/// Parses `text` when it is one of this module's forms: `Ok(None)` when it is not (the
/// caller reports an unsupported format), else the parameters, checked against
/// `ceilings`, and the salt and derived key. No hashing.
pub(super) fn parse(
    text: &str,
    ceilings: &Ceilings,
) -> Result<Option<(HashParams, Derived)>, HashError> {
    let fields: Vec<&str> = text.split('$').collect();
    let pbkdf2 = HashError::MalformedPbkdf2;
    let scrypt = HashError::MalformedScrypt;
    match fields[..] {
        ["pbkdf2_sha256" | "pbkdf2_sha1", ..] => {
            let ["pbkdf2_sha256" | "pbkdf2_sha1", iterations, salt, key] = fields[..] else {
                return Err(pbkdf2("Django's form is pbkdf2_sha256$ITERATIONS$SALT$HASH"));
            };
            let prf = if fields[0] == "pbkdf2_sha1" { Prf::Sha1 } else { Prf::Sha256 };
            let iterations = decimal(iterations).ok_or(pbkdf2("the iterations must be decimal"))?;
            pbkdf2_hash(prf, iterations, (salt, Encoding::Text), (key, Encoding::Padded), ceilings)
        }
        ["scrypt", ..] => {
            let ["scrypt", n, salt, r, p, key] = fields[..] else {
                return Err(scrypt("Django's form is scrypt$N$SALT$R$P$HASH"));
            };
            let n = decimal(n).ok_or(scrypt("N must be decimal"))?;
            let (r, p) = (decimal(r), decimal(p));
            let (Some(r), Some(p)) = (r, p) else { return Err(scrypt("r and p must be decimal")) };
            scrypt_hash(n, r, p, (salt, Encoding::Text), (key, Encoding::Padded), ceilings)
        }
        [method, ..] if method.starts_with("pbkdf2:") || method.starts_with("scrypt:") => {
            werkzeug(&fields, ceilings)
        }
        ["", "pbkdf2" | "pbkdf2-sha1" | "pbkdf2-sha256" | "pbkdf2-sha512", ..] => {
            passlib_pbkdf2(&fields, ceilings)
        }
        ["", "scrypt", ..] => {
            let ["", "scrypt", params, salt, key] = fields[..] else {
                return Err(scrypt("the PHC form is $scrypt$ln=LOG_N,r=R,p=P$SALT$HASH"));
            };
            let (mut ln, mut r, mut p) = (None, None, None);
            for pair in params.split(',') {
                let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                let slot = match name {
                    "ln" => &mut ln,
                    "r" => &mut r,
                    "p" => &mut p,
                    _ => return Err(scrypt("the parameters are ln, r and p")),
                };
                *slot = Some(decimal(value).ok_or(scrypt("ln, r and p must be decimal"))?);
            }
            let (Some(ln), Some(r), Some(p)) = (ln, r, p) else {
                return Err(scrypt("ln, r and p are required"));
            };
            if !(1..=63).contains(&ln) {
                return Err(scrypt("ln must be 1–63"));
            }
            let n = 1u64 << ln;
            let salt = (salt, Encoding::Unpadded);
            scrypt_hash(n, r, p, salt, (key, Encoding::Unpadded), ceilings)
        }
        _ => return Ok(None),
    }
    .map(Some)
}

/// Werkzeug's `pbkdf2:HASH:ITERATIONS$SALT$HEX` and `scrypt:N:R:P$SALT$HEX`. The method's
/// every part must be written (Werkzeug's defaults change between versions, so a part it
/// leaves out could not be known).
fn werkzeug(fields: &[&str], ceilings: &Ceilings) -> Result<(HashParams, Derived), HashError> {
    let [method, salt, key] = fields[..] else {
        return Err(HashError::MalformedPbkdf2("Werkzeug's form is METHOD$SALT$HEX"));
    };
    let salt = (salt, Encoding::Text);
    let key = (key, Encoding::Hex);
    let parts: Vec<&str> = method.split(':').collect();
    match parts[..] {
        ["pbkdf2", hash, iterations] => {
            let prf = match hash {
                "sha1" => Prf::Sha1,
                "sha256" => Prf::Sha256,
                "sha512" => Prf::Sha512,
                _ => {
                    return Err(HashError::MalformedPbkdf2(
                        "the hash must be sha1, sha256 or sha512",
                    ));
                }
            };
            let iterations = decimal(iterations)
                .ok_or(HashError::MalformedPbkdf2("the iterations must be decimal"))?;
            pbkdf2_hash(prf, iterations, salt, key, ceilings)
        }
        ["scrypt", n, r, p] => {
            let malformed = HashError::MalformedScrypt("N, r and p must be decimal");
            let (Some(n), Some(r), Some(p)) = (decimal(n), decimal(r), decimal(p)) else {
                return Err(malformed);
            };
            scrypt_hash(n, r, p, salt, key, ceilings)
        }
        ["pbkdf2", ..] => Err(HashError::MalformedPbkdf2(
            "Werkzeug's method must be pbkdf2:HASH:ITERATIONS, every part written",
        )),
        _ => Err(HashError::MalformedScrypt(
            "Werkzeug's method must be scrypt:N:R:P, every part written",
        )),
    }
}

/// passlib's `$pbkdf2-sha256$ITERATIONS$AB64$AB64` and RustCrypto's PHC string
/// `$pbkdf2-sha256$i=ITERATIONS,l=LENGTH$B64$B64` (`$pbkdf2$` is HMAC-SHA-1).
fn passlib_pbkdf2(
    fields: &[&str],
    ceilings: &Ceilings,
) -> Result<(HashParams, Derived), HashError> {
    let malformed = HashError::MalformedPbkdf2;
    let ["", id, params, salt, key] = fields[..] else {
        return Err(malformed("the form is $pbkdf2-sha256$ITERATIONS$SALT$HASH"));
    };
    let prf = match id {
        "pbkdf2-sha256" => Prf::Sha256,
        "pbkdf2-sha512" => Prf::Sha512,
        _ => Prf::Sha1,
    };
    let (iterations, length) = if let Some(iterations) = decimal(params) {
        (iterations, None)
    } else {
        let (mut i, mut l) = (None, None);
        for pair in params.split(',') {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let slot = match name {
                "i" => &mut i,
                "l" => &mut l,
                _ => return Err(malformed("the parameters are i and l")),
            };
            *slot = Some(decimal(value).ok_or(malformed("i and l must be decimal"))?);
        }
        (i.ok_or(malformed("the iterations (i) are required"))?, l)
    };
    let (params, derived) = pbkdf2_hash(
        prf,
        iterations,
        (salt, Encoding::Unpadded),
        (key, Encoding::Unpadded),
        ceilings,
    )?;
    if length.is_some_and(|l| l != derived.expected.len() as u64) {
        return Err(malformed("l is not the length of the hash"));
    }
    Ok((params, derived))
}

fn salt_and_key(
    salt: (&str, Encoding),
    key: (&str, Encoding),
    longest_key: usize,
) -> Result<Derived, &'static str> {
    let salt = decode(salt.0, salt.1).ok_or("the salt is not in the form's encoding")?;
    let expected = decode(key.0, key.1).ok_or("the hash is not in the form's encoding")?;
    if salt.is_empty() || salt.len() > KDF_MAX_SALT_BYTES {
        return Err("the salt must be 1–64 bytes");
    }
    if expected.len() < KDF_MIN_OUTPUT_BYTES || expected.len() > longest_key {
        return Err("the hash is shorter than 16 bytes or longer than its function writes");
    }
    Ok(Derived { salt, expected })
}

fn pbkdf2_hash(
    prf: Prf,
    iterations: u64,
    salt: (&str, Encoding),
    key: (&str, Encoding),
    ceilings: &Ceilings,
) -> Result<(HashParams, Derived), HashError> {
    if iterations == 0 {
        return Err(HashError::MalformedPbkdf2("the iterations must be at least 1"));
    }
    if iterations > u64::from(ceilings.pbkdf2_iterations) {
        return Err(HashError::AboveCeiling {
            name: "PBKDF2 iterations",
            value: iterations,
            ceiling: ceilings.pbkdf2_iterations,
        });
    }
    let derived =
        salt_and_key(salt, key, prf.output_bytes()).map_err(HashError::MalformedPbkdf2)?;
    // Below the ceiling, which is a u32.
    let iterations = u32::try_from(iterations).unwrap_or(u32::MAX);
    Ok((HashParams::Pbkdf2 { prf, iterations }, derived))
}

fn scrypt_hash(
    n: u64,
    r: u64,
    p: u64,
    salt: (&str, Encoding),
    key: (&str, Encoding),
    ceilings: &Ceilings,
) -> Result<(HashParams, Derived), HashError> {
    let malformed = HashError::MalformedScrypt;
    if n < 2 || !n.is_power_of_two() {
        return Err(malformed("N must be a power of two, at least 2"));
    }
    if r == 0 || p == 0 {
        return Err(malformed("r and p must be at least 1"));
    }
    // The crate's working memory: N + p + 1 blocks of 128 · r bytes (V, B and a
    // scratch block), in KiB, rounded up. p counts as well as N: with N = 2 a large r
    // would otherwise put the whole memory in B.
    let blocks = u128::from(n) + u128::from(p) + 1;
    let memory_kib = (128 * u128::from(r) * blocks).div_ceil(1024);
    if memory_kib > u128::from(ceilings.scrypt_memory_kib) {
        return Err(HashError::AboveCeiling {
            name: "scrypt memory (128 · r · (N + p + 1) bytes, in KiB)",
            value: u64::try_from(memory_kib).unwrap_or(u64::MAX),
            ceiling: ceilings.scrypt_memory_kib,
        });
    }
    if p > u64::from(ceilings.scrypt_parallelism) {
        return Err(HashError::AboveCeiling {
            name: "scrypt p",
            value: p,
            ceiling: ceilings.scrypt_parallelism,
        });
    }
    // Inside the ceilings, each fits its type.
    let log_n = u8::try_from(n.trailing_zeros()).unwrap_or(u8::MAX);
    let (r, p) = (u32::try_from(r).unwrap_or(u32::MAX), u32::try_from(p).unwrap_or(u32::MAX));
    // The crate's own checks, still without hashing.
    scrypt::Params::new(log_n, r, p).map_err(|_| malformed("the crate refuses N, r and p"))?;
    let derived = salt_and_key(salt, key, SCRYPT_MAX_OUTPUT_BYTES).map_err(malformed)?;
    Ok((HashParams::Scrypt { log_n, r, p }, derived))
}

/// Recomputes the derived key of `params` for `password` and compares it with the stored
/// one in constant time. Anything the crates refuse is no match.
pub(super) fn matches(params: HashParams, derived: &Derived, password: &[u8]) -> bool {
    let mut output = vec![0u8; derived.expected.len()];
    let computed = derive(params, password, &derived.salt, &mut output);
    let matched = computed && bool::from(output.ct_eq(&derived.expected));
    output.zeroize();
    matched
}

fn derive(params: HashParams, password: &[u8], salt: &[u8], output: &mut [u8]) -> bool {
    match params {
        HashParams::Pbkdf2 { prf: Prf::Sha1, iterations } => {
            pbkdf2::pbkdf2_hmac::<Sha1>(password, salt, iterations, output);
            true
        }
        HashParams::Pbkdf2 { prf: Prf::Sha256, iterations } => {
            pbkdf2::pbkdf2_hmac::<Sha256>(password, salt, iterations, output);
            true
        }
        HashParams::Pbkdf2 { prf: Prf::Sha512, iterations } => {
            pbkdf2::pbkdf2_hmac::<Sha512>(password, salt, iterations, output);
            true
        }
        HashParams::Scrypt { log_n, r, p } => scrypt::Params::new(log_n, r, p)
            .is_ok_and(|params| scrypt::scrypt(password, salt, &params, output).is_ok()),
        HashParams::Bcrypt { .. } | HashParams::Argon2 { .. } => false,
    }
}

/// Hashes `password` with the PBKDF2 or scrypt `target` and a fresh random 16-byte salt,
/// as a PHC string (RustCrypto's forms): the realm's dummy.
pub(super) fn generate(password: &[u8], target: HashParams) -> Result<String, String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| e.to_string())?;
    let (head, length) = match target {
        HashParams::Pbkdf2 { prf, iterations } => {
            let length = prf.output_bytes();
            (format!("${}$i={iterations},l={length}", prf.phc_id()), length)
        }
        HashParams::Scrypt { log_n, r, p } => (format!("$scrypt$ln={log_n},r={r},p={p}"), 32),
        other => return Err(format!("{other:?} is not PBKDF2 or scrypt")),
    };
    let mut output = vec![0u8; length];
    if !derive(target, password, &salt, &mut output) {
        return Err("the crate refused the parameters".to_owned());
    }
    let text =
        format!("{head}${}${}", STANDARD_NO_PAD.encode(salt), STANDARD_NO_PAD.encode(&output));
    output.zeroize();
    Ok(text)
}
