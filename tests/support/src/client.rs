//! Test clients of the daemon: a thin gRPC client with a deadline on every call, a
//! caller's Governor and Admin clients (TLS, bearer tokens), raw HTTP/2 requests.

use std::net::SocketAddr;
use std::time::Duration;

use portcullis::client::Bearer;
use portcullis::pb::admin_client::AdminClient;
use portcullis::pb::governor_client::GovernorClient;
use portcullis::pb::{
    Account, AdmitRequest, ClearAttemptsRequest, Decision, RecordAttemptRequest,
    RecordAttemptResponse, VerifyRequest, VerifyResponse,
};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// A thin test client with a deadline on every call, so a hung daemon fails the test
/// instead of hanging it.
#[derive(Clone)]
pub struct Client(pub GovernorClient<Channel>);

/// Deadline of every test call.
pub const CALL_DEADLINE: Duration = Duration::from_secs(5);

impl Client {
    pub async fn connect(addr: SocketAddr) -> Self {
        Self::connect_with(addr, None).await
    }

    /// As [`Self::connect`], from the local address `from` (e.g. 127.0.0.2: another
    /// caller than the ones on 127.0.0.1).
    pub async fn connect_from(addr: SocketAddr, from: std::net::IpAddr) -> Self {
        Self::connect_with(addr, Some(from)).await
    }

    async fn connect_with(addr: SocketAddr, from: Option<std::net::IpAddr>) -> Self {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .timeout(CALL_DEADLINE)
            .connect_timeout(CALL_DEADLINE)
            .local_address(from)
            .connect()
            .await
            .expect("connect to daemon");
        Self(GovernorClient::new(channel))
    }

    pub async fn attempt(
        &mut self,
        realm: &str,
        identifier: &str,
    ) -> Result<Decision, tonic::Status> {
        self.attempt_with_id(realm, identifier, "").await
    }

    pub async fn attempt_with_id(
        &mut self,
        realm: &str,
        identifier: &str,
        attempt_id: &str,
    ) -> Result<Decision, tonic::Status> {
        let req = RecordAttemptRequest {
            account: account(realm, identifier),
            attempt_id: attempt_id.into(),
            client_key: String::new(),
        };
        let d = self.0.record_attempt(req).await?.into_inner().decision;
        Ok(Decision::try_from(d).expect("daemon sent a known decision"))
    }

    /// `RecordAttempt` from `client_key` (the throttle per client network); the whole
    /// response.
    pub async fn attempt_from(
        &mut self,
        realm: &str,
        identifier: &str,
        client_key: &str,
    ) -> Result<RecordAttemptResponse, tonic::Status> {
        let req = RecordAttemptRequest {
            account: account(realm, identifier),
            attempt_id: uuid::Uuid::new_v4().to_string(),
            client_key: client_key.into(),
        };
        Ok(self.0.record_attempt(req).await?.into_inner())
    }

    /// `ClearAttempts` naming `client_key` (its network's token is given back on
    /// `CLEAR_REASON_PASSWORD_VERIFIED`).
    pub async fn clear_from(
        &mut self,
        realm: &str,
        identifier: &str,
        reason: i32,
        client_key: &str,
    ) -> Result<(), tonic::Status> {
        let req = ClearAttemptsRequest {
            account: account(realm, identifier),
            reason,
            client_key: client_key.into(),
        };
        self.0.clear_attempts(req).await.map(drop)
    }

    pub async fn admit(
        &mut self,
        realm: &str,
        identifier: &str,
    ) -> Result<Decision, tonic::Status> {
        let d = self
            .0
            .admit(AdmitRequest { account: account(realm, identifier) })
            .await?
            .into_inner()
            .decision;
        Ok(Decision::try_from(d).expect("daemon sent a known decision"))
    }

    /// `Verify` with a fresh attempt id; returns the whole response.
    pub async fn verify(
        &mut self,
        realm: &str,
        identifier: &str,
        password: &[u8],
        stored_hash: &str,
        client_key: &str,
    ) -> Result<VerifyResponse, tonic::Status> {
        self.verify_with_device(realm, identifier, password, stored_hash, client_key, "").await
    }

    /// `verify` carrying `device_token` (empty: none).
    pub async fn verify_with_device(
        &mut self,
        realm: &str,
        identifier: &str,
        password: &[u8],
        stored_hash: &str,
        client_key: &str,
        device_token: &str,
    ) -> Result<VerifyResponse, tonic::Status> {
        let req = VerifyRequest {
            account: account(realm, identifier),
            password: password.to_vec(),
            stored_hash: stored_hash.into(),
            client_key: client_key.into(),
            attempt_id: uuid::Uuid::new_v4().to_string(),
            device_token: device_token.into(),
        };
        Ok(self.0.verify(req).await?.into_inner())
    }

