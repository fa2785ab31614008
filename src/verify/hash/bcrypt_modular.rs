//! bcrypt in the modular crypt format (`$2a$`, `$2b$`, `$2y$`; Provos & Mazières, 1999),
//! and Django's `bcrypt$` and `bcrypt_sha256$` forms of it.

use sha2::{Digest, Sha256};

use super::params::{BCRYPT_MAX_PASSWORD_BYTES, Ceilings, HashError, HashParams};

/// bcrypt's base64 alphabet (not RFC 4648's).
const BCRYPT_ALPHABET: &[u8] = b"./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Checks the bcrypt string `text` (60 characters) and its cost against `ceilings`,
/// without hashing.
pub(super) fn parse(text: &str, ceilings: &Ceilings) -> Result<HashParams, HashError> {
    let malformed = HashError::MalformedBcrypt;
    if text.starts_with("$2x$") {
        return Err(HashError::Bcrypt2x);
    }
    if !(text.starts_with("$2a$") || text.starts_with("$2b$") || text.starts_with("$2y$")) {
        return Err(malformed("the prefix must be $2a$, $2b$ or $2y$"));
    }
    if !text.is_ascii() || text.len() != 60 {
        return Err(malformed("a bcrypt hash is 60 ASCII characters"));
    }
    let b = text.as_bytes();
    if b[6] != b'$' || !b[4].is_ascii_digit() || !b[5].is_ascii_digit() {
        return Err(malformed("the cost must be two digits followed by $"));
    }
    let cost = u32::from(b[4] - b'0') * 10 + u32::from(b[5] - b'0');
    if !(4..=31).contains(&cost) {
        return Err(malformed("the cost must be 4–31"));
    }
    if cost > ceilings.bcrypt_cost {
        return Err(HashError::AboveCeiling {
            name: "bcrypt cost",
            value: u64::from(cost),
            ceiling: ceilings.bcrypt_cost,
        });
    }
    let (salt, digest) = text[7..].split_at(22);
    if !salt.bytes().chain(digest.bytes()).all(|c| BCRYPT_ALPHABET.contains(&c)) {
        return Err(malformed("the salt and digest must use bcrypt's base64 alphabet"));
    }
    // 16 salt bytes fill 21 characters and 4 bits of the 22nd; 23 digest bytes fill 30
    // characters and 4 bits of the 31st. The unused low bits must be zero.
    let index = |c: u8| BCRYPT_ALPHABET.iter().position(|&a| a == c).unwrap_or(0);
    if index(salt.as_bytes()[21]) % 16 != 0 {
        return Err(malformed("the salt's final base64 character is not canonical"));
    }
    if index(digest.as_bytes()[30]) % 4 != 0 {
        return Err(malformed("the digest's final base64 character is not canonical"));
    }
    Ok(HashParams::Bcrypt { cost })
}

/// Compares `password` with the bcrypt string `modular`. With `sha256_prehash` (Django's
/// `bcrypt_sha256$`), bcrypt is given the lowercase hex of the password's SHA-256 (64
/// bytes, so nothing is truncated), as Django's `BCryptSHA256PasswordHasher` does.
///
/// Otherwise bcrypt never matches a password over 72 bytes or with a NUL byte (bcrypt
/// would silently truncate either); the same work is done before the rejection, so its
/// time tells nothing.
pub(super) fn matches(modular: &str, sha256_prehash: bool, password: &[u8]) -> bool {
    if sha256_prehash {
        let mut hexed = hex::encode(Sha256::digest(password)).into_bytes();
        let matched = bcrypt::verify(&hexed, modular).unwrap_or(false);
        zeroize::Zeroize::zeroize(&mut hexed);
        return matched;
    }
    let unusable = password.len() > BCRYPT_MAX_PASSWORD_BYTES || password.contains(&0);
    let usable = &password[..password.len().min(BCRYPT_MAX_PASSWORD_BYTES)];
    let matched = bcrypt::verify(usable, modular).unwrap_or(false);
    matched && !unusable
}

/// Hashes `password` with bcrypt at `cost` and a fresh salt, written as `$2b$`.
pub(super) fn generate(password: &[u8], cost: u32) -> Result<String, String> {
    Ok(bcrypt::hash_with_result(password, cost)
        .map_err(|e| e.to_string())?
        .format_for_version(bcrypt::Version::TwoB))
}
