//! `portcullis health`: ask the daemon's `grpc.health.v1` service; exit 0 only on SERVING
//! (the container image's health check).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use super::operator::TlsArgs;

#[derive(Args)]
pub struct HealthArgs {
    /// Daemon address.
    #[arg(long, env = "PORTCULLIS_ADDR", default_value = "http://127.0.0.1:50051")]
    addr: String,
    /// Service to ask about; `""` is the whole daemon.
    #[arg(long, default_value = "")]
    service: String,
    /// Deadline of the connection and the call.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    #[command(flatten)]
    tls: TlsArgs,
}

/// The health probe. Fail closed: only an explicit SERVING exits 0; NOT_SERVING, an
/// unknown status, an unknown service, a refused connection or a timeout exit non-zero.
pub async fn health(args: HealthArgs) -> ExitCode {
    use tonic_health::pb::health_check_response::ServingStatus;
    let daemon = super::operator::without_credentials(
        &super::operator::daemon_uri(&args.addr, args.tls.tls())
            .unwrap_or_else(|_| args.addr.clone()),
    );
    match check_health(args).await {
        Ok(status) if status == ServingStatus::Serving as i32 => {
            say!("SERVING");
            ExitCode::SUCCESS
        }
        Ok(status) => {
            let name = ServingStatus::try_from(status).map_or("UNKNOWN", |s| s.as_str_name());
            say!("{name}");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("portcullis: health: {}", super::output::report(&*e, &daemon));
            ExitCode::from(2)
        }
    }
}

async fn check_health(args: HealthArgs) -> Result<i32, Box<dyn std::error::Error>> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let mut client = HealthClient::new(args.tls.connect(&args.addr, args.timeout).await?);
    let answer = client.check(HealthCheckRequest { service: args.service }).await?;
    Ok(answer.into_inner().status)
}
