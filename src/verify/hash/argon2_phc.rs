//! argon2id, argon2i and argon2d PHC strings (RFC 9106; the PHC string format), and
//! Django's `argon2$` form of them: parsing, comparison in kept working memory, and
//! hashing for a realm's dummy.

use std::cell::RefCell;

use argon2::{Argon2, Block, PasswordHash};
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use super::params::{Algorithm, Ceilings, HashError, HashParams};

thread_local! {
    /// This thread's kept argon2 working memory ([`super::StoredHash::matches_keeping`]).
    pub(super) static KEPT_MEMORY: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
}

/// Frees this thread's kept argon2 working memory, if any; the next comparison that
/// keeps memory allocates it again. The CPU governor runs this on its hashing threads
/// once they have been idle a while, so a flood's working memory goes back to the
/// operating system after it.
pub fn release_kept_memory() {
    KEPT_MEMORY.with(|kept| {
        // Never borrowed here in practice (a comparison does not run another job inside
        // itself); if it were, the memory is simply kept.
        if let Ok(mut kept) = kept.try_borrow_mut() {
            *kept = Vec::new();
        }
    });
}

/// This thread's kept argon2 working memory, in KiB (argon2 blocks are 1 KiB).
pub fn kept_memory_kib() -> usize {
    KEPT_MEMORY.with_borrow(Vec::len)
}

/// Recomputes `hash`'s output for `password` and compares it in constant time, in
/// `kept` (grown to the hash's block count when smaller) or, when `None`, in memory
/// allocated for this call. Any parameter the crate refuses is no match.
fn argon2_matches(hash: &PasswordHash, password: &[u8], kept: Option<&mut Vec<Block>>) -> bool {
    let (Some(salt), Some(expected)) = (&hash.salt, &hash.hash) else {
        return false;
    };
    let Ok(params) = argon2::Params::try_from(hash) else {
        return false;
    };
    let Ok(algorithm) = argon2::Algorithm::try_from(hash.algorithm.as_str()) else {
        return false;
    };
    let version = match hash.version.map(argon2::Version::try_from) {
        None => argon2::Version::default(),
        Some(Ok(version)) => version,
        Some(Err(_)) => return false,
    };
    let mut output = [0u8; ARGON2_MAX_OUTPUT_BYTES];
    let Some(output) = output.get_mut(..expected.len()) else {
        return false;
    };
    let blocks = params.block_count();
    let argon2 = Argon2::new(algorithm, version, params);
    let hashed = match kept {
        Some(kept) => {
            if kept.len() < blocks {
                // The old memory goes first, so the two are never held at once. Memory
                // the system refuses is no match, as in the crate's own allocation
                // (`resize` alone would abort the process).
                *kept = Vec::new();
                if kept.try_reserve_exact(blocks).is_err() {
                    return false;
                }
                kept.resize(blocks, Block::default());
            }
            let used = &mut kept[..blocks];
            let hashed = argon2.hash_password_into_with_memory(password, salt, output, &mut *used);
            // Wiped, as the password is: with t = 1 the first blocks of each lane would
            // otherwise check a guess at the password for a few microseconds of work.
            used.iter_mut().for_each(Zeroize::zeroize);
            hashed
        }
        None => argon2.hash_password_into(password, salt, output),
    };
    let matched = hashed.is_ok() && bool::from(output.ct_eq(expected.as_bytes()));
    output.zeroize();
    matched
}

/// Longest argon2 salt and output accepted, in bytes: the limits of the `phc` crate that
/// parses PHC strings (RFC 9106 allows more; no common tool writes more: argon2-cffi,
/// libsodium and PHP default to 16 and 32).
pub const ARGON2_MAX_SALT_BYTES: usize = 48;
/// See [`ARGON2_MAX_SALT_BYTES`].
pub const ARGON2_MAX_OUTPUT_BYTES: usize = 64;

