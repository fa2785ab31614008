//! Caller authorization (docs/security.md): who is calling, and may
//! they call this RPC for this realm. The one place these checks live.
//!
//! A caller is configured as `[callers.NAME]` and identified by the verified client
//! certificate of its connection (a DNS or URI subject alternative name, mutual TLS) or,
//! where mutual TLS is not used, by a bearer token (`authorization: Bearer …`), whose
//! SHA-256 is compared in constant time with the hashes in the caller's token file.
//!
//! [`AuthLayer`] runs on every request before it is decoded, so a refused call costs no
//! store operation, no hashing and no decoding: no caller → `UNAUTHENTICATED`; an RPC
//! the caller may not use → `PERMISSION_DENIED`. The realm is inside the message, so
//! [`check_realm`] runs in the services right after the realm is read, still before any
//! store or CPU work. Every refusal is counted in `portcullis_auth_refusals_total` by
//! configured caller name (`-` when there is none), never by what the peer sent; a
//! refused call is never an attempt.
//!
//! With no `[callers]` table every connection may call everything: the listener's
//! exposure (loopback, or mutual TLS with a private CA) is then the only boundary, and
//! start-up says so in a warning when the listener is not on loopback.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, PoisonError, RwLock};
use std::task::{Context, Poll};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tonic::Status;

use crate::telemetry::rpc_calls::CallerName;
use crate::transport::ConnInfo;
use crate::transport::handshakes::refusal_log;
use crate::transport::tls::{PeerIdentity, ReloadingTls};

/// An RPC a caller may be allowed, by its method name in `portcullis.v1`: the contract's
/// one table, generated from the `.proto` files.
pub use portcullis_client::rpcs::Rpc;

/// Request paths every identified caller may call whatever its `rpcs`: health checks
/// and reflection. Any other path that is not an RPC of the contract is refused.
pub const PUBLIC_SERVICES: [&str; 3] = [
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];

/// `[callers.NAME]`: one caller's identities and permissions.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallerConfig {
    /// DNS subject alternative names of its client certificate (mutual TLS).
    #[serde(default)]
    pub san_dns: Vec<String>,
    /// URI subject alternative names of its client certificate (a SPIFFE ID, say).
    #[serde(default)]
    pub san_uri: Vec<String>,
    /// File of hex SHA-256 digests of its bearer tokens, one a line (several during a
    /// rotation; `#` comments and blank lines are ignored). The tokens themselves are
    /// never configured here.
    #[serde(default)]
    pub token_hash_file: Option<PathBuf>,
    /// RPCs it may call, by method name: any of [`Rpc`] (`Admit`, `Verify`, … of
    /// `Governor`; `Inspect`, `Unlock`, … of `Admin`, for operators).
    pub rpcs: Vec<Rpc>,
    /// Realms it may name, or `["*"]` for every configured realm.
    pub realms: Vec<String>,
}

/// Why `[callers]` cannot be used. Names the setting, never a token.
#[allow(missing_docs)] // each variant's #[error] message documents it
#[derive(Debug, thiserror::Error)]
pub enum CallerError {
    #[error("callers.{caller}.{setting}: {problem}")]
    Invalid { caller: String, setting: &'static str, problem: String },
    #[error("callers.{caller}.token_hash_file {path:?} could not be read")]
    TokenFile {
        caller: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// A configured caller. Its `Debug` shows the name only (no token digest in a log).
pub struct Caller {
    name: String,
    dns: Vec<String>,
    uri: Vec<String>,
    /// SHA-256 digests of its tokens.
    token_hashes: Vec<[u8; 32]>,
    rpcs: BTreeSet<Rpc>,
    /// `None`: every realm.
    realms: Option<BTreeSet<String>>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller").field("name", &self.name).finish_non_exhaustive()
    }
}

impl Caller {
    /// The configured name (`[callers.NAME]`), the only caller label in logs and metrics.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn may_call(&self, rpc: Rpc) -> bool {
        self.rpcs.contains(&rpc)
    }

    fn may_use_realm(&self, realm: &str) -> bool {
        self.realms.as_ref().is_none_or(|r| r.contains(realm))
    }

    fn named_by(&self, peer: &PeerIdentity) -> bool {
        peer.dns.iter().any(|d| self.dns.contains(d))
            || peer.uri.iter().any(|u| self.uri.contains(u))
    }
}

/// Whom a request's credentials name.
enum Identified {
    /// Exactly this caller.
    Caller(Arc<Caller>),
    /// No configured caller.
    Nobody,
    /// A certificate whose names belong to more than one caller: refused.
    Ambiguous,
}

/// All configured callers. Empty: authorization is off (see the module docs).
#[derive(Debug, Default)]
pub struct Callers {
    callers: Vec<Arc<Caller>>,
    /// What they were built from, to read their token files again ([`Callers::reread`]).
    source: CallersSource,
}

/// The inputs of [`Callers::new`].
#[derive(Debug, Default, Clone)]
struct CallersSource {
    config: BTreeMap<String, CallerConfig>,
    realms: Vec<String>,
    mutual_tls: bool,
}

/// The callers in force: swapped whole by a reload (SIGHUP, `crate::reload`), read by
/// every request, so a caller removed from `[callers]` or a token removed from its file
/// gets no further call, on open connections too.
#[derive(Debug)]
pub struct CallerTable(RwLock<Arc<Callers>>);

impl CallerTable {
    /// A table holding `callers`.
    pub fn new(callers: Arc<Callers>) -> Arc<Self> {
        Arc::new(Self(RwLock::new(callers)))
    }

