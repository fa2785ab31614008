//! `Verify`: password-hash comparison under the daemon's CPU budget.
//!
//! - [`hash`]: stored-hash parsing, ceilings, comparison, the rehash rule.
//! - [`budget`]: the CPU budget (global and per-client ceilings, bounded wait and queue).
//! - [`config`]: `[verify]` and `[realms.NAME.hash]`.
//!
//! [`Verifier`] ties them together: it owns each realm's dummy hash, made at start-up
//! with the realm's target, so an unknown account costs the same hash work as a known one.

pub mod budget;
pub mod config;
pub mod hash;

use std::collections::HashMap;
use std::sync::Arc;

use budget::{BudgetSettings, CpuBudget};
use hash::{Ceilings, HashError, HashParams, StoredHash};

/// Validated `[verify]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifySettings {
    /// The CPU budget.
    pub budget: BudgetSettings,
    /// Cost ceilings for stored hashes.
    pub ceilings: Ceilings,
    /// Longest password accepted, in bytes.
    pub max_password_bytes: usize,
}

/// Longest `client_key`, in bytes (an IPv6 address with zone, or a connection id).
pub const MAX_CLIENT_KEY_BYTES: usize = 256;

/// Why the verifier could not be built (a start-up failure).
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum VerifierError {
    #[error("the hashing thread pool could not start")]
    Pool(#[from] rayon::ThreadPoolBuildError),
    #[error("realm {realm}: the dummy hash could not be made: {reason}")]
    Dummy { realm: String, reason: String },
}

/// The realms' dummy hashes, the ceilings and the CPU budget.
pub struct Verifier {
    settings: VerifySettings,
    budget: Arc<CpuBudget>,
    /// One per realm, made with the realm's target from a random password nobody knows.
    dummies: HashMap<String, Arc<StoredHash>>,
}

/// One comparison, ready to run on the CPU budget's pool.
pub struct Comparison {
    hash: Arc<StoredHash>,
    /// `false` for an unknown account: the dummy hash is compared, and never accepted.
    known: bool,
    target: HashParams,
}

/// What a comparison found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    /// The password matched a real stored hash.
    pub matched: bool,
    /// Matched, and the hash is below the realm's target.
    pub needs_rehash: bool,
}

impl Verifier {
    /// Makes a dummy hash for each realm of `targets` (its name and hash target; slow by
    /// design: one hash per realm) and starts the CPU budget's pool.
    ///
    /// # Errors
    /// [`VerifierError`] when the pool cannot start or a dummy hash cannot be made.
    pub fn new<'a>(
        settings: VerifySettings,
        targets: impl IntoIterator<Item = (&'a str, &'a HashParams)>,
    ) -> Result<Self, VerifierError> {
        let mut dummies = HashMap::new();
        for (realm, target) in targets {
            let mut secret = [0u8; 32];
            let dummy = getrandom::fill(&mut secret)
                .map_err(|e| e.to_string())
                .and_then(|()| StoredHash::generate(&secret, target))
                .map_err(|reason| VerifierError::Dummy { realm: realm.to_owned(), reason })?;
            dummies.insert(realm.to_owned(), Arc::new(dummy));
        }
        Ok(Self { settings, budget: Arc::new(CpuBudget::new(settings.budget)?), dummies })
    }

    /// The settings in force.
    pub fn settings(&self) -> &VerifySettings {
        &self.settings
    }

    /// The CPU budget.
    pub fn budget(&self) -> &Arc<CpuBudget> {
        &self.budget
    }

    /// The dummy hash of `realm`, compared when an account does not exist.
    pub fn dummy(&self, realm: &str) -> Option<&StoredHash> {
        self.dummies.get(realm).map(|d| d.as_ref())
    }

    /// Parses `stored_hash` for realm `realm`, whose hash target is `target` (empty: the
    /// realm's dummy hash), without hashing.
    ///
    /// # Errors
    /// [`HashError`] for a malformed hash or one above the ceilings.
    pub fn prepare(
        &self,
        realm: &str,
        target: HashParams,
        stored_hash: &str,
    ) -> Result<Comparison, HashError> {
        let (hash, known) = if stored_hash.is_empty() {
            // Realms are fixed at start-up and each has a dummy; a missing one is a bug,
            // reported as an unsupported hash rather than a panic.
            let dummy = self.dummies.get(realm).ok_or(HashError::UnsupportedFormat)?;
            (dummy.clone(), false)
        } else {
            (Arc::new(StoredHash::parse(stored_hash, &self.settings.ceilings)?), true)
        };
        Ok(Comparison { hash, known, target })
    }
}

