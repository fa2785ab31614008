//! `verify` and `check-password`: an operator's `Verify` and `CheckPassword`
//! (`portcullis.v1.Governor`; docs/verify.md, docs/breach.md). The password comes from
//! standard input (one line, its newline removed) or, when standard input is a terminal,
//! from a prompt that does not echo; never from a flag, so it stays out of the process
//! list and shell history. Exit status: 0 accept (or an acceptable password), 1 reject
//! (or a refused password), 2 error; any error is an error, never an accept.

use std::io::{BufRead, IsTerminal};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args};
use zeroize::Zeroizing;

use super::operator::DaemonArgs;
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{Account, CheckPasswordRequest, PasswordCheckReason, Verdict, VerifyRequest};

/// The account whose password is verified or checked.
#[derive(Args)]
pub struct AccountArgs {
    /// Realm name.
    #[arg(long)]
    realm: String,
    /// The account identifier as a user would type it; `-` reads it from the first line
    /// of standard input (the password is then the second line).
    #[arg(long)]
    identifier: String,
}

#[derive(Args)]
#[command(group(ArgGroup::new("hash").required(true).args(["stored_hash", "stored_hash_file"])))]
pub struct VerifyArgs {
    #[command(flatten)]
    account: AccountArgs,
    /// The account's stored hash (bcrypt or an argon2 PHC string); `''` for an account
    /// that does not exist (compared with a dummy hash, always a reject).
    #[arg(long)]
    stored_hash: Option<String>,
    /// A file holding the stored hash (its trailing newline removed).
    #[arg(long)]
    stored_hash_file: Option<PathBuf>,
    /// The end client's address or identity, as a gateway sends it (required by the
    /// daemon: the CPU budget and the throttle per client network use it).
    #[arg(long)]
    client_key: String,
    /// A device token an earlier accept of this account returned (docs/devices.md).
    #[arg(long)]
    device_token: Option<String>,
    /// Idempotency id; a retry with the same id counts once. Empty: not deduplicated.
    #[arg(long, default_value = "")]
    attempt_id: String,
    /// Print the device token an accept issues (by default only whether one was).
    #[arg(long)]
    show_device_token: bool,
    #[command(flatten)]
    daemon: DaemonArgs,
}

#[derive(Args)]
pub struct CheckPasswordArgs {
    #[command(flatten)]
    account: AccountArgs,
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// `verify`: prints the verdict (`ACCEPT`, `REJECT`, `CHALLENGE` or `CHANGE_REQUIRED`)
/// and the answer's signals; exit 0 on an accept, 1 on anything else (a reject, a
/// challenge, a change requirement, a verdict this version does not know), 2 on an
/// error.
pub async fn verify(args: VerifyArgs) -> ExitCode {
    let daemon = args.daemon.shown();
    exit(verify_call(args).await, &daemon)
}

/// `check-password`: prints the reason (`ok`, `breached`, `context-word`); exit 0 when
/// the password is acceptable, 1 when it is refused, 2 on an error (no breach filter
/// configured among them: the check was not made).
pub async fn check_password(args: CheckPasswordArgs) -> ExitCode {
    let daemon = args.daemon.shown();
    exit(check_password_call(args).await, &daemon)
}

fn exit(result: Result<bool, Box<dyn std::error::Error>>, daemon: &str) -> ExitCode {
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("portcullis: {}", super::output::report(&*e, daemon));
            ExitCode::from(2)
        }
    }
}

async fn verify_call(args: VerifyArgs) -> Result<bool, Box<dyn std::error::Error>> {
    let stored_hash = match (args.stored_hash, &args.stored_hash_file) {
        (Some(hash), _) => hash,
        (None, Some(path)) => read_stored_hash(path)?,
        (None, None) => unreachable!("clap requires one of them"),
    };
    let (account, password) = read_account_and_password(args.account)?;
    let (channel, bearer) = args.daemon.connect().await?;
    let mut client = GovernorClient::with_interceptor(channel, bearer);
    let mut request = VerifyRequest {
        account: Some(account),
        password: password.as_bytes().to_vec(),
        stored_hash,
        client_key: args.client_key,
        attempt_id: args.attempt_id,
        device_token: args.device_token.unwrap_or_default(),
    };
    let answer = client.verify(request.clone()).await;
    zeroize::Zeroize::zeroize(&mut request.password);
    let r = answer?.into_inner();
    // Anything but an explicit ACCEPT, including values this version does not know, is a
    // reject; a challenge and a change requirement are named (neither is an accept).
    let accepted = r.verdict == Verdict::Accept as i32;
    let shown = match Verdict::try_from(r.verdict) {
        Ok(Verdict::Accept) => "ACCEPT",
        Ok(Verdict::Challenge) => "CHALLENGE",
        Ok(Verdict::ChangeRequired) => "CHANGE_REQUIRED",
        _ => "REJECT",
    };
    let device_token = match (r.device_token.is_empty(), args.show_device_token) {
        (true, _) => "none".to_owned(),
        (false, true) => r.device_token.clone(),
        (false, false) => "issued (--show-device-token prints it)".to_owned(),
    };
    say!(
        "{}\nneeds_rehash: {}\ndevice_token: {device_token}\nspray_suspected: {}\nstep_up: {}\nnetwork_throttled: {}\npassword_breached: {}",
        shown,
        r.needs_rehash,
        r.spray_suspected,
        r.step_up,
        r.network_throttled,
        r.password_breached
    );
    Ok(accepted)
}