    /// The callers in force now.
    pub fn current(&self) -> Arc<Callers> {
        self.0.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Puts `callers` in force for every request from now on.
    pub fn replace(&self, callers: Arc<Callers>) {
        *self.0.write().unwrap_or_else(PoisonError::into_inner) = callers;
    }
}

/// What the layer decided for one request, in its extensions: the services read it for
/// the realm check. A request without one is refused (fail closed).
#[derive(Debug, Clone)]
pub enum Authorization {
    /// No `[callers]` configured: everything is allowed.
    Open,
    /// This configured caller.
    Caller(Arc<Caller>),
}

impl Authorization {
    /// The caller's name, `-` when authorization is off.
    pub fn name(&self) -> &str {
        match self {
            Authorization::Open => "-",
            Authorization::Caller(c) => c.name(),
        }
    }
}

/// Counts one refusal by configured caller name (`-` for none) and code.
fn refused(caller: &str, code: &'static str) {
    metrics::counter!(crate::telemetry::metrics::AUTH_REFUSALS, "caller" => caller.to_owned(), "code" => code)
        .increment(1);
}

/// The realm check: may the request's caller name `realm`? Run by every service right
/// after it has read the realm, before any store or CPU work.
///
/// # Errors
/// `PERMISSION_DENIED` when the caller may not use the realm, or when the request
/// carries no authorization at all (it did not pass [`AuthLayer`]: fail closed).
pub fn check_realm(extensions: &tonic::Extensions, realm: &str) -> Result<(), Status> {
    match extensions.get::<Authorization>() {
        Some(Authorization::Open) => Ok(()),
        Some(Authorization::Caller(c)) if c.may_use_realm(realm) => Ok(()),
        Some(Authorization::Caller(c)) => {
            refused(c.name(), "permission_denied");
            Err(Status::permission_denied("this caller may not use account.realm"))
        }
        None => {
            refused("-", "permission_denied");
            Err(Status::permission_denied("the request was not authorized"))
        }
    }
}

/// Whether the request's caller may name `realm`, as [`check_realm`] judges it but
/// without refusing or counting: for an answer that leaves out what its caller may not
/// see (`Admin/EffectiveConfig`'s realms). A request without authorization may use none
/// (fail closed).
pub fn may_use_realm(extensions: &tonic::Extensions, realm: &str) -> bool {
    match extensions.get::<Authorization>() {
        Some(Authorization::Open) => true,
        Some(Authorization::Caller(c)) => c.may_use_realm(realm),
        None => false,
    }
}

impl Callers {
    /// Builds the callers of `[callers]`, reading their token files. `realms` are the
    /// configured realm names; `mutual_tls` whether client certificates are verified.
    ///
    /// # Errors
    /// [`CallerError`] naming the caller and setting: a bad name, no identity, a SAN
    /// without mutual TLS or claimed twice, an unknown realm, an unreadable or malformed
    /// token file.
    pub fn new(
        config: &BTreeMap<String, CallerConfig>,
        realms: &[&str],
        mutual_tls: bool,
    ) -> Result<Self, CallerError> {
        let mut callers = Vec::new();
        let mut claimed = BTreeSet::new();
        for (name, c) in config {
            let invalid = |setting, problem: &str| CallerError::Invalid {
                caller: name.clone(),
                setting,
                problem: problem.to_owned(),
            };
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
            if !valid_name {
                return Err(invalid(
                    "name",
                    "a caller name is 1–64 characters of A–Z a–z 0–9 . _ -",
                ));
            }
            if c.san_dns.is_empty() && c.san_uri.is_empty() && c.token_hash_file.is_none() {
                return Err(invalid(
                    "san_dns",
                    "a caller needs an identity: san_dns, san_uri or token_hash_file",
                ));
            }
            if (!c.san_dns.is_empty() || !c.san_uri.is_empty()) && !mutual_tls {
                return Err(invalid(
                    "san_dns",
                    "certificate names need mutual TLS: set tls.client_ca_file",
                ));
            }
            let dns: Vec<String> = c.san_dns.iter().map(|d| d.to_ascii_lowercase()).collect();
            for san in dns
                .iter()
                .map(|d| format!("dns:{d}"))
                .chain(c.san_uri.iter().map(|u| format!("uri:{u}")))
            {
                if !claimed.insert(san) {
                    return Err(invalid("san_dns", "a certificate name belongs to two callers"));
                }
            }
            if c.rpcs.is_empty() {
                return Err(invalid("rpcs", "list at least one RPC"));
            }
            let all = c.realms.iter().any(|r| r == "*");
            if c.realms.is_empty() || (all && c.realms.len() > 1) {
                return Err(invalid(
                    "realms",
                    "list realm names, or [\"*\"] alone for every realm",
                ));
            }
            if let Some(unknown) =
                c.realms.iter().find(|r| *r != "*" && !realms.contains(&r.as_str()))
            {
                return Err(invalid("realms", &format!("{unknown:?} is not a configured realm")));
            }
            let token_hashes = match &c.token_hash_file {
                Some(path) => read_token_hashes(name, path)?,
                None => Vec::new(),
            };
            let own: BTreeSet<&[u8; 32]> = token_hashes.iter().collect();
            for h in own {
                if !claimed.insert(format!("token:{}", hex::encode(h))) {
                    return Err(invalid("token_hash_file", "a token hash belongs to two callers"));
                }
            }
            callers.push(Arc::new(Caller {
                name: name.clone(),
                dns,
                uri: c.san_uri.clone(),
                token_hashes,
                rpcs: c.rpcs.iter().copied().collect(),
                realms: (!all).then(|| c.realms.iter().cloned().collect()),
            }));
        }
        let source = CallersSource {
            config: config.clone(),
            realms: realms.iter().map(|r| (*r).to_owned()).collect(),
            mutual_tls,
        };
        Ok(Self { callers, source })
    }

