//! `inspect-network` and `release-network`: an operator's look at a client network's
//! bucket and its release (`portcullis.v1.Admin/InspectNetwork`, `ReleaseNetwork`;
//! docs/throttle.md, "Per client network").

use std::process::ExitCode;

use clap::Args;

use super::operator::DaemonArgs;
use portcullis::pb::admin_client::AdminClient;
use portcullis::pb::{InspectNetworkRequest, ReleaseNetworkRequest};

#[derive(Args)]
pub struct NetworkArgs {
    /// Realm name.
    #[arg(long)]
    realm: String,
    /// The client key as gateways send it (an IP address, say); `-` reads it from
    /// standard input.
    #[arg(long)]
    client_key: String,
    /// `release-network` only: why, a ticket reference (logged by the daemon and put in
    /// its security event with the caller's name; at most 256 bytes, no identifier).
    #[arg(long, default_value = "")]
    note: String,
    #[command(flatten)]
    daemon: DaemonArgs,
}

/// `inspect-network` prints the bucket (tokens, capacity, seconds until full, the tag log
/// lines name it by); exit 0 with a token left (or trusted), 1 when empty, 2 on an error.
/// `release-network` prints `released`, exit 0.
pub async fn network(args: NetworkArgs, release: bool) -> ExitCode {
    let daemon = args.daemon.shown();
    match call(args, release).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("portcullis: {}", super::output::report(&*e, &daemon));
            ExitCode::from(2)
        }
    }
}

async fn call(args: NetworkArgs, release: bool) -> Result<bool, Box<dyn std::error::Error>> {
    let client_key = if args.client_key == "-" {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        line.trim_end_matches(['\r', '\n']).to_owned()
    } else {
        args.client_key
    };
    if !release && !args.note.is_empty() {
        return Err("--note applies to release-network only".into());
    }
    let (channel, bearer) = args.daemon.connect().await?;
    let mut client = AdminClient::with_interceptor(channel, bearer);
    if release {
        let request = ReleaseNetworkRequest { realm: args.realm, client_key, note: args.note };
        client.release_network(request).await?;
        say!("released");
        return Ok(true);
    }
    let r = client
        .inspect_network(InspectNetworkRequest { realm: args.realm, client_key })
        .await?
        .into_inner();
    say!(
        "tokens: {}\ncapacity: {}\nseconds_until_full: {}\nnetwork: {}\ntrusted: {}",
        r.tokens,
        r.capacity,
        r.seconds_until_full,
        if r.network.is_empty() { "-" } else { &r.network },
        r.trusted
    );
    Ok(r.trusted || r.tokens > 0)
}
