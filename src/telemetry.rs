//! Logs: `tracing` to stderr, filtered by `RUST_LOG` (default `info`). No event carries
//! an identifier, password, hash or account key; the tests read the daemon's stderr to
//! hold that. Metrics go through the `metrics` facade (`portcullis_*` names, labels
//! limited to realm names and refusal reasons).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Call once, from `main`.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal, never in a file or the journal.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .init();
}
