//! `[verify]` and `[realms.NAME.hash]`: the CPU budget, the cost ceilings of stored hashes
//! and a realm's hash target (docs/verify.md), with their defaults and ranges.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use smart_default::SmartDefault;

use super::VerifySettings;
use super::budget::BudgetSettings;
use super::hash::{Algorithm, Ceilings, HashParams, Prf};
use crate::setting::{Bound, ConfigError, Problems, between, check, check_noted};

/// `[verify]`: the per-daemon CPU budget (docs/verify.md).
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct VerifyConfig {
    /// Comparisons at once, and hashing threads. Default `max(1, cores / 2)`: half the
    /// machine stays free for everything else.
    pub max_concurrent: Option<usize>,
    /// Slots one client key may hold at once; excess calls wait for their own.
    #[default(1)]
    pub max_per_client: usize,
    /// Longest wait for a slot (never past the caller's deadline).
    #[default(Duration::from_secs(1))]
    #[serde(with = "humantime_serde")]
    pub max_wait: Duration,
    /// Most calls waiting for a slot. Default 8 × `max_concurrent`.
    pub max_waiters: Option<usize>,
    /// Most calls with a valid device token waiting in the trusted lane, apart from
    /// `max_waiters`, so a flood of untrusted calls cannot fill it. Default 8 ×
    /// `max_concurrent`.
    pub max_trusted_waiters: Option<usize>,
    /// Longest password accepted, in bytes.
    #[default(1024)]
    pub max_password_bytes: usize,
    /// Highest bcrypt cost factor a stored hash may have.
    #[default(14)]
    pub max_bcrypt_cost: u32,
    /// Highest argon2 memory a stored hash may ask for, in KiB.
    #[default(128 * 1024)]
    pub max_argon2_memory_kib: u32,
    /// Highest argon2 iterations.
    #[default(16)]
    pub max_argon2_iterations: u32,
    /// Highest argon2 lanes.
    #[default(8)]
    pub max_argon2_parallelism: u32,
    /// Highest PBKDF2 iteration count a stored hash may have (Django 5.2 writes
    /// 1,000,000, Django 6.0 1,200,000; OWASP asks 1,300,000 for HMAC-SHA-1).
    #[default(2_000_000)]
    pub max_pbkdf2_iterations: u32,
    /// Highest scrypt working memory (128 · r · (N + p + 1) bytes) a stored hash may ask
    /// for, in KiB. Default 129 MiB: OWASP's N = 2^17, r = 8 (128 MiB of V) and up to
    /// 1023 lanes of B.
    #[default(129 * 1024)]
    pub max_scrypt_memory_kib: u32,
    /// Highest scrypt parallelism `p` (Django writes 5; the lanes run one after another).
    #[default(16)]
    pub max_scrypt_parallelism: u32,
}