    /// The same callers with their token files read again (a rotation).
    ///
    /// # Errors
    /// As [`Self::new`]; the callers in force stay as they are.
    pub fn reread(&self) -> Result<Self, CallerError> {
        let realms: Vec<&str> = self.source.realms.iter().map(String::as_str).collect();
        Self::new(&self.source.config, &realms, self.source.mutual_tls)
    }

    /// How many callers are configured (none: authorization is off).
    pub fn count(&self) -> usize {
        self.callers.len()
    }

    /// Who sent a request: the connection's certificate names, else its bearer token.
    /// A certificate whose names belong to two or more callers names nobody: its
    /// permissions are never united, nor one of them picked by table order.
    fn identify(&self, peer: Option<&PeerIdentity>, headers: &http::HeaderMap) -> Identified {
        if let Some(peer) = peer {
            let mut named = self.callers.iter().filter(|c| c.named_by(peer));
            match (named.next(), named.next()) {
                (Some(_), Some(_)) => return Identified::Ambiguous,
                (Some(c), None) => return Identified::Caller(c.clone()),
                (None, _) => {}
            }
        }
        let Some(token) = headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        else {
            return Identified::Nobody;
        };
        let digest: [u8; 32] = Sha256::digest(token).into();
        // Every stored digest is compared, each in constant time (subtle), so the time
        // taken says nothing about how close a guess came. A digest is in one caller's
        // file only ([`Callers::new`]).
        let mut found = None;
        for c in &self.callers {
            for h in &c.token_hashes {
                if bool::from(digest.ct_eq(h)) && found.is_none() {
                    found = Some(c.clone());
                }
            }
        }
        found.map_or(Identified::Nobody, Identified::Caller)
    }

