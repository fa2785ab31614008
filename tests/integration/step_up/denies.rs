//! A failed store operation on these paths is a deny (UNAVAILABLE), never an answer.

use super::*;

fn open<T>(message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.extensions_mut().insert(portcullis::auth::Authorization::Open);
    request
}

/// A `Governor` over `store` with `settings`' realms and breach filter (what
/// [`governor_over`] builds, with the filter the daemon would load).
fn governor_with_breach(store: Arc<dyn Store>, settings: &Settings) -> GovernorService {
    let targets = settings.realms.iter().map(|r| (r.name.as_str(), &r.hash_target));
    let verifier = Arc::new(portcullis::verify::Verifier::new(settings.verify, targets).unwrap());
    let breach = Arc::new(BreachList::load(&settings.breach).unwrap());
    let logins = portcullis::login::Logins::new(
        store.clone(),
        verifier,
        &secret(),
        portcullis::defence::spray::SprayWatch::new(),
        NetworkWatch::new(),
    )
    .with_breach(breach);
    GovernorService::new(Arc::new(settings.realms.clone()), store, secret(), Arc::new(logins))
}

fn faulty(inner: &Arc<dyn Store>, fail: Fault, settings: &Settings) -> GovernorService {
    governor_with_breach(Arc::new(FaultyStore { inner: inner.clone(), fail }), settings)
}

async fn verify_on(
    g: &GovernorService,
    realm: &str,
    identifier: &str,
    password: &[u8],
    hash: &str,
) -> Result<VerifyResponse, Status> {
    let req = VerifyRequest {
        account: account(realm, identifier),
        password: password.to_vec(),
        stored_hash: hash.into(),
        client_key: "203.0.113.50".into(),
        attempt_id: uuid::Uuid::new_v4().to_string(),
        device_token: String::new(),
    };
    Ok(g.verify(open(req)).await?.into_inner())
}

async fn confirm_on(
    g: &GovernorService,
    identifier: &str,
    challenge: &str,
    hash: &str,
) -> Result<String, Status> {
    let req = ConfirmDeviceRequest {
        account: account("stepup", identifier),
        challenge_token: challenge.into(),
        stored_hash: hash.into(),
    };
    Ok(g.confirm_device(open(req)).await?.into_inner().device_token)
}

async fn second_factor(g: &GovernorService, identifier: &str) -> Decision {
    let req = RecordFlowAttemptRequest {
        account: account("stepup", identifier),
        flow: Flow::SecondFactor as i32,
        client_key: String::new(),
        attempt_id: String::new(),
    };
    let r = g.record_flow_attempt(open(req)).await.unwrap().into_inner();
    Decision::try_from(r.decision).unwrap()
}

fn unavailable<T: std::fmt::Debug>(r: Result<T, Status>, what: &str) {
    let status = r.expect_err(&format!("{what} answered"));
    assert_eq!(status.code(), Code::Unavailable, "{what}: {status:?}");
}

/// Each store operation of these paths failing is a deny (UNAVAILABLE), never an
/// answer: a challenge's failure notes (as a failed comparison's), the breached count
/// behind an accept, ConfirmDevice's clears (the login record and the second_factor
/// record) behind a device token.
async fn every_failed_store_operation_is_a_deny(inner: Arc<dyn Store>, settings: &Settings) {
    let hash = hash_of(PASSWORD);
    let breached_hash = hash_of(BREACHED.as_bytes());
    let healthy = governor_with_breach(inner.clone(), settings);

    // A challenge leaves what a failed comparison leaves: its notes failing, no
    // challenge (and so no challenge token), as a wrong password gets no reject.
    for fault in [Fault::Spray(SprayNote::Failure), Fault::NoteRepeat] {
        let g = faulty(&inner, fault, settings);
        let r = verify_on(&g, "stepup", "notes@example.com", PASSWORD, &hash).await;
        unavailable(r, &format!("step-up with {fault:?} failing"));
        let r = verify_on(&g, "stepup", "notes@example.com", b"wrong", &hash).await;
        unavailable(r, &format!("a wrong password with {fault:?} failing"));
    }
    // The accept's clear fails: no accept; a challenge does not clear (ConfirmDevice
    // does, below).
    let g = faulty(&inner, Fault::Accept, settings);
    unavailable(verify_on(&g, "grace", "accept@example.com", PASSWORD, &hash).await, "accept");
    let r = verify_on(&g, "stepup", "accept@example.com", PASSWORD, &hash).await.unwrap();
    challenged(&r, false, "a challenge needs no accept");

    // The breached count fails: no accept of a breached password; an unlisted one and a
    // challenge (which is not counted) are answered.
    let g = faulty(&inner, Fault::NoteBreached, settings);
    let r = verify_on(&g, "grace", "noted@example.com", BREACHED.as_bytes(), &breached_hash).await;
    unavailable(r, "a breached accept");
    let r =
        verify_on(&g, "nograce", "noted@example.com", BREACHED.as_bytes(), &breached_hash).await;
    unavailable(r, "a breached accept without grace");
    let r = verify_on(&g, "grace", "noted@example.com", PASSWORD, &hash).await.unwrap();
    accepted(&r, false, "an unlisted password");
    let r = verify_on(&g, "stepgrace", "noted@example.com", BREACHED.as_bytes(), &breached_hash);
    challenged(&r.await.unwrap(), true, "a challenge counts nothing");
    // The failed notes were not counted: the grace logins are all there.
    for n in 1..=3 {
        let r =
            verify_on(&healthy, "grace", "noted@example.com", BREACHED.as_bytes(), &breached_hash);
        accepted(&r.await.unwrap(), true, &format!("grace login {n} after the failed notes"));
    }

    // ConfirmDevice's one store step (the challenge's one use, the code step's door, the
    // clears of the login and second_factor records) fails: no device token, and nothing
    // changed: the challenge is still unused, the records still counted.
    let g = faulty(&inner, Fault::ConfirmDevice, settings);
    let who = "confirm@example.com";
    let r = verify_on(&g, "stepup", who, PASSWORD, &hash).await.unwrap();
    let challenge = challenged(&r, false, "the challenge");
    for _ in 0..4 {
        assert_eq!(second_factor(&g, who).await, Decision::Allow);
    }
    unavailable(confirm_on(&g, who, &challenge, &hash).await, "ConfirmDevice");
    assert_eq!(second_factor(&g, who).await, Decision::Allow, "the fifth code");
    assert_eq!(second_factor(&g, who).await, Decision::Deny, "a failed confirm cleared codes");
    // The code step is shut: even with the store healthy, no device token
    // (FAILED_PRECONDITION), and the challenge is not used up by the refusal.
    let status = confirm_on(&healthy, who, &challenge, &hash).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("second_factor"), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failed_store_operation_is_a_deny_embedded() {
    let dir = tempfile::tempdir().unwrap();
    let extra = breach_section(dir.path()) + REALMS;
    let settings = TestConfig::embedded(&dir.path().join("cfg")).extra(&extra).settings();
    let clock = Arc::new(SystemClock);
    let store = EmbeddedStore::open(&dir.path().join("data"), Duration::from_secs(2), clock);
    every_failed_store_operation_is_a_deny(Arc::new(store.unwrap()), &settings).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_failed_store_operation_is_a_deny_on_redis() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let extra = breach_section(dir.path()) + REALMS;
    let settings = TestConfig::redis(&redis.url()).extra(&extra).settings();
    let store = RedisStore::new(&redis.url(), Duration::from_secs(2), 4).unwrap();
    every_failed_store_operation_is_a_deny(Arc::new(store), &settings).await;
}
