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
mod params;

pub use argon2_phc::{
    ARGON2_MAX_OUTPUT_BYTES, ARGON2_MAX_SALT_BYTES, kept_memory_kib, release_kept_memory,
};
pub use key_derivation::{KDF_MAX_SALT_BYTES, KDF_MIN_OUTPUT_BYTES, SCRYPT_MAX_OUTPUT_BYTES};

pub use params::{
    Algorithm, BCRYPT_MAX_PASSWORD_BYTES, Ceilings, HashError, HashParams, MAX_STORED_HASH_BYTES,
    Prf,
};

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
