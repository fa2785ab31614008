//! `portcullis breach-filter build`: the breached-password filter from a
//! Pwned-Passwords-format corpus (docs/breach.md, "Building the filter").

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use portcullis::defence::breach::FALSE_POSITIVE_RATE;
use portcullis::defence::breach::build::{BuildOptions, build};

/// `portcullis breach-filter …`.
#[derive(Subcommand)]
pub enum BreachCommand {
    /// Build a filter file from a corpus of SHA-1 hex lines (`HASH` or `HASH:count`,
    /// sorted or not), streaming. Exit status: 0 built, 2 error.
    Build(BuildArgs),
}

/// `portcullis breach-filter build`.
#[derive(Args)]
pub struct BuildArgs {
    /// The corpus (Pwned Passwords SHA-1 format).
    #[arg(long)]
    from: PathBuf,
    /// The filter file to write (replaced whole when the build is complete).
    #[arg(long)]
    out: PathBuf,
    /// Leave out lines whose count is below this (a line without a count counts 1).
    #[arg(long, default_value_t = 0)]
    min_count: u64,
}

/// Runs a `breach-filter` command; progress on standard error when it is a terminal.
pub fn breach_filter(command: BreachCommand) -> ExitCode {
    let BreachCommand::Build(args) = command;
    let options =
        BuildOptions { min_count: args.min_count, progress: std::io::stderr().is_terminal() };
    match build(&args.from, &args.out, &options) {
        Ok(built) => {
            say!(
                "{}: {} entries from {} lines ({} below --min-count), {} bytes ({:.2} bytes an entry), false-positive rate 1 in {:.0}, in {:.1} s",
                args.out.display(),
                built.entries,
                built.lines,
                built.below_min_count,
                built.bytes,
                built.bytes as f64 / built.entries.max(1) as f64,
                1.0 / FALSE_POSITIVE_RATE,
                built.took.as_secs_f64(),
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("portcullis: breach-filter build: {e}");
            ExitCode::from(2)
        }
    }
}