/// Checks the argon2 PHC string `text` and its `m`, `t` and `p` against `ceilings`,
/// without hashing (the crate's own parameter checks included).
pub(super) fn parse(text: &str, ceilings: &Ceilings) -> Result<HashParams, HashError> {
    let malformed = |m: &str| HashError::MalformedArgon2(m.to_owned());
    // Name these limits plainly instead of the parser's base64 complaint.
    let fields: Vec<&str> = text.split('$').collect();
    if let [.., salt, output] = fields[..] {
        let b64_bytes = |f: &str| f.len() * 3 / 4;
        if b64_bytes(salt) > ARGON2_MAX_SALT_BYTES && !salt.contains('=') && !salt.contains(',') {
            return Err(malformed("salts longer than 48 bytes are not supported"));
        }
        if b64_bytes(output) > ARGON2_MAX_OUTPUT_BYTES {
            return Err(malformed("outputs longer than 64 bytes are not supported"));
        }
    }
    let hash = PasswordHash::new(text).map_err(|e| HashError::MalformedArgon2(e.to_string()))?;
    let algorithm = match hash.algorithm.as_str() {
        "argon2id" => Algorithm::Argon2id,
        "argon2i" => Algorithm::Argon2i,
        "argon2d" => Algorithm::Argon2d,
        _ => {
            return Err(malformed("the algorithm must be argon2id, argon2i or argon2d"));
        }
    };
    match hash.version {
        None | Some(0x10) | Some(0x13) => {}
        Some(_) => return Err(malformed("the version must be 16 or 19")),
    }
    let mut m = None;
    let mut t = None;
    let mut p = None;
    for (ident, value) in hash.params.iter() {
        let slot = match ident.as_str() {
            "m" => &mut m,
            "t" => &mut t,
            "p" => &mut p,
            // Any other parameter is refused, naming it. `keyid` (a secret key) and
            // `data` (associated data) change the hash: ignoring them would compare against
            // a hash this daemon can never reproduce, so the password would silently never
            // match. The PHC grammar limits a name to 32 of [a-z0-9-], so it is safe to name.
            other => return Err(HashError::UnsupportedParameter(other.to_owned())),
        };
        *slot = Some(value.decimal().map_err(|_| malformed("m, t and p must be decimal"))?);
    }
    let (Some(m), Some(t), Some(p)) = (m, t, p) else {
        return Err(malformed("m, t and p are required"));
    };
    for (name, value, ceiling) in [
        ("argon2 m (KiB)", m, ceilings.argon2_memory_kib),
        ("argon2 t", t, ceilings.argon2_iterations),
        ("argon2 p", p, ceilings.argon2_parallelism),
    ] {
        if value > ceiling {
            return Err(HashError::AboveCeiling { name, value: u64::from(value), ceiling });
        }
    }
    if hash.salt.is_none() || hash.hash.is_none() {
        return Err(malformed("the salt and the hash are required"));
    }
    // The library's own checks (m >= 8p, salt and output lengths), still without hashing.
    argon2::Params::try_from(&hash).map_err(|e| HashError::MalformedArgon2(e.to_string()))?;
    Ok(HashParams::Argon2 { algorithm, memory_kib: m, iterations: t, parallelism: p })
}

/// Hashes `password` with argon2 `variant` and the target's parameters and a fresh random
/// 16-byte salt, as a PHC string.
pub(super) fn generate(
    password: &[u8],
    algorithm: Algorithm,
    memory_kib: u32,
    iterations: u32,
    parallelism: u32,
) -> Result<String, String> {
    use argon2::PasswordHasher;
    let params = argon2::Params::new(memory_kib, iterations, parallelism, None)
        .map_err(|e| e.to_string())?;
    let variant = match algorithm {
        Algorithm::Argon2i => argon2::Algorithm::Argon2i,
        Algorithm::Argon2d => argon2::Algorithm::Argon2d,
        Algorithm::Argon2id => argon2::Algorithm::Argon2id,
        other => return Err(format!("{other:?} is not an argon2 variant")),
    };
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| e.to_string())?;
    Ok(Argon2::new(variant, argon2::Version::V0x13, params)
        .hash_password_with_salt(password, &salt)
        .map_err(|e| e.to_string())?
        .to_string())
}

/// Compares `password` with the PHC string `phc` (whose memory is `memory_kib`), in this
/// thread's kept working memory when `memory_kib <= keep_kib`
/// ([`super::StoredHash::matches_keeping`]). Anything the crate refuses is no match.
pub(super) fn matches(phc: &str, memory_kib: u32, password: &[u8], keep_kib: u32) -> bool {
    match PasswordHash::new(phc) {
        Ok(hash) if memory_kib <= keep_kib => {
            KEPT_MEMORY.with_borrow_mut(|kept| argon2_matches(&hash, password, Some(kept)))
        }
        Ok(hash) => argon2_matches(&hash, password, None),
        Err(_) => false,
    }
}