impl VerifyConfig {
    /// Range-checks the budget and ceilings; resolves the defaults that follow the
    /// machine (`max_concurrent`) and `max_concurrent` (the queues).
    ///
    /// # Errors
    /// [`ConfigError`] naming every setting out of its range.
    pub fn validate(&self) -> Result<VerifySettings, ConfigError> {
        let mut problems = Problems::default();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let max_concurrent = self.max_concurrent.unwrap_or((cores / 2).max(1));
        problems.note(check("verify.max_concurrent", max_concurrent, 1..=1024));
        problems.note(between(
            "verify.max_per_client",
            self.max_per_client,
            Bound::fixed(1),
            Bound::setting("max_concurrent", max_concurrent),
        ));
        problems.note(check(
            "verify.max_wait",
            self.max_wait,
            Duration::from_millis(1)..=Duration::from_secs(60),
        ));
        let max_waiters = self.max_waiters.unwrap_or(max_concurrent.saturating_mul(8));
        problems.note(check("verify.max_waiters", max_waiters, 0..=100_000));
        let max_trusted_waiters =
            self.max_trusted_waiters.unwrap_or(max_concurrent.saturating_mul(8));
        problems.note(check("verify.max_trusted_waiters", max_trusted_waiters, 0..=100_000));
        problems.note(check_noted(
            "verify.max_password_bytes",
            self.max_password_bytes,
            64..=65_536,
            "NIST SP 800-63B asks for at least 64 characters",
        ));
        problems.note(check("verify.max_bcrypt_cost", self.max_bcrypt_cost, 4..=31));
        problems.note(check(
            "verify.max_argon2_memory_kib",
            self.max_argon2_memory_kib,
            8..=4 * 1024 * 1024,
        ));
        problems.note(check("verify.max_argon2_iterations", self.max_argon2_iterations, 1..=1024));
        problems.note(check("verify.max_argon2_parallelism", self.max_argon2_parallelism, 1..=255));
        problems.note(check(
            "verify.max_pbkdf2_iterations",
            self.max_pbkdf2_iterations,
            1..=100_000_000,
        ));
        problems.note(check(
            "verify.max_scrypt_memory_kib",
            self.max_scrypt_memory_kib,
            1..=4 * 1024 * 1024,
        ));
        problems.note(check("verify.max_scrypt_parallelism", self.max_scrypt_parallelism, 1..=255));
        problems.finish(VerifySettings {
            budget: BudgetSettings {
                max_concurrent,
                max_per_client: self.max_per_client,
                max_wait: self.max_wait,
                max_waiters,
                max_trusted_waiters,
            },
            ceilings: self.ceilings(),
            max_password_bytes: self.max_password_bytes,
        })
    }

    /// The hash ceilings as written (what realms' targets are checked against, even
    /// when another `[verify]` value is out of range).
    pub fn ceilings(&self) -> Ceilings {
        Ceilings {
            bcrypt_cost: self.max_bcrypt_cost,
            argon2_memory_kib: self.max_argon2_memory_kib,
            argon2_iterations: self.max_argon2_iterations,
            argon2_parallelism: self.max_argon2_parallelism,
            pbkdf2_iterations: self.max_pbkdf2_iterations,
            scrypt_memory_kib: self.max_scrypt_memory_kib,
            scrypt_parallelism: self.max_scrypt_parallelism,
        }
    }
}

/// `[realms.NAME.hash]`: the realm's hash target, used for the dummy hash an unknown
/// account is compared against and for `needs_rehash`. Defaults are OWASP's first
/// choice (Password Storage Cheat Sheet): argon2id, m = 19 MiB, t = 2, p = 1. A realm
/// whose stored hashes are PBKDF2 or scrypt (a Django or Flask site) targets what its
/// framework writes, so an unknown identifier costs what a known one does.
#[derive(Debug, Clone, Serialize, Deserialize, SmartDefault)]
#[serde(default, deny_unknown_fields)]
pub struct HashTargetConfig {
    /// `argon2id`, `argon2i`, `argon2d`, `bcrypt`, `pbkdf2_sha256`, `pbkdf2_sha512` or
    /// `scrypt`.
    #[default(Algorithm::Argon2id)]
    pub algorithm: Algorithm,
    /// bcrypt cost factor (log2 of rounds), when `algorithm = "bcrypt"`.
    #[default(10)]
    pub bcrypt_cost: u32,
    /// argon2 memory in KiB.
    #[default(19 * 1024)]
    pub argon2_memory_kib: u32,
    /// argon2 iterations.
    #[default(2)]
    pub argon2_iterations: u32,
    /// argon2 lanes.
    #[default(1)]
    pub argon2_parallelism: u32,
    /// PBKDF2 iterations, when `algorithm` is `pbkdf2_sha256` or `pbkdf2_sha512`. Default
    /// OWASP's for HMAC-SHA-256 (600,000); a Django site sets its hasher's (1,000,000 in
    /// Django 5.2).
    #[default(600_000)]
    pub pbkdf2_iterations: u32,
    /// log2 of scrypt's N, when `algorithm = "scrypt"`. Default OWASP's (17).
    #[default(17)]
    pub scrypt_log_n: u8,
    /// scrypt block size `r`. Default OWASP's (8).
    #[default(8)]
    pub scrypt_r: u32,
    /// scrypt parallelism `p`. Default OWASP's (1).
    #[default(1)]
    pub scrypt_p: u32,
}

