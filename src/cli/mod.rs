//! The commands of the binary besides the dispatch: serving the daemon, the operator
//! client (its network commands in [`network_ops`], `verify` and `check-password` in
//! [`password_ops`], a realm's reports in [`reports`]), the health probe, the breach filter's
//! builder ([`breach`]). Each command's arguments live with it.

/// `println!` for the operator commands, quiet on a closed pipe ([`output::say`]).
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::output::say(format_args!($($arg)*))
    };
}

pub mod breach_filter;
pub mod health;
pub mod key_secret;
pub mod network_ops;
pub mod operator;
pub mod output;
pub mod password_ops;
pub mod reports;
pub mod serve_command;