    /// The decision for a request to `path`.
    ///
    /// # Errors
    /// `UNAUTHENTICATED` when no caller is recognised; `PERMISSION_DENIED` when the
    /// caller may not call this RPC.
    pub fn authorize(
        &self,
        path: &str,
        conn: Option<&ConnInfo>,
        headers: &http::HeaderMap,
    ) -> Result<Authorization, Status> {
        if self.count() == 0 {
            return Ok(Authorization::Open);
        }
        let peer = conn.and_then(|c| c.peer.as_deref());
        let caller = match self.identify(peer, headers) {
            Identified::Caller(caller) => caller,
            Identified::Nobody => {
                refused("-", "unauthenticated");
                let Some(peer) = peer else {
                    return Err(Status::unauthenticated(
                        "no configured caller: present a client certificate or a bearer token",
                    ));
                };
                // The certificate is the caller's own: its names are no secret to it,
                // and they are what the operator must add to the caller table.
                let names = refusal_log().no_caller(&peer.subject, &peer.dns, &peer.uri);
                return Err(Status::unauthenticated(format!(
                    "no configured caller: the client certificate's names ({names}) match no \
                     [callers.NAME] san_dns or san_uri"
                )));
            }
            Identified::Ambiguous => {
                refused("-", "unauthenticated");
                return Err(Status::unauthenticated(
                    "the client certificate names more than one configured caller",
                ));
            }
        };
        match Rpc::from_path(path) {
            Some(rpc) if caller.may_call(rpc) => Ok(Authorization::Caller(caller)),
            None if PUBLIC_SERVICES.iter().any(|s| path.starts_with(s)) => {
                Ok(Authorization::Caller(caller))
            }
            Some(rpc) => {
                refused(caller.name(), "permission_denied");
                let what = format!("caller {:?} may not call {}", caller.name(), rpc.full_name());
                refusal_log().call_refused(&what, caller.name());
                Err(Status::permission_denied(format!(
                    "{what}: grant it in [callers.{}] rpcs",
                    caller.name()
                )))
            }
            // A path that is no RPC of the contract: refused for every caller, so nothing
            // is ever served without its permission check. The path is the peer's text:
            // neither logged nor echoed.
            None => {
                refused(caller.name(), "permission_denied");
                Err(Status::permission_denied("this path is no RPC of portcullis.v1"))
            }
        }
    }
}

fn read_token_hashes(caller: &str, path: &std::path::Path) -> Result<Vec<[u8; 32]>, CallerError> {
    let text = std::fs::read_to_string(path).map_err(|source| CallerError::TokenFile {
        caller: caller.to_owned(),
        path: path.to_owned(),
        source,
    })?;
    let mut hashes = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let mut h = [0u8; 32];
        hex::decode_to_slice(line, &mut h).map_err(|_| CallerError::Invalid {
            caller: caller.to_owned(),
            setting: "token_hash_file",
            problem: "each line must be 64 hex digits (the SHA-256 of a token)".into(),
        })?;
        hashes.push(h);
    }
    if hashes.is_empty() {
        return Err(CallerError::Invalid {
            caller: caller.to_owned(),
            setting: "token_hash_file",
            problem: "the file holds no token hash".into(),
        });
    }
    Ok(hashes)
}

/// The tower layer that authorizes every request before tonic decodes it.
#[derive(Debug, Clone)]
pub struct AuthLayer {
    callers: Arc<CallerTable>,
    /// The listener's TLS, whose current client CA judges mutual-TLS identities.
    tls: Option<Arc<ReloadingTls>>,
}

impl AuthLayer {
    /// A layer over the callers in `callers`, judging client certificates by `tls`.
    pub fn new(callers: Arc<CallerTable>, tls: Option<Arc<ReloadingTls>>) -> Self {
        Self { callers, tls }
    }
}

impl<S> tower::Layer<S> for AuthLayer {
    type Service = Auth<S>;

    fn layer(&self, inner: S) -> Auth<S> {
        Auth { inner, callers: self.callers.clone(), tls: self.tls.clone() }
    }
}

/// See [`AuthLayer`].
#[derive(Debug, Clone)]
pub struct Auth<S> {
    inner: S,
    callers: Arc<CallerTable>,
    tls: Option<Arc<ReloadingTls>>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Auth<S> {
    /// The decision for one request: a mutual-TLS identity judged again (now, against
    /// the current client CA: every call on a connection whose identity fails is
    /// refused), then the caller and its RPC.
    fn decide(
        &self,
        path: &str,
        conn: Option<&ConnInfo>,
        headers: &http::HeaderMap,
    ) -> Result<Authorization, Status> {
        if let (Some(tls), Some(conn)) = (&self.tls, conn)
            && let Some(peer) = &conn.peer
            && let Err(untrusted) = tls.judge(peer, SystemTime::now())
        {
            refused("-", "unauthenticated");
            let what = format!("{untrusted} (an open connection's certificate, judged again)");
            refusal_log().call_refused(&what, &peer.subject);
            return Err(Status::unauthenticated(untrusted.to_string()));
        }
        // Health checks come from load balancers and need no caller.
        if path.starts_with("/grpc.health.v1.Health/") {
            return Ok(Authorization::Open);
        }
        self.callers.current().authorize(path, conn, headers)
    }
}

impl<S, B> tower::Service<http::Request<B>> for Auth<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let decision =
            self.decide(req.uri().path(), req.extensions().get::<ConnInfo>(), req.headers());
        match decision {
            Ok(authorization) => {
                let caller = CallerName(authorization.name().into());
                req.extensions_mut().insert(authorization);
                // The clone that was polled ready serves this call (tower's rule).
                let clone = self.inner.clone();
                let mut inner = std::mem::replace(&mut self.inner, clone);
                Box::pin(async move {
                    let mut response = inner.call(req).await?;
                    response.extensions_mut().insert(caller);
                    Ok(response)
                })
            }
            Err(status) => Box::pin(async move { Ok(status.into_http()) }),
        }
    }
}

#[cfg(test)]
mod tests;
