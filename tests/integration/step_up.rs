//! Step-up for unknown devices (docs/devices.md, "Step-up for unknown devices") and grace
//! logins of breached passwords (docs/breach.md, "Grace logins"): in a `step_up` realm a
//! replayed list of right passwords from a hundred networks gets challenges only, never a
//! session or a device token, until `ConfirmDevice` after the gateway's challenge; no
//! forged, altered, borrowed or stale challenge token buys a device token, on either
//! store; the grace logins of a breached password are counted fleet-wide, exactly, by
//! eight daemons at once; every store error on these paths is a deny; the answers of a
//! `step_up` realm still tell no unknown account from a wrong password or a closed door,
//! by bytes or by time; `allow` keeps today's answers; bad settings stop the start.
//! The challenge (`challenges`), the grace logins (`grace`), store errors (`denies`), the
//! other answers and the settings (`answers`); the helpers they share are here.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis::config::{Config, Overrides, Settings};
use portcullis::defence::breach::BreachList;
use portcullis::defence::breach::build::{BuildOptions, build};
use portcullis::defence::client_network::NetworkWatch;
use portcullis::defence::devices::{DeviceTokens, Grant};
use portcullis::login::Signals;
use portcullis::normalize::{Normalization, normalize};
use portcullis::pb::governor_server::Governor;
use portcullis::pb::{
    ChallengeReason, ConfirmDeviceRequest, Decision, Flow, RecordFlowAttemptRequest,
    RevokeDevicesRequest, Verdict, VerifyRequest, VerifyResponse,
};
use portcullis::rpc::GovernorService;
use portcullis::secret::KeySecret;
use portcullis::store::Store;
use portcullis::store::embedded::{EmbeddedStore, SystemClock};
use portcullis::store::keys::AccountKey;
use portcullis::store::redis::RedisStore;
use portcullis::store::spray_window::SprayNote;
use portcullis::verify::hash::{HashParams, StoredHash};
use portcullis_test_support::bench::ks_statistic;
use portcullis_test_support::*;
use prost::Message;
use sha1::Digest;
use tonic::{Code, Status};

mod answers;
mod challenges;
mod denies;
mod grace;

/// `stepup`: unknown devices are challenged (bcrypt cost 4, a network bucket that
/// hundreds of failures from one address do not empty). `stepup5`: the same with a
/// cost-5 target, so a cost-4 hash needs a rehash. `grace`: breached passwords get the
/// default grace logins (3); 20 failures a window, so eight concurrent logins of one
/// account are all counted and compared. `nograce`: none. `stepgrace`: step-up and the
/// default grace logins. `allowed`: `unknown_device = "allow"` written out.
const REALMS: &str = r#"
[verify]
max_waiters = 64
[realms.stepup]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
unknown_device = "step_up"
network_capacity = 100000
max_failures = 20
[realms.stepup5]
hash = { algorithm = "bcrypt", bcrypt_cost = 5 }
unknown_device = "step_up"
[realms.grace]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
max_failures = 20
[realms.nograce]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
breached_grace_logins = 0
max_failures = 20
[realms.stepgrace]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
unknown_device = "step_up"
[realms.allowed]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
unknown_device = "allow"
"#;

const PASSWORD: &[u8] = b"correct horse battery staple";
/// In every breach filter these tests build.
const BREACHED: &str = "Summer2026!";

fn hash_of(password: &[u8]) -> String {
    StoredHash::generate(password, &HashParams::Bcrypt { cost: 4 }).unwrap().as_str().to_owned()
}

fn secret() -> KeySecret {
    KeySecret::new(SECRET.as_bytes().to_vec())
}

fn account_key(realm: &str, identifier: &str) -> AccountKey {
    AccountKey::new(&secret(), realm, &normalize(Normalization::Email, identifier).unwrap())
}

/// Tokens as the test daemons make them (they share [`SECRET`]).
fn tokens() -> DeviceTokens {
    DeviceTokens::new(&secret())
}

/// A breach filter listing [`BREACHED`] in `dir`, and the `[breach]` section naming it.
fn breach_section(dir: &Path) -> String {
    let corpus = dir.join("corpus.txt");
    let lines: String = [BREACHED, "password1"]
        .iter()
        .map(|p| format!("{}:3\r\n", hex::encode_upper(sha1::Sha1::digest(p.as_bytes()))))
        .collect();
    std::fs::write(&corpus, lines).unwrap();
    let filter: PathBuf = dir.join("breach.filter");
    build(&corpus, &filter, &BuildOptions::default()).unwrap();
    format!("[breach]\nfilter_file = {:?}\n", filter.to_str().unwrap())
}

/// A daemon with [`REALMS`] (and a breach filter with `breach`) on `redis`, or on an
/// embedded store in `dir`.
async fn daemon(redis: Option<&RedisServer>, dir: &Path, breach: bool) -> Daemon {
    let extra = if breach { breach_section(dir) + REALMS } else { REALMS.to_owned() };
    Daemon::on(redis, dir, &extra).await
}

async fn confirm(
    c: &mut Client,
    realm: &str,
    identifier: &str,
    challenge_token: &str,
    stored_hash: &str,
) -> Result<String, Status> {
    let req = ConfirmDeviceRequest {
        account: account(realm, identifier),
        challenge_token: challenge_token.into(),
        stored_hash: stored_hash.into(),
    };
    Ok(c.0.confirm_device(req).await?.into_inner().device_token)
}

/// A challenge for a new device, and nothing else: its token, no device token, no
/// rehash, no signal but the `step_up` a reject would carry at the same count (a
/// challenge is counted as a failure until ConfirmDevice); `password_breached` as given.
/// Answers the challenge token.
fn challenged(r: &VerifyResponse, breached: bool, what: &str) -> String {
    assert!(!r.challenge_token.is_empty(), "{what}: no challenge token: {r:?}");
    let want = VerifyResponse {
        verdict: Verdict::Challenge as i32,
        challenge_reason: ChallengeReason::NewDevice as i32,
        password_breached: breached,
        challenge_token: r.challenge_token.clone(),
        step_up: r.step_up,
        ..VerifyResponse::default()
    };
    assert_eq!(r, &want, "{what}: not a plain challenge");
    r.challenge_token.clone()
}

/// A plain accept with a device token (and `password_breached` as given). Answers the
/// device token.
fn accepted(r: &VerifyResponse, breached: bool, what: &str) -> String {
    assert!(!r.device_token.is_empty(), "{what}: an accept without a device token: {r:?}");
    let want = VerifyResponse {
        verdict: Verdict::Accept as i32,
        password_breached: breached,
        device_token: r.device_token.clone(),
        ..VerifyResponse::default()
    };
    assert_eq!(r, &want, "{what}: not a plain accept");
    r.device_token.clone()
}

/// A change required: breached, no device token, no challenge token.
fn change_required(r: &VerifyResponse, what: &str) {
    let want = VerifyResponse {
        verdict: Verdict::ChangeRequired as i32,
        password_breached: true,
        ..VerifyResponse::default()
    };
    assert_eq!(r, &want, "{what}: not a plain change required");
}