impl HashTargetConfig {
    /// The target of realm `realm`, checked against the `ceilings` stored hashes may
    /// reach (a target above them would refuse the realm's own hashes).
    ///
    /// # Errors
    /// [`ConfigError::OutOfRange`] naming `realms.NAME.hash.FIELD`.
    pub fn validate(&self, realm: &str, ceilings: &Ceilings) -> Result<HashParams, ConfigError> {
        let key = |field: &str| format!("realms.{realm}.hash.{field}");
        let mut problems = Problems::default();
        let target = match self.algorithm {
            Algorithm::Bcrypt => {
                problems.note(between(
                    &key("bcrypt_cost"),
                    self.bcrypt_cost,
                    Bound::fixed(4),
                    Bound::setting("verify.max_bcrypt_cost", ceilings.bcrypt_cost),
                ));
                HashParams::Bcrypt { cost: self.bcrypt_cost }
            }
            Algorithm::Pbkdf2Sha256 | Algorithm::Pbkdf2Sha512 => {
                problems.note(between(
                    &key("pbkdf2_iterations"),
                    self.pbkdf2_iterations,
                    Bound::fixed(1),
                    Bound::setting("verify.max_pbkdf2_iterations", ceilings.pbkdf2_iterations),
                ));
                let prf = if self.algorithm == Algorithm::Pbkdf2Sha512 {
                    Prf::Sha512
                } else {
                    Prf::Sha256
                };
                HashParams::Pbkdf2 { prf, iterations: self.pbkdf2_iterations }
            }
            Algorithm::Scrypt => {
                let target = HashParams::Scrypt {
                    log_n: self.scrypt_log_n,
                    r: self.scrypt_r,
                    p: self.scrypt_p,
                };
                problems.note(check(&key("scrypt_log_n"), self.scrypt_log_n, 1..=40));
                problems.note(check(&key("scrypt_r"), self.scrypt_r, 1..=1024));
                problems.note(between(
                    &key("scrypt_p"),
                    self.scrypt_p,
                    Bound::fixed(1),
                    Bound::setting("verify.max_scrypt_parallelism", ceilings.scrypt_parallelism),
                ));
                if (1..=40).contains(&self.scrypt_log_n) && (1..=1024).contains(&self.scrypt_r) {
                    problems.note(between(
                        &format!(
                            "the scrypt memory of realms.{realm}.hash \
                             (128 · scrypt_r · (2^scrypt_log_n + scrypt_p + 1) bytes, in KiB)"
                        ),
                        target.memory_kib(),
                        Bound::fixed(1),
                        Bound::setting(
                            "verify.max_scrypt_memory_kib",
                            u64::from(ceilings.scrypt_memory_kib),
                        ),
                    ));
                }
                target
            }
            algorithm => {
                problems.note(between(
                    &key("argon2_parallelism"),
                    self.argon2_parallelism,
                    Bound::fixed(1),
                    Bound::setting("verify.max_argon2_parallelism", ceilings.argon2_parallelism),
                ));
                problems.note(between(
                    &key("argon2_memory_kib"),
                    self.argon2_memory_kib,
                    Bound::setting(
                        "8 × argon2_parallelism",
                        self.argon2_parallelism.saturating_mul(8),
                    ),
                    Bound::setting("verify.max_argon2_memory_kib", ceilings.argon2_memory_kib),
                ));
                problems.note(between(
                    &key("argon2_iterations"),
                    self.argon2_iterations,
                    Bound::fixed(1),
                    Bound::setting("verify.max_argon2_iterations", ceilings.argon2_iterations),
                ));
                HashParams::Argon2 {
                    algorithm,
                    memory_kib: self.argon2_memory_kib,
                    iterations: self.argon2_iterations,
                    parallelism: self.argon2_parallelism,
                }
            }
        };
        problems.finish(target)
    }
}
