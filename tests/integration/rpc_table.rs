//! The one RPC table (`portcullis_client::rpcs`, generated from the `.proto` files): a
//! request path that is no RPC of the contract is refused, before routing, even for a
//! caller granted every RPC; health stays open to every identified caller.

use portcullis::auth::Rpc;
use portcullis::codec::SmallBufferCodec;
use portcullis::pb::{AdmitRequest, AdmitResponse};
use portcullis_test_support::*;
use sha2::{Digest, Sha256};
use tonic::Code;

const TOKEN: &str = "a-token-granted-every-rpc";

/// One unary call of `path` with an `AdmitRequest` body and the bearer token.
async fn call(
    addr: std::net::SocketAddr,
    path: &'static str,
) -> Result<AdmitResponse, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let mut request =
        tonic::Request::new(AdmitRequest { account: account("default", "table@example.com") });
    request.metadata_mut().insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
    let codec = SmallBufferCodec::<AdmitRequest, AdmitResponse>::default();
    grpc.unary(request, tonic::codegen::http::uri::PathAndQuery::from_static(path), codec)
        .await
        .map(tonic::Response::into_inner)
}

#[tokio::test]
async fn a_path_outside_the_table_is_refused_to_a_caller_granted_every_rpc() {
    let data = tempfile::tempdir().unwrap();
    let tokens = data.path().join("tokens.sha256");
    std::fs::write(&tokens, hex::encode(Sha256::digest(TOKEN))).unwrap();
    let every: Vec<String> = Rpc::ALL.iter().map(|r| format!("{:?}", r.method())).collect();
    let callers = format!(
        "[callers.everything]\ntoken_hash_file = {tokens:?}\nrpcs = [{}]\nrealms = [\"*\"]\n",
        every.join(", ")
    );
    let daemon =
        Daemon::start(TestConfig::embedded(&data.path().join("store")).extra(&callers).settings())
            .await;
    // A real RPC of the table is served.
    assert!(call(daemon.addr, "/portcullis.v1.Governor/Admit").await.is_ok());
    // Made-up paths, and spellings of real ones, are PERMISSION_DENIED: the router's
    // UNIMPLEMENTED would mean the request got past authorization.
    for path in [
        "/portcullis.v1.Governor/MadeUp",
        "/portcullis.v1.Governor/admit",
        "/portcullis.v1.Admin/Unlock2",
        "/portcullis.v2.Governor/Admit",
        "/some.other.Service/Admit",
    ] {
        let status = call(daemon.addr, path).await.unwrap_err();
        assert_eq!(status.code(), Code::PermissionDenied, "{path}: {status:?}");
    }
    daemon.shutdown().await;
}
