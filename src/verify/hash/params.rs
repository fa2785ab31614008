//! What a stored hash says once parsed: its algorithm and cost parameters, the ceilings
//! they are checked against, and why a hash is refused. Every format module parses into
//! these; none of them does any hashing work.

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