    pub async fn clear(
        &mut self,
        realm: &str,
        identifier: &str,
        reason: i32,
    ) -> Result<(), tonic::Status> {
        self.clear_from(realm, identifier, reason, "").await
    }
}

pub fn account(realm: &str, identifier: &str) -> Option<Account> {
    Some(Account { realm: realm.into(), identifier: identifier.into() })
}

/// A caller's two clients (Governor, Admin) on one channel, with an optional bearer
/// token, over TLS when `tls` is given (to `https://localhost:PORT`).
pub struct Caller {
    pub governor: GovernorClient<InterceptedService<Channel, Bearer>>,
    pub admin: AdminClient<InterceptedService<Channel, Bearer>>,
}

pub async fn caller(
    addr: SocketAddr,
    tls: Option<tonic::transport::ClientTlsConfig>,
    token: Option<&str>,
) -> Result<Caller, tonic::transport::Error> {
    let url = match &tls {
        Some(_) => format!("https://localhost:{}", addr.port()),
        None => format!("http://{addr}"),
    };
    let mut endpoint = tonic::transport::Endpoint::from_shared(url)
        .unwrap()
        .timeout(CALL_DEADLINE)
        .connect_timeout(CALL_DEADLINE);
    if let Some(tls) = tls {
        endpoint = endpoint.tls_config(tls)?;
    }
    let channel = endpoint.connect().await?;
    let bearer = Bearer::new(token).unwrap();
    Ok(Caller {
        governor: GovernorClient::with_interceptor(channel.clone(), bearer.clone()),
        admin: AdminClient::with_interceptor(channel, bearer),
    })
}

impl Caller {
    pub async fn attempt(
        &mut self,
        realm: &str,
        identifier: &str,
    ) -> Result<Decision, tonic::Status> {
        let req = RecordAttemptRequest {
            account: account(realm, identifier),
            attempt_id: String::new(),
            client_key: String::new(),
        };
        let d = self.governor.record_attempt(req).await?.into_inner().decision;
        Ok(Decision::try_from(d).expect("daemon sent a known decision"))
    }

    pub async fn inspect(
        &mut self,
        realm: &str,
        identifier: &str,
    ) -> Result<portcullis::pb::InspectResponse, tonic::Status> {
        let req = portcullis::pb::InspectRequest {
            account: account(realm, identifier),
            ..Default::default()
        };
        Ok(self.admin.inspect(req).await?.into_inner())
    }

    /// `Admin/InspectNetwork`.
    pub async fn inspect_network(
        &mut self,
        realm: &str,
        client_key: &str,
    ) -> Result<portcullis::pb::InspectNetworkResponse, tonic::Status> {
        let req = portcullis::pb::InspectNetworkRequest {
            realm: realm.into(),
            client_key: client_key.into(),
        };
        Ok(self.admin.inspect_network(req).await?.into_inner())
    }

    /// `Admin/ReleaseNetwork`.
    pub async fn release_network(
        &mut self,
        realm: &str,
        client_key: &str,
    ) -> Result<(), tonic::Status> {
        let req = portcullis::pb::ReleaseNetworkRequest {
            realm: realm.into(),
            client_key: client_key.into(),
            note: String::new(),
        };
        self.admin.release_network(req).await.map(drop)
    }
}

/// `addr` is reachable over TLS with `tls` and answers a RecordAttempt, or the error.
pub async fn try_attempt(
    addr: SocketAddr,
    tls: Option<tonic::transport::ClientTlsConfig>,
    token: Option<&str>,
) -> Result<Decision, String> {
    let mut c = caller(addr, tls, token).await.map_err(|e| format!("connect: {e:?}"))?;
    c.attempt("default", "probe@example.com")
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

/// The headers of a unary `RecordAttempt` call to `addr`, for raw HTTP/2 clients (the
/// abuse patterns of tests/integration/hardening.rs and benches/abuse.rs).
pub fn grpc_request(addr: SocketAddr) -> http::Request<()> {
    http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}/portcullis.v1.Governor/RecordAttempt"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

/// A `Verify` answer's verdict (an unknown value panics: a test's daemon never sends one).
pub fn verdict(r: &portcullis::pb::VerifyResponse) -> portcullis::pb::Verdict {
    portcullis::pb::Verdict::try_from(r.verdict).expect("a known verdict")
}