impl Comparison {
    /// Compares `password`: the slow part, for the CPU budget's pool. Runs in a
    /// `password_comparison` span, child of `parent` (the pool thread has no span of its
    /// own), naming the algorithm and its cost only, and records
    /// `portcullis_verify_comparison_seconds`.
    pub fn run(self, password: &[u8], parent: &tracing::Span) -> Outcome {
        let params = self.hash.params();
        let algorithm = algorithm_label(&params);
        let span = match params {
            // Only for the trace (crate::telemetry::traces::exporting).
            _ if !crate::telemetry::traces::exporting() => tracing::Span::none(),
            HashParams::Bcrypt { cost } => tracing::info_span!(
                parent: parent,
                "password_comparison",
                otel.name = "password_comparison",
                hash.algorithm = algorithm,
                hash.cost = cost,
            ),
            HashParams::Argon2 { memory_kib, iterations, parallelism, .. } => tracing::info_span!(
                parent: parent,
                "password_comparison",
                otel.name = "password_comparison",
                hash.algorithm = algorithm,
                hash.memory_kib = memory_kib,
                hash.iterations = iterations,
                hash.parallelism = parallelism,
            ),
            HashParams::Pbkdf2 { iterations, .. } => tracing::info_span!(
                parent: parent,
                "password_comparison",
                otel.name = "password_comparison",
                hash.algorithm = algorithm,
                hash.iterations = iterations,
            ),
            HashParams::Scrypt { r, p, .. } => tracing::info_span!(
                parent: parent,
                "password_comparison",
                otel.name = "password_comparison",
                hash.algorithm = algorithm,
                hash.memory_kib = params.memory_kib(),
                hash.block_size = r,
                hash.parallelism = p,
            ),
        };
        let _entered = span.enter();
        let started = std::time::Instant::now();
        // The realm's target bounds the working memory a hashing thread keeps.
        let keep_kib = match self.target {
            HashParams::Argon2 { memory_kib, .. } => memory_kib,
            _ => 0,
        };
        let matched = self.hash.matches_keeping(password, keep_kib) && self.known;
        metrics::histogram!(crate::telemetry::metrics::COMPARISON_SECONDS, "algorithm" => algorithm)
            .record(started.elapsed().as_secs_f64());
        Outcome { matched, needs_rehash: matched && params.below(&self.target) }
    }
}

/// The algorithm's name as a metric label and span attribute.
fn algorithm_label(params: &HashParams) -> &'static str {
    match params {
        HashParams::Bcrypt { .. } => "bcrypt",
        HashParams::Argon2 { algorithm: hash::Algorithm::Argon2i, .. } => "argon2i",
        HashParams::Argon2 { algorithm: hash::Algorithm::Argon2d, .. } => "argon2d",
        HashParams::Argon2 { .. } => "argon2id",
        HashParams::Pbkdf2 { prf: hash::Prf::Sha1, .. } => "pbkdf2_sha1",
        HashParams::Pbkdf2 { prf: hash::Prf::Sha256, .. } => "pbkdf2_sha256",
        HashParams::Pbkdf2 { prf: hash::Prf::Sha512, .. } => "pbkdf2_sha512",
        HashParams::Scrypt { .. } => "scrypt",
    }
}
