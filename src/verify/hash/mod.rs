//! Stored password hashes: parsing, cost ceilings, comparison and the rehash rule
//! (docs/verify.md). Parsing does no hashing work, so a hash that
//! is malformed or above a ceiling is refused before any CPU is spent on it.
//!
//! Formats, one module per family, each compared by the RustCrypto (or `bcrypt`) crate
//! of its algorithm:
//! - `bcrypt_modular`: bcrypt `$2a$`, `$2b$`, `$2y$` (the buggy `$2x$` is refused), and
//!   Django's `bcrypt$` and `bcrypt_sha256$` forms;
//! - `argon2_phc`: argon2id, argon2i, argon2d PHC strings (versions 0x10 and 0x13) with
//!   any valid salt and output length, and Django's `argon2$` form;
//! - `key_derivation`: PBKDF2 (HMAC-SHA-1, -SHA-256, -SHA-512) and scrypt, as Django,
//!   Werkzeug, passlib and RustCrypto's PHC strings write them.

mod argon2_phc;
mod bcrypt_modular;
mod key_derivation;

pub use argon2_phc::{
    ARGON2_MAX_OUTPUT_BYTES, ARGON2_MAX_SALT_BYTES, kept_memory_kib, release_kept_memory,
};
pub use key_derivation::{KDF_MAX_SALT_BYTES, KDF_MIN_OUTPUT_BYTES, SCRYPT_MAX_OUTPUT_BYTES};

use serde::{Deserialize, Serialize};

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
    /// Highest PBKDF2 iteration count (any PRF).
    pub pbkdf2_iterations: u32,
    /// Highest scrypt working memory, 128 · r · (N + p + 1) bytes, in KiB.
    pub scrypt_memory_kib: u32,
    /// Highest scrypt parallelism (`p`; the crate runs its lanes one after another).
    pub scrypt_parallelism: u32,
}

impl Ceilings {
    /// No ceiling at all: for hashes this daemon makes itself from a validated target.
    pub const UNLIMITED: Ceilings = Ceilings {
        bcrypt_cost: 31,
        argon2_memory_kib: u32::MAX,
        argon2_iterations: u32::MAX,
        argon2_parallelism: u32::MAX,
        pbkdf2_iterations: u32::MAX,
        scrypt_memory_kib: u32::MAX,
        scrypt_parallelism: u32::MAX,
    };
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
    /// PBKDF2 with HMAC-SHA-256 (RFC 8018; Django's default hasher).
    Pbkdf2Sha256,
    /// PBKDF2 with HMAC-SHA-512.
    Pbkdf2Sha512,
    /// scrypt (RFC 7914).
    Scrypt,
}

/// The pseudorandom function of a PBKDF2 hash (RFC 8018, 5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prf {
    /// HMAC-SHA-1 (Django's `pbkdf2_sha1`, passlib's `$pbkdf2$`): verified, never a target.
    Sha1,
    /// HMAC-SHA-256.
    Sha256,
    /// HMAC-SHA-512.
    Sha512,
}

impl Prf {
    /// The PRF's output, in bytes: the longest derived key accepted for it.
    pub const fn output_bytes(self) -> usize {
        match self {
            Prf::Sha1 => 20,
            Prf::Sha256 => 32,
            Prf::Sha512 => 64,
        }
    }

