//! Stored password hashes: parsing, cost ceilings, comparison and the rehash rule
//! (docs/verify.md). Parsing does no hashing work, so a hash that
//! is malformed or above a ceiling is refused before any CPU is spent on it.
//!
//! Formats: bcrypt `$2a$`, `$2b$`, `$2y$` (the buggy `$2x$` is refused), and argon2id,
//! argon2i, argon2d PHC strings (versions 0x10 and 0x13) with any valid salt and output
//! length. Comparison uses the `bcrypt` and `argon2` crates.

use std::cell::RefCell;

use argon2::{Argon2, Block, PasswordHash};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

/// Longest `stored_hash` read, in bytes (an argon2 PHC string with the longest salt and
/// output accepted, 48 and 64 bytes, is under 200).
pub const MAX_STORED_HASH_BYTES: usize = 1024;

/// bcrypt uses at most this many password bytes (Provos & Mazières, 1999).
pub const BCRYPT_MAX_PASSWORD_BYTES: usize = 72;

/// Cost ceilings: a stored hash above any of them is refused without hashing. There is
/// no floor: legacy hashes must still verify (and get `needs_rehash`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings {
    /// Highest bcrypt cost factor (log2 of rounds).
    pub bcrypt_cost: u32,
    /// Highest argon2 memory, in KiB (`m`).
    pub argon2_memory_kib: u32,
    /// Highest argon2 iterations (`t`).
    pub argon2_iterations: u32,
    /// Highest argon2 lanes (`p`).
    pub argon2_parallelism: u32,
}

/// A hash algorithm a realm can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Algorithm {
    /// bcrypt, written as `$2b$`.
    Bcrypt,
    /// argon2id (RFC 9106's recommended variant).
    Argon2id,
    /// argon2i.
    Argon2i,
    /// argon2d.
    Argon2d,
}

/// The parameters of one hash: what a realm targets, and what a stored hash carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashParams {
    /// bcrypt with this cost factor.
    Bcrypt {
        /// Cost factor (log2 of rounds), 4–31.
        cost: u32,
    },
    /// argon2 of one variant.
    Argon2 {
        /// Which argon2.
        algorithm: Algorithm,
        /// Memory in KiB (`m`).
        memory_kib: u32,
        /// Iterations (`t`).
        iterations: u32,
        /// Lanes (`p`).
        parallelism: u32,
    },
}

impl HashParams {
    /// Whether a hash with these parameters is weaker than `target` (another algorithm,
    /// or any cost below the target's), so an accepted password should be rehashed.
    pub fn below(&self, target: &HashParams) -> bool {
        match (self, target) {
            (HashParams::Bcrypt { cost }, HashParams::Bcrypt { cost: want }) => cost < want,
            (
                HashParams::Argon2 { algorithm, memory_kib, iterations, parallelism },
                HashParams::Argon2 {
                    algorithm: want_alg,
                    memory_kib: want_m,
                    iterations: want_t,
                    parallelism: want_p,
                },
            ) => {
                algorithm != want_alg
                    || memory_kib < want_m
                    || iterations < want_t
                    || parallelism < want_p
            }
            _ => true,
        }
    }
}

/// Why a stored hash cannot be used. Messages name the problem, never the hash.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    #[error("stored_hash is longer than {MAX_STORED_HASH_BYTES} bytes")]
    TooLong,
    #[error(
        "stored_hash has an unsupported format: expected bcrypt ($2a$, $2b$, $2y$) or an argon2 PHC string"
    )]
    UnsupportedFormat,
    #[error("stored_hash uses bcrypt $2x$, which is not supported (buggy pre-2011 variant)")]
    Bcrypt2x,
    #[error("stored_hash is a malformed bcrypt hash: {0}")]
    MalformedBcrypt(&'static str),
    #[error("stored_hash is a malformed argon2 PHC string: {0}")]
    MalformedArgon2(String),
    #[error(
        "stored_hash has the argon2 parameter {0}, which is not supported (only m, t and p; a keyed hash or one with associated data cannot be verified here)"
    )]
    UnsupportedParameter(String),
    #[error("stored_hash {name} = {value} is above the ceiling {ceiling}")]
    AboveCeiling { name: &'static str, value: u64, ceiling: u32 },
}

/// A parsed stored hash, inside the ceilings and ready to compare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredHash {
    text: String,
    params: HashParams,
}

/// bcrypt's base64 alphabet (not RFC 4648's).
const BCRYPT_ALPHABET: &[u8] = b"./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

impl StoredHash {
    /// Parses `text` and checks it against `ceilings`, without hashing.
    ///
    /// # Errors
    /// [`HashError`] naming what is wrong: length, format, `$2x$`, a malformed field, or
    /// a cost above a ceiling.
    pub fn parse(text: &str, ceilings: &Ceilings) -> Result<Self, HashError> {
        if text.len() > MAX_STORED_HASH_BYTES {
            return Err(HashError::TooLong);
        }
        let params = if text.starts_with("$2") {
            parse_bcrypt(text, ceilings)?
        } else if text.starts_with("$argon2") {
            parse_argon2(text, ceilings)?
        } else {
            return Err(HashError::UnsupportedFormat);
        };
        Ok(Self { text: text.to_owned(), params })
    }

