//! Authorization's unit tests: the decisions, the caller table's checks.

use super::*;

#[test]
fn a_request_that_skipped_the_layer_is_refused() {
    let e = check_realm(&tonic::Extensions::new(), "default").unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
    let mut open = tonic::Extensions::new();
    open.insert(Authorization::Open);
    assert!(check_realm(&open, "default").is_ok());
}

/// A caller granted every RPC of the table, by bearer token.
fn all_powerful(dir: &std::path::Path) -> (Callers, http::HeaderMap) {
    let token = "a-token-of-the-test";
    let file = dir.join("tokens");
    std::fs::write(&file, hex::encode(Sha256::digest(token))).unwrap();
    let config = CallerConfig {
        san_dns: vec![],
        san_uri: vec![],
        token_hash_file: Some(file),
        rpcs: Rpc::ALL.to_vec(),
        realms: vec!["*".into()],
    };
    let callers =
        Callers::new(&BTreeMap::from([("all".to_owned(), config)]), &["default"], false).unwrap();
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, format!("Bearer {token}").parse().unwrap());
    (callers, headers)
}

#[test]
fn a_path_outside_the_table_is_refused_to_a_caller_holding_every_rpc() {
    let dir = tempfile::tempdir().unwrap();
    let (callers, headers) = all_powerful(dir.path());
    for rpc in Rpc::ALL {
        assert!(callers.authorize(rpc.path(), None, &headers).is_ok(), "{rpc:?}");
    }
    for path in [
        "/portcullis.v1.Governor/MadeUp",
        "/portcullis.v1.Admin/Unlock2",
        "/portcullis.v1.Governor/admit",
        "/portcullis.v2.Governor/Admit",
        "/",
    ] {
        let e = callers.authorize(path, None, &headers).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied, "{path}");
    }
    for path in ["/grpc.health.v1.Health/Check", "/grpc.reflection.v1.ServerReflection/X"] {
        assert!(callers.authorize(path, None, &headers).is_ok(), "{path} is public");
    }
}