async fn check_password_call(args: CheckPasswordArgs) -> Result<bool, Box<dyn std::error::Error>> {
    let (account, password) = read_account_and_password(args.account)?;
    let (channel, bearer) = args.daemon.connect().await?;
    let mut client = GovernorClient::with_interceptor(channel, bearer);
    let mut request =
        CheckPasswordRequest { account: Some(account), password: password.as_bytes().to_vec() };
    let answer = client.check_password(request.clone()).await;
    zeroize::Zeroize::zeroize(&mut request.password);
    let reason = answer?.into_inner().reason;
    // Only OK accepts; UNSPECIFIED and values this version does not know refuse.
    let (text, acceptable) = match PasswordCheckReason::try_from(reason) {
        Ok(PasswordCheckReason::Ok) => ("ok".to_owned(), true),
        Ok(PasswordCheckReason::Breached) => ("breached".to_owned(), false),
        Ok(PasswordCheckReason::ContextWord) => ("context-word".to_owned(), false),
        Ok(PasswordCheckReason::Unspecified) | Err(_) => {
            (format!("refused (reason {reason}, unknown to this version)"), false)
        }
    };
    say!("{text}");
    Ok(acceptable)
}

/// The stored hash in `path`, its trailing line end removed.
fn read_stored_hash(path: &std::path::Path) -> Result<String, Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--stored-hash-file {}: {e}", path.display()))?;
    Ok(text.trim_end_matches(['\r', '\n']).to_owned())
}

/// The account, and the password: one line of standard input (after the identifier's,
/// with `--identifier -`), or a prompt without echo when standard input is a terminal.
fn read_account_and_password(
    args: AccountArgs,
) -> Result<(Account, Zeroizing<String>), Box<dyn std::error::Error>> {
    let stdin = std::io::stdin();
    let identifier = if args.identifier == "-" {
        read_line(&mut stdin.lock())?
            .map(|line| line.to_string())
            .ok_or("--identifier -: standard input is empty (give the identifier's line)")?
    } else {
        args.identifier
    };
    let password = if stdin.is_terminal() {
        Zeroizing::new(
            rpassword::prompt_password("password: ")
                .map_err(|e| format!("cannot read the password from the terminal: {e}"))?,
        )
    } else {
        read_line(&mut stdin.lock())?.ok_or(
            "no password on standard input: give it as one line (printf '%s\\n' …), or run \
             the command in a terminal to be asked for it",
        )?
    };
    Ok((Account { realm: args.realm, identifier }, password))
}

/// One line of `input` without its line end (`\n` or `\r\n`); `None` at end of input.
fn read_line(input: &mut impl BufRead) -> Result<Option<Zeroizing<String>>, std::io::Error> {
    let mut line = Zeroizing::new(String::new());
    if input.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    if line.ends_with('\n') {
        line.pop();
        if line.ends_with('\r') {
            line.pop();
        }
    }
    Ok(Some(line))
}

#[cfg(test)]
mod tests {
    use super::read_line;

    #[test]
    fn a_line_loses_its_line_end_and_nothing_else() {
        let mut input: &[u8] = b" pass word \r\nsecond\nlast";
        let lines: Vec<_> =
            std::iter::from_fn(|| read_line(&mut input).unwrap()).map(|l| l.to_string()).collect();
        assert_eq!(lines, [" pass word ", "second", "last"]);
        let mut empty: &[u8] = b"";
        assert!(read_line(&mut empty).unwrap().is_none());
        let mut blank: &[u8] = b"\n";
        assert_eq!(read_line(&mut blank).unwrap().as_deref().map(String::as_str), Some(""));
    }
}
