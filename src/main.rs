//! The `portcullis` binary: the command line and its dispatch. `portcullis serve` runs
//! the daemon (`cli::serve`); the other commands are a small operator client
//! (`cli::operator`) and the health probe of container images (`cli::health`).

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use cli::operator::Op;

/// jemalloc, whose background thread hands freed memory back to the OS within about a
/// second: under glibc malloc most of a flood's peak stayed resident after it ended
/// (docs/performance-log.md; `cargo bench --bench verify_flood` measures it).
#[cfg(all(unix, not(target_env = "musl")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read at start-up (the `_rjem_` prefix is tikv-jemallocator's):
/// purge dirty and muzzy pages after 1 s, from a background thread.
#[cfg(all(unix, not(target_env = "musl")))]
// The binary's one unsafe item (the workspace denies `unsafe_code`): jemalloc reads its
// options from this symbol, which nothing else exports.
#[allow(non_upper_case_globals, unsafe_code)]
#[unsafe(export_name = "_rjem_malloc_conf")]
pub static malloc_conf: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:1000\0";

#[derive(Parser)]
#[command(version, about = "Portcullis: per-account login throttle for a fleet of gateways")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the gRPC API until SIGTERM or SIGINT.
    Serve(cli::serve_command::ServeArgs),
    /// Validate a configuration file without serving.
    CheckConfig {
        /// The TOML file.
        file: PathBuf,
    },
    /// Ask whether an account key's door is open (never counts).
    Admit(cli::operator::OperatorArgs),
    /// Count one attempt and print whether it may proceed.
    Attempt {
        #[command(flatten)]
        op: cli::operator::OperatorArgs,
        /// Idempotency id; a retry with the same id counts once.
        #[arg(long, default_value = "")]
        attempt_id: String,
    },
    /// Clear an account key's record.
    Clear {
        #[command(flatten)]
        op: cli::operator::OperatorArgs,
        /// Why the record is cleared.
        #[arg(long, value_enum)]
        reason: cli::operator::Reason,
    },
    /// Compare a password with a stored hash through the daemon (portcullis.v1.Governor/Verify,
    /// counted like a gateway's login). The password is read from standard input (one line),
    /// or asked for without echo when standard input is a terminal; never from a flag.
    /// Exit status: 0 accept, 1 reject, 2 error.
    Verify(cli::password_ops::VerifyArgs),
    /// Screen a new password (portcullis.v1.Governor/CheckPassword: breach filter, context
    /// words). The password is read as for `verify`. Exit status: 0 ok, 1 refused, 2 error.
    CheckPassword(cli::password_ops::CheckPasswordArgs),
    /// Operator: show an account key's lockout state (portcullis.v1.Admin/Inspect).
    Inspect(cli::operator::OperatorArgs),
    /// Operator: clear an account key's record (portcullis.v1.Admin/Unlock).
    Unlock {
        #[command(flatten)]
        op: cli::operator::OperatorArgs,
        /// Why the operator unlocks it (logged by the daemon with the caller's name).
        #[arg(long, value_enum)]
        reason: cli::operator::UnlockReason,
        #[command(flatten)]
        note: cli::operator::NoteArgs,
    },
    /// Operator: revoke every device token of an account (portcullis.v1.Admin/RevokeDevices).
    RevokeDevices {
        #[command(flatten)]
        op: cli::operator::OperatorArgs,
        #[command(flatten)]
        note: cli::operator::NoteArgs,
    },
    /// Operator: a client network's bucket in a realm (portcullis.v1.Admin/InspectNetwork).
    /// Exit status: 0 a token left (or trusted), 1 throttled, 2 error.
    InspectNetwork(cli::network_ops::NetworkArgs),
    /// Operator: fill a client network's bucket (portcullis.v1.Admin/ReleaseNetwork).
    ReleaseNetwork(cli::network_ops::NetworkArgs),
    /// Operator: a realm's password-spray state (portcullis.v1.Admin/SprayStatus).
    /// Exit status: 0 no fingerprint over the threshold, 1 spraying now, 2 error.
    SprayStatus(cli::operator::RealmArgs),
    /// Operator: a realm's status, fleet-wide (portcullis.v1.Admin/RealmStatus): accounts
    /// locked, at the ceiling, on grace logins; throttled networks; spraying; challenges;
    /// each flow's refusals. Read from the store, so every daemon answers the same.
    /// Exit status: 0 done, 2 error.
    Status(cli::operator::RealmArgs),
    /// Operator: what the realm's candidate policy ([realms.NAME.candidate]) would have
    /// done beside the enforced one since its first count (portcullis.v1.Admin/CandidateReport):
    /// attempts it would have refused, real users among them, guesses it would have
    /// stopped. Exit status: 0 done, 1 no candidate in the realm, 2 error.
    CandidateReport(cli::operator::RealmArgs),
    /// Operator: the configuration the daemon runs, as JSON (portcullis.v1.Admin/EffectiveConfig):
    /// every setting with its default, the file's SHA-256 and load time, the sections
    /// pending a restart; secrets named, never shown. Exit status: 0 done, 2 error.
    ConfigDump(cli::operator::ConfigDumpArgs),
    /// Ask the daemon's grpc.health.v1 service; exit 0 only on SERVING (a container
    /// HEALTHCHECK). Exit status: 0 serving, 1 not serving, 2 error.
    Health(cli::health::HealthArgs),
    /// Operator: make the store's key secret the configured one, forgetting every count
    /// kept under the old one (docs/store.md, "One key secret per store"). Reads the
    /// store and the secret as `serve` does. Exit status: 0 done, 2 error.
    AdoptKeySecret(cli::key_secret::AdoptArgs),
    /// The breached-password filter (docs/breach.md).
    BreachFilter {
        #[command(subcommand)]
        command: cli::breach_filter::BreachCommand,
    },
}

