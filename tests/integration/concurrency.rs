//! Many gateway calls racing on one account key: the store's atomic step decides.

use portcullis::normalize::Normalization;
use portcullis::pb::Decision;
use portcullis_test_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_attempts_allow_exactly_max_failures_and_count_all() {
    let redis = RedisServer::start();
    let daemon = Daemon::start(TestConfig::redis(&redis.url()).settings()).await;
    // Several HTTP/2 connections, as several gateway replicas would have.
    let mut clients = Vec::new();
    for _ in 0..5 {
        clients.push(daemon.client().await);
    }
    let id = "target@example.com";
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(50));
    let calls: Vec<_> = (0..50)
        .map(|i| {
            let mut c = clients[i % clients.len()].clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                c.attempt("default", id).await.unwrap()
            })
        })
        .collect();
    let mut allowed = 0;
    for call in calls {
        if call.await.unwrap() == Decision::Allow {
            allowed += 1;
        }
    }
    assert_eq!(allowed, 5);
    let key = record_key("default", Normalization::Email, id);
    assert_eq!(read_record(&mut redis.conn(), &key).unwrap().0, 50, "every attempt counted");
    daemon.shutdown().await;
}