    /// The PHC or bcrypt string, as a gateway would store it.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The hash's algorithm and cost parameters.
    pub fn params(&self) -> HashParams {
        self.params
    }

    /// Compares `password` with this hash: the slow part, run on the CPU governor's pool.
    /// An argon2 comparison allocates its `m` KiB of working memory for this call only
    /// (see [`Self::matches_keeping`]).
    ///
    /// A bcrypt hash never matches a password over 72 bytes or with a NUL byte (bcrypt
    /// would silently truncate either); the same work is done before the rejection, so
    /// its time tells nothing.
    pub fn matches(&self, password: &[u8]) -> bool {
        self.matches_keeping(password, 0)
    }

    /// As [`Self::matches`], but an argon2 hash whose memory `m` is at most `keep_kib`
    /// KiB is computed in this thread's kept working memory ([`release_kept_memory`]),
    /// which grows to the largest such hash's block count (`m` rounded down to a multiple
    /// of 4 `p`) and is reused by the next comparison.
    ///
    /// Why: in the daemon, fresh working memory for every comparison cost nearly as much
    /// again as the comparison itself, in page faults and the zeroing of new pages
    /// (docs/performance-log.md; `cargo bench --bench verify_cost` measures it). The kept memory is wiped after every
    /// comparison: with t = 1 the first blocks of each lane would otherwise let anyone
    /// who reads the process's memory check a guess at the password for microseconds of
    /// work (RFC 9106, 3.2). Memory the system refuses is no match.
    ///
    /// The result is the `argon2` crate's: the output is recomputed with the PHC string's
    /// variant, version (0x13 when absent, as the crate does), parameters, salt and output
    /// length, and compared in constant time. Anything the crate refuses is no match.
    pub fn matches_keeping(&self, password: &[u8], keep_kib: u32) -> bool {
        match self.params {
            HashParams::Bcrypt { .. } => {
                let unusable = password.len() > BCRYPT_MAX_PASSWORD_BYTES || password.contains(&0);
                let usable = &password[..password.len().min(BCRYPT_MAX_PASSWORD_BYTES)];
                let matched = bcrypt::verify(usable, &self.text).unwrap_or(false);
                matched && !unusable
            }
            HashParams::Argon2 { memory_kib, .. } => match PasswordHash::new(&self.text) {
                Ok(hash) if memory_kib <= keep_kib => {
                    KEPT_MEMORY.with_borrow_mut(|kept| argon2_matches(&hash, password, Some(kept)))
                }
                Ok(hash) => argon2_matches(&hash, password, None),
                Err(_) => false,
            },
        }
    }

    /// Hashes `password` with `target` and a fresh random salt: used for the dummy hash
    /// an unknown account is compared against.
    ///
    /// # Errors
    /// A message when the hashing library refuses the parameters (validated earlier, so
    /// this is a start-up failure, never a request-time one).
    pub fn generate(password: &[u8], target: &HashParams) -> Result<Self, String> {
        let text = match *target {
            HashParams::Bcrypt { cost } => bcrypt::hash_with_result(password, cost)
                .map_err(|e| e.to_string())?
                .format_for_version(bcrypt::Version::TwoB),
            HashParams::Argon2 { algorithm, memory_kib, iterations, parallelism } => {
                use argon2::PasswordHasher;
                let params = argon2::Params::new(memory_kib, iterations, parallelism, None)
                    .map_err(|e| e.to_string())?;
                let variant = match algorithm {
                    Algorithm::Argon2i => argon2::Algorithm::Argon2i,
                    Algorithm::Argon2d => argon2::Algorithm::Argon2d,
                    _ => argon2::Algorithm::Argon2id,
                };
                let mut salt = [0u8; 16];
                getrandom::fill(&mut salt).map_err(|e| e.to_string())?;
                Argon2::new(variant, argon2::Version::V0x13, params)
                    .hash_password_with_salt(password, &salt)
                    .map_err(|e| e.to_string())?
                    .to_string()
            }
        };
        let unlimited = Ceilings {
            bcrypt_cost: 31,
            argon2_memory_kib: u32::MAX,
            argon2_iterations: u32::MAX,
            argon2_parallelism: u32::MAX,
        };
        Self::parse(&text, &unlimited).map_err(|e| e.to_string())
    }
}

thread_local! {
    /// This thread's kept argon2 working memory ([`StoredHash::matches_keeping`]).
    static KEPT_MEMORY: RefCell<Vec<Block>> = const { RefCell::new(Vec::new()) };
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

fn parse_bcrypt(text: &str, ceilings: &Ceilings) -> Result<HashParams, HashError> {
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

/// Longest argon2 salt and output accepted, in bytes: the limits of the `phc` crate that
/// parses PHC strings (RFC 9106 allows more; no common tool writes more: argon2-cffi,
/// libsodium and PHP default to 16 and 32).
pub const ARGON2_MAX_SALT_BYTES: usize = 48;
/// See [`ARGON2_MAX_SALT_BYTES`].
pub const ARGON2_MAX_OUTPUT_BYTES: usize = 64;

fn parse_argon2(text: &str, ceilings: &Ceilings) -> Result<HashParams, HashError> {
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

#[cfg(test)]
#[cfg(test)]
mod tests;