    /// The PHC identifier (`pbkdf2`, `pbkdf2-sha256`, `pbkdf2-sha512`).
    pub const fn phc_id(self) -> &'static str {
        match self {
            Prf::Sha1 => "pbkdf2",
            Prf::Sha256 => "pbkdf2-sha256",
            Prf::Sha512 => "pbkdf2-sha512",
        }
    }
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
    /// PBKDF2.
    Pbkdf2 {
        /// The HMAC it iterates.
        prf: Prf,
        /// Iteration count.
        iterations: u32,
    },
    /// scrypt.
    Scrypt {
        /// log2 of N, the CPU/memory cost.
        log_n: u8,
        /// Block size (`r`).
        r: u32,
        /// Parallelism (`p`).
        p: u32,
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
            (
                HashParams::Pbkdf2 { prf, iterations },
                HashParams::Pbkdf2 { prf: want_prf, iterations: want },
            ) => prf != want_prf || iterations < want,
            (
                HashParams::Scrypt { log_n, r, p },
                HashParams::Scrypt { log_n: want_n, r: want_r, p: want_p },
            ) => log_n < want_n || r < want_r || p < want_p,
            _ => true,
        }
    }

    /// The working memory one comparison allocates, in KiB (0 for bcrypt and PBKDF2;
    /// scrypt: N + p + 1 blocks of 128 · r bytes, rounded up).
    pub fn memory_kib(&self) -> u64 {
        match *self {
            HashParams::Argon2 { memory_kib, .. } => u64::from(memory_kib),
            HashParams::Scrypt { log_n, r, p } => {
                let blocks = (1u128 << log_n.min(127)) + u128::from(p) + 1;
                let kib = (128 * u128::from(r) * blocks).div_ceil(1024);
                u64::try_from(kib).unwrap_or(u64::MAX)
            }
            HashParams::Bcrypt { .. } | HashParams::Pbkdf2 { .. } => 0,
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
        "stored_hash has an unsupported format: expected bcrypt ($2a$, $2b$, $2y$), an argon2, PBKDF2 or scrypt PHC string, or Django's, Werkzeug's or passlib's form of one"
    )]
    UnsupportedFormat,
    #[error("stored_hash uses bcrypt $2x$, which is not supported (buggy pre-2011 variant)")]
    Bcrypt2x,
    #[error("stored_hash is a malformed bcrypt hash: {0}")]
    MalformedBcrypt(&'static str),
    #[error("stored_hash is a malformed argon2 PHC string: {0}")]
    MalformedArgon2(String),
    #[error("stored_hash is a malformed PBKDF2 hash: {0}")]
    MalformedPbkdf2(&'static str),
    #[error("stored_hash is a malformed scrypt hash: {0}")]
    MalformedScrypt(&'static str),
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
    form: Form,
}

/// What a comparison needs of a parsed hash, beyond its parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    /// A bcrypt string (inside Django's wrapper when there is one); `sha256_prehash` for
    /// Django's `bcrypt_sha256$`.
    Bcrypt { modular: String, sha256_prehash: bool },
    /// An argon2 PHC string (Django's `argon2` prefix removed).
    Argon2 { phc: String },
    /// PBKDF2 or scrypt: the decoded salt and derived key.
    Derived(key_derivation::Derived),
}

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
        let bcrypt = |modular: &str, sha256_prehash: bool| {
            let params = bcrypt_modular::parse(modular, ceilings)?;
            Ok((params, Form::Bcrypt { modular: modular.to_owned(), sha256_prehash }))
        };
        let argon2 = |phc: &str| {
            let params = argon2_phc::parse(phc, ceilings)?;
            Ok::<_, HashError>((params, Form::Argon2 { phc: phc.to_owned() }))
        };
        let (params, form) = if text.starts_with("$2") {
            bcrypt(text, false)?
        } else if let Some(modular) = text.strip_prefix("bcrypt$") {
            // Django's BCryptPasswordHasher.
            bcrypt(modular, false)?
        } else if let Some(modular) = text.strip_prefix("bcrypt_sha256$") {
            // Django's BCryptSHA256PasswordHasher.
            bcrypt(modular, true)?
        } else if text.starts_with("$argon2") {
            argon2(text)?
        } else if let Some(phc) = text.strip_prefix("argon2").filter(|p| p.starts_with("$argon2")) {
            // Django's Argon2PasswordHasher: "argon2" before argon2-cffi's PHC string.
            argon2(phc)?
        } else if let Some((params, derived)) = key_derivation::parse(text, ceilings)? {
            (params, Form::Derived(derived))
        } else {
            return Err(HashError::UnsupportedFormat);
        };
        Ok(Self { text: text.to_owned(), params, form })
    }

    /// The stored hash as the gateway sent it.
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
    /// its time tells nothing. Django's `bcrypt_sha256$` hashes the password with SHA-256
    /// first, so any length matches whole.
    pub fn matches(&self, password: &[u8]) -> bool {
        self.matches_keeping(password, 0)
    }

    /// As [`Self::matches`], but an argon2 hash whose memory `m` is at most `keep_kib`
    /// KiB is computed in this thread's kept working memory ([`release_kept_memory`]),
    /// which grows to the largest such hash's block count (`m` rounded down to a multiple
    /// of 4 `p`) and is reused by the next comparison. Other algorithms ignore `keep_kib`.
    ///
    /// Why: in the daemon, fresh working memory for every comparison cost nearly as much
    /// again as the comparison itself, in page faults and the zeroing of new pages
    /// (docs/performance-log.md; `cargo bench --bench verify_cost` measures it). The kept memory is wiped after every
    /// comparison: with t = 1 the first blocks of each lane would otherwise let anyone
    /// who reads the process's memory check a guess at the password for microseconds of
    /// work (RFC 9106, 3.2). Memory the system refuses is no match.
    ///
    /// The result is the algorithm crate's: the output is recomputed with the stored
    /// hash's variant, version (argon2: 0x13 when absent, as the crate does), parameters,
    /// salt and output length, and compared in constant time. Anything the crate refuses
    /// is no match.
    pub fn matches_keeping(&self, password: &[u8], keep_kib: u32) -> bool {
        match (&self.form, self.params) {
            (Form::Bcrypt { modular, sha256_prehash }, _) => {
                bcrypt_modular::matches(modular, *sha256_prehash, password)
            }
            (Form::Argon2 { phc }, HashParams::Argon2 { memory_kib, .. }) => {
                argon2_phc::matches(phc, memory_kib, password, keep_kib)
            }
            (Form::Derived(derived), params) => key_derivation::matches(params, derived, password),
            // parse() pairs each form with its own parameters.
            (Form::Argon2 { .. }, _) => false,
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
            HashParams::Bcrypt { cost } => bcrypt_modular::generate(password, cost)?,
            HashParams::Argon2 { algorithm, memory_kib, iterations, parallelism } => {
                argon2_phc::generate(password, algorithm, memory_kib, iterations, parallelism)?
            }
            HashParams::Pbkdf2 { .. } | HashParams::Scrypt { .. } => {
                key_derivation::generate(password, *target)?
            }
        };
        Self::parse(&text, &Ceilings::UNLIMITED).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests;