fn main() -> ExitCode {
    // `serve`: the signal handlers before anything slow (the command line, the
    // configuration file, the runtime), so a SIGHUP just after exec never ends the daemon
    // and a SIGTERM then is kept until it serves. The other commands keep the default
    // actions (a SIGTERM ends an operator command at once).
    let early = std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "serve")
        .then(cli::serve_command::EarlySignals::install);
    let cli = Cli::parse();
    let command = match cli.command {
        // The daemon makes its own runtime, from its configuration (`server.io_threads`).
        Command::Serve(args) => {
            let early = early.unwrap_or_else(cli::serve_command::EarlySignals::install);
            return cli::serve_command::serve(args, early);
        }
        Command::CheckConfig { file } => return cli::serve_command::check_config(&file),
        Command::BreachFilter { command } => return cli::breach_filter::breach_filter(command),
        other => other,
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("portcullis: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async move {
        match command {
            Command::Admit(op) => cli::operator::operate(op, Op::Admit).await,
            Command::Attempt { op, attempt_id } => {
                cli::operator::operate(op, Op::Attempt(attempt_id)).await
            }
            Command::Clear { op, reason } => cli::operator::operate(op, Op::Clear(reason)).await,
            Command::Verify(args) => cli::password_ops::verify(args).await,
            Command::CheckPassword(args) => cli::password_ops::check_password(args).await,
            Command::Inspect(op) => cli::operator::operate(op, Op::Inspect).await,
            Command::Unlock { op, reason, note } => {
                cli::operator::operate(op, Op::Unlock(reason, note.note)).await
            }
            Command::RevokeDevices { op, note } => {
                cli::operator::operate(op, Op::RevokeDevices(note.note)).await
            }
            Command::SprayStatus(args) => cli::operator::spray_status(args).await,
            Command::Status(args) => cli::reports::status(args).await,
            Command::CandidateReport(args) => cli::reports::candidate_report(args).await,
            Command::ConfigDump(args) => cli::operator::config_dump(args).await,
            Command::InspectNetwork(args) => cli::network_ops::network(args, false).await,
            Command::ReleaseNetwork(args) => cli::network_ops::network(args, true).await,
            Command::Health(args) => cli::health::health(args).await,
            Command::AdoptKeySecret(args) => cli::key_secret::adopt_key_secret(args).await,
            Command::Serve(_) | Command::CheckConfig { .. } | Command::BreachFilter { .. } => {
                unreachable!("dispatched above")
            }
        }
    })
}
