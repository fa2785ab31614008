//! What the operator commands print, and how their errors read.
//!
//! Standard output goes through [`say`]: a reader that closes the pipe early
//! (`portcullis inspect-network … | head -1`) ends the output quietly, and the command's
//! exit status stands (Rust ignores SIGPIPE, so `println!` would panic instead). `serve`
//! keeps SIGPIPE ignored: a daemon must never die because a peer or a log reader went
//! away; the operator commands do not restore the signal either, so the exit status
//! keeps its meaning (0 allow, 1 deny, 2 error) rather than becoming "killed by SIGPIPE".

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once standard output's reader has gone: the rest of the output is dropped.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Writes one line to standard output. A closed pipe drops this and every later line
/// quietly; any other write error (a full disk under a redirect) is reported and exits 2.
pub fn say(line: std::fmt::Arguments<'_>) {
    if CLOSED.load(Ordering::Relaxed) {
        return;
    }
    let mut out = std::io::stdout().lock();
    let written =
        out.write_fmt(line).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
    match written {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            CLOSED.store(true, Ordering::Relaxed);
        }
        Err(e) => {
            drop(out);
            eprintln!("portcullis: cannot write to standard output: {e}");
            std::process::exit(2);
        }
    }
}

/// An error of an operator command as one line: the whole chain, each cause once; a
/// call the daemon answered with an error says which daemon and what to do.
pub fn report(e: &(dyn std::error::Error + 'static), daemon: &str) -> String {
    let Some(status) = e.downcast_ref::<tonic::Status>() else {
        return portcullis::setting::error_chain(e);
    };
    use tonic::Code;
    let what = match status.code() {
        Code::Unauthenticated => {
            "; this daemon authorizes its callers: give --token-file, or --cert-file and \
             --key-file of a caller it knows"
        }
        Code::PermissionDenied => {
            "; the caller is known but may not make this call: grant it in the daemon's \
             [callers.NAME] permissions"
        }
        Code::DeadlineExceeded => "; no answer within --timeout: raise it, or see to the daemon",
        Code::Unavailable => {
            "; the daemon (or its store) cannot answer now: `portcullis health` says whether \
             it is serving, its log says why"
        }
        Code::Unimplemented => "; the daemon does not serve this call: is it an older version?",
        _ => "",
    };
    let mut text = format!(
        "the daemon at {daemon} answered {:?}: {}",
        status.code(),
        if status.message().is_empty() { status.code().description() } else { status.message() }
    );
    if let Some(source) = std::error::Error::source(status) {
        let cause = portcullis::setting::error_chain(source);
        if !text.contains(&cause) {
            text.push_str(" (");
            text.push_str(&cause);
            text.push(')');
        }
    }
    text.push_str(what);
    text
}
