//! Every store key is built here (docs/architecture.md, "Account keys").
//!
//! An account key is `HMAC-SHA-256(secret, len(realm) ‖ realm ‖ len(id) ‖ id)` with
//! 4-byte big-endian lengths, so `("ab", "c")` and `("a", "bc")` never collide, truncated
//! to 128 bits (RFC 2104 §5: truncation to half the output keeps its strength; the key
//! secret is what keeps an attacker from making two identifiers collide). Its hex digest
//! is the Redis Cluster hash tag, so every key one operation touches is in one slot:
//!
//! ```text
//! portcullis:v2:{<32 hex digest>}:r              the attempt record (hash f, ws, st)
//! portcullis:v2:{<32 hex digest>}:a:<16 hex>     one attempt_id's answer (a retry horizon)
//! portcullis:v2:{<32 hex digest>}:d:<16 hex>     one known device's bucket (hash f, ws, st)
//! portcullis:v2:{<32 hex digest>}:e              the account's device epoch
//! portcullis:v2:{<32 hex digest>}:s              the record under the realm's candidate
//!                                                 policy ("f,ws,st,c,lu,lr")
//! …:dx the device buckets' index (≤ 32 tags); <a record's key>:n its window's networks (≤ 64)
//! portcullis:v2:{<32 hex digest>}:b              breached accepts of one credential
//!                                                 ("<16 hex credential>:<count>")
//! portcullis:v2:{<32 hex digest>}:p:<16 hex>     one client's refused-password list
//! portcullis:v2:{<32 hex digest>}:f:<flow tag>    one flow's record (docs/flows.md):
//!                                                 2f, rc (hash f, ws, st), pr, vr (send log)
//! portcullis:v2:{<32 hex digest>}:fa:<16 hex>    one flow attempt_id's answer
//! portcullis:v2:{spray:<16 hex realm tag>:<4 hex fingerprint>}:…   spray counts
//! portcullis:v2:{n:<32 hex digest>}              one client network's bucket (its TAT)
//! portcullis:v2:{n:<32 hex digest>}              a mail flow's per-network budget (same shape,
//!                                                 its own keyed digest)
//! portcullis:v2:{t:<16 hex realm tag>}:…         a realm's tallies (its status)
//! portcullis:v2:{c:<16 hex>}                     a realm's report of one candidate policy
//! portcullis:v2:key-check                        the store's key check value (one per store)
//! ```
//!
//! Spray keys (docs/spray.md) carry the password fingerprint's own hash tag, so the
//! spray script runs on one node whatever the account: `failed:0`, `failed:1` and
//! `periods` on Redis, `member:<account digest>` and `count` on the embedded store.
//!
//! Short names, because every made-up identifier an attacker tries costs one record:
//! the `v1` layout (64 hex, `:record`, `:attempt:<32 hex>`) cost 245 bytes of Redis a
//! record and 270 an attempt id; this one 209 and 225 (docs/store.md, "What a record
//! costs"). No key holds an identifier or attempt id in clear.

use hmac::Mac;

use crate::normalize::NormalizedIdentifier;
use crate::secret::{KeySecret, update_framed};
use crate::throttle::flow::{Flow, FlowRules};

/// Prefix of every key; the version changes when the layout does (v2: the compact
/// layout; a daemon of this version ignores v1 keys, which expire by themselves).
pub const KEY_PREFIX: &str = "portcullis:v2:";

/// The store's key check value ([`crate::secret::KeyCheck`]): one key per store, written
/// by the first daemon that proves its key secret there and compared by every other
/// (docs/store.md, "One key secret per store"). No hash tag: a single-key operation.
pub const KEY_CHECK: &str = "portcullis:v2:key-check";

/// Bytes of the account key's HMAC kept (128 bits: 32 hex characters).
const ACCOUNT_DIGEST_BYTES: usize = 16;

/// Bytes kept of an attempt id's or a device nonce's keyed digest (64 bits: 16 hex
/// characters), which only tell apart the few ids and devices of one account.
const SUFFIX_DIGEST_BYTES: usize = 8;

/// The store's name for one account key (realm, normalized identifier): a keyed digest
/// (128 bits), in lowercase hex, used as the Redis Cluster hash tag.
///
/// A key may also name one known device's bucket of that account ([`AccountKey::device`])
/// or one of its flows ([`AccountKey::flow`], docs/flows.md): the same hash tag, so an
/// operation on it stays single-slot, and a record of its own, counted apart.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AccountKey {
    /// Hex digest of (realm, normalized identifier): the hash tag (32 hex).
    digest: String,
    /// Which of the account's records this key names.
    bucket: Bucket,
}

/// Which record of one account an [`AccountKey`] names.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Bucket {
    /// The account's own login record.
    Account,
    /// A known device's bucket: its keyed digest (16 hex).
    Device(String),
    /// One flow's record (docs/flows.md).
    Flow(Flow),
    /// A step-up challenge's one-use mark: its keyed digest (16 hex).
    Challenge(String),
}

impl AccountKey {
    /// Derives the key; `realm` is the configured realm name.
    pub fn new(secret: &KeySecret, realm: &str, identifier: &NormalizedIdentifier) -> Self {
        let mut mac = secret.mac();
        // Both parts are bounded (64 and 320 bytes).
        update_framed(&mut mac, realm.as_bytes());
        update_framed(&mut mac, identifier.as_str().as_bytes());
        let digest = mac.finalize().into_bytes();
        Self { digest: hex::encode(&digest[..ACCOUNT_DIGEST_BYTES]), bucket: Bucket::Account }
    }

    /// The record of `flow` for this account: `portcullis:v2:{<digest>}:f:<tag>`
    /// ([`Flow::key_tag`]), in the account's hash tag, apart from its login record, so a
    /// flow and the login throttle never clear or count each other (docs/flows.md). Its
    /// attempt ids have their own namespace ([`AccountKey::attempt`]).
    pub fn flow(&self, flow: Flow) -> Self {
        Self { digest: self.digest.clone(), bucket: Bucket::Flow(flow) }
    }

    /// The flow this key names, `None` for the login record and device buckets.
    pub fn flow_of(&self) -> Option<Flow> {
        match self.bucket {
            Bucket::Flow(flow) => Some(flow),
            Bucket::Account | Bucket::Device(_) | Bucket::Challenge(_) => None,
        }
    }

    /// The bucket of one known device of this account (OWASP device cookies): its record
    /// is `portcullis:v2:{<digest>}:d:<16 hex>`, where the suffix is a keyed digest
    /// of the device token's nonce, so the stored key reveals neither the token nor the
    /// identifier. Attempt ids stay in the account's namespace: a replay is a replay in
    /// whichever bucket it first counted.
    pub fn device(&self, secret: &KeySecret, nonce: &[u8]) -> Self {
        let mut mac = secret.mac();
        // Domain separation from account keys and attempt ids.
        mac.update(b"device\0");
        mac.update(nonce);
        let digest = mac.finalize().into_bytes();
        let device = hex::encode(&digest[..SUFFIX_DIGEST_BYTES]);
        Self { digest: self.digest.clone(), bucket: Bucket::Device(device) }
    }

    /// The one-use mark of a step-up challenge (docs/devices.md): its record is
    /// `portcullis:v2:{<digest>}:c:<16 hex>`, a keyed digest of the challenge token's
    /// nonce, so the stored key reveals neither the token nor the identifier.
    pub fn challenge(&self, secret: &KeySecret, nonce: &[u8]) -> Self {
        let mut mac = secret.mac();
        // Domain separation from device buckets, account keys and attempt ids.
        mac.update(b"challenge\0");
        mac.update(nonce);
        let digest = mac.finalize().into_bytes();
        let used = hex::encode(&digest[..SUFFIX_DIGEST_BYTES]);
        Self { digest: self.digest.clone(), bucket: Bucket::Challenge(used) }
    }

    /// The record's key: `portcullis:v2:{<digest>}:r` for the account,
    /// `portcullis:v2:{<digest>}:d:<16 hex>` for a device bucket,
    /// `portcullis:v2:{<digest>}:f:<tag>` for a flow, `portcullis:v2:{<digest>}:c:<16 hex>`
    /// for a challenge's one-use mark.
    pub fn record(&self) -> String {
        // One allocation of the right size, without `format!`'s machinery: every count.
        match &self.bucket {
            Bucket::Account => [KEY_PREFIX, "{", &self.digest, "}:r"].concat(),
            Bucket::Device(device) => [KEY_PREFIX, "{", &self.digest, "}:d:", device].concat(),
            Bucket::Flow(flow) => [KEY_PREFIX, "{", &self.digest, "}:f:", flow.key_tag()].concat(),
            Bucket::Challenge(used) => [KEY_PREFIX, "{", &self.digest, "}:c:", used].concat(),
        }
    }

    /// The record under the realm's candidate policy (docs/throttle.md, "Trying a
    /// policy in shadow"), beside this one in its hash tag: `portcullis:v2:{<digest>}:s`
    /// for the account's login record; a known device's bucket has its own beside it,
    /// `…:d:<16 hex>:s` (the candidate's limits are the login's, for each device as for
    /// the account), and a flow's record `…:f:<tag>:s`. For the login, a device and a
    /// code flow one string `"<f>,<ws>,<st>,<c>,<lu>,<lr>"` on Redis (read, and written
    /// with its expiry, in one command each), a record entry on the embedded store; for a
    /// mail flow a send log as the flow's own (`send_log.lua`). `None` for a challenge.
    pub fn candidate_record(&self) -> Option<String> {
        match &self.bucket {
            Bucket::Account => Some(format!("{KEY_PREFIX}{{{}}}:s", self.digest)),
            Bucket::Device(_) | Bucket::Flow(_) => Some(format!("{}:s", self.record())),
            Bucket::Challenge(_) => None,
        }
    }

    /// `portcullis:v2:{<digest>}:e`: the account's device epoch (docs/devices.md,
    /// "Revocation"), in the same hash tag as its record and device buckets.
    pub fn device_epoch(&self) -> String {
        format!("{KEY_PREFIX}{{{}}}:e", self.digest)
    }

    /// `portcullis:v2:{<digest>}:b`: the account's count of accepted breached passwords
    /// (docs/breach.md, "Grace logins"), in the same hash tag as its record.
    pub fn breached_count(&self) -> String {
        format!("{KEY_PREFIX}{{{}}}:b", self.digest)
    }

    /// A keyed digest of `stored_hash` (64 bits): what the breached count is bound to,
    /// so a new stored hash starts it afresh. Names neither the hash nor the account.
    pub fn credential(&self, secret: &KeySecret, stored_hash: &str) -> u64 {
        let mut mac = secret.mac();
        mac.update(b"credential\0");
        mac.update(self.digest.as_bytes());
        mac.update(stored_hash.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(word)
    }

    /// Whether this key names a device bucket rather than the account's record.
    pub fn is_device(&self) -> bool {
        matches!(self.bucket, Bucket::Device(_))
    }

    /// The account's device lanes (docs/devices.md, "Lanes in Inspect"): its index `…:dx`
    /// (device tags by last count), a bucket's key before its tag `…:d:`, and this key's
    /// tag when it names a bucket (its key's 16 hex end).
    pub fn device_index(&self) -> (String, String, Option<&str>) {
        let tag = format!("{KEY_PREFIX}{{{}}}", self.digest);
        let device = if let Bucket::Device(d) = &self.bucket { Some(d.as_str()) } else { None };
        (format!("{tag}:dx"), format!("{tag}:d:"), device)
    }

    /// `<record>:n`: its window's client networks (docs/throttle.md, "Why a door is shut").
    pub fn networks(&self) -> String {
        format!("{}:n", self.record())
    }

    /// `portcullis:v2:{<digest>}:a:<16 hex>`: the stored answer of one `attempt_id`, in
    /// the same hash tag as the record. A flow's ids are `…:fa:<16 hex>`, keyed with the
    /// flow's name, so one id sent to the login and to a flow counts in each.
    pub fn attempt(&self, secret: &KeySecret, attempt_id: &AttemptId) -> AttemptKey {
        let mut mac = secret.mac();
        // Domain separation from account keys, whose first byte is a length.
        mac.update(b"attempt_id\0");
        if let Bucket::Flow(flow) = self.bucket {
            mac.update(flow.as_str().as_bytes());
            mac.update(b"\0");
        }
        mac.update(attempt_id.0.as_bytes());
        let digest = mac.finalize().into_bytes();
        let suffix = hex::encode(&digest[..SUFFIX_DIGEST_BYTES]);
        let kind = if self.flow_of().is_some() { "fa" } else { "a" };
        AttemptKey(format!("{KEY_PREFIX}{{{}}}:{kind}:{suffix}", self.digest), 0)
    }

    /// `portcullis:v2:{<digest>}:p:<16 hex>`: the list of passwords one client (its
    /// `scope`: its client network's text) was refused with on this
    /// bucket (docs/throttle.md, "Repeated passwords"), in the same hash tag as the
    /// record, so the count reads it in the same script. The suffix is a keyed digest:
    /// it names no client.
    pub fn repeats(&self, secret: &KeySecret, scope: &str) -> RepeatKey {
        let mut mac = secret.mac();
        mac.update(b"repeat\0");
        let device = match &self.bucket {
            Bucket::Device(device) => device.as_str(),
            Bucket::Account | Bucket::Flow(_) | Bucket::Challenge(_) => "",
        };
        mac.update(device.as_bytes());
        mac.update(b"\0");
        mac.update(scope.as_bytes());
        let digest = mac.finalize().into_bytes();
        let suffix = hex::encode(&digest[..SUFFIX_DIGEST_BYTES]);
        RepeatKey(format!("{KEY_PREFIX}{{{}}}:p:{suffix}", self.digest))
    }

    /// The hex digest (the hash tag's contents).
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The account's name in security events (docs/observability.md, "Security
    /// events"): 16 hex digits of SHA-256 over a fixed label and this key's keyed
    /// digest. The same for every record of the account (its login record, devices and
    /// flows) and on every daemon sharing the key secret; it is not the store's key, and
    /// nothing without the key secret turns an identifier into it.
    pub fn event_tag(&self) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::new()
            .chain_update(b"portcullis security event account v1\0")
            .chain_update(self.digest.as_bytes())
            .finalize();
        hex::encode(&digest[..8])
    }
}

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bucket = match self.bucket {
            Bucket::Account => "",
            Bucket::Device(_) => ", device",
            Bucket::Flow(flow) => flow.as_str(),
            Bucket::Challenge(_) => ", challenge",
        };
        let sep = if matches!(self.bucket, Bucket::Flow(_)) { ", " } else { "" };
        write!(f, "AccountKey({}…{sep}{bucket})", &self.digest[..8])
    }
}

/// Where one fingerprint's spray counts live. Its `Debug` shows neither part.
#[derive(Clone, PartialEq, Eq)]
pub struct SprayKey {
    /// 16 hex digits: a keyed digest of the realm name.
    realm_tag: String,
    /// The truncated password fingerprint.
    fingerprint: u16,
}

impl std::fmt::Debug for SprayKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SprayKey(<redacted>)")
    }
}

impl SprayKey {
    /// `portcullis:v2:{spray:<realm tag>:<4 hex>}:`: every spray key of this fingerprint
    /// starts so, and the braces make it one Redis Cluster hash tag, so the spray script
    /// runs on one node.
    pub fn prefix(&self) -> String {
        format!("{KEY_PREFIX}{{spray:{}:{:04x}}}:", self.realm_tag, self.fingerprint)
    }

    /// The Redis keys of the spray script, in its KEYS order: the failed HyperLogLog of
    /// each period parity, and the hash naming the period each parity holds.
    pub fn redis_keys(&self) -> [String; 3] {
        let p = self.prefix();
        [format!("{p}failed:0"), format!("{p}failed:1"), format!("{p}periods")]
    }

    /// The spray key of `fingerprint` in the realm whose keyed tag is `realm_tag`
    /// (`crate::defence::spray::SprayFingerprints` derives both).
    pub fn new(realm_tag: String, fingerprint: u16) -> Self {
        Self { realm_tag, fingerprint }
    }

    /// The fingerprint, for this process's own tracking (`crate::defence::spray::SprayWatch`);
    /// never logged.
    pub fn fingerprint(&self) -> u16 {
        self.fingerprint
    }

    /// The embedded store's entry of one account key under this fingerprint
    /// (docs/spray.md, "Where it lives"): `<prefix>member:<account digest>`.
    pub fn member(&self, account: &AccountKey) -> String {
        format!("{}member:{}", self.prefix(), account.digest())
    }

    /// The embedded store's entry of this fingerprint's counts: `<prefix>count`.
    pub fn count(&self) -> String {
        format!("{}count", self.prefix())
    }
}

/// Where one realm's tallies live (docs/observability.md, "A realm's status"):
/// `portcullis:v2:{t:<16 hex>}:…`, a keyed digest of the realm name (so no realm name is
/// in a key either) as one Redis Cluster hash tag, so a realm's tally is read and written
/// in one script. `Debug` shows neither part.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct TallyKey {
    realm_tag: String,
}

impl TallyKey {
    /// The tally key of `realm`.
    pub fn new(secret: &KeySecret, realm: &str) -> Self {
        let mut mac = secret.mac();
        mac.update(b"realm-tally\0");
        update_framed(&mut mac, realm.as_bytes());
        Self { realm_tag: hex::encode(&mac.finalize().into_bytes()[..SUFFIX_DIGEST_BYTES]) }
    }

    /// Every key starts so: `portcullis:v2:{t:<16 hex>}:`.
    pub fn prefix(&self) -> String {
        format!("{KEY_PREFIX}{{t:{}}}:", self.realm_tag)
    }

    /// The Redis keys of the tally scripts after `labels` (the hash naming each slot's
    /// minute), in their order: for each slot, its counters' hash (`c:<slot>`) and then
    /// each distinct tally's HyperLogLog (`<name>:<slot>`, in
    /// [`crate::throttle::realm_tally::Distinct::ALL`]'s order).
    pub fn slot_keys(&self) -> Vec<String> {
        use crate::throttle::realm_tally::{Distinct, SLOTS};
        let p = self.prefix();
        let mut keys = Vec::with_capacity(SLOTS as usize * (1 + Distinct::ALL.len()));
        for slot in 0..SLOTS {
            keys.push(format!("{p}c:{slot}"));
            keys.extend(Distinct::ALL.iter().map(|d| format!("{p}{}:{slot}", d.name())));
        }
        keys
    }

    /// The hash naming the minute each slot holds.
    pub fn labels(&self) -> String {
        format!("{}labels", self.prefix())
    }

    /// The embedded store's entry of one tally (`<prefix><name>`), and of one member of
    /// a distinct tally (`<prefix><name>:<member>`).
    pub fn entry(&self, name: &str, member: Option<&str>) -> String {
        match member {
            Some(m) => format!("{}{name}:{m}", self.prefix()),
            None => format!("{}{name}", self.prefix()),
        }
    }
}

impl std::fmt::Debug for TallyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TallyKey(<redacted>)")
    }
}

/// Where one realm's report of one candidate policy lives (docs/throttle.md, "Trying a
/// policy in shadow"): `portcullis:v2:{c:<16 hex>}`, a keyed digest of the realm name and
/// the candidate's id, one key (its own hash tag). `Debug` shows neither part.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CandidateKey(String);

impl CandidateKey {
    /// The report of candidate `id` in `realm`.
    pub fn new(secret: &KeySecret, realm: &str, id: &str) -> Self {
        let mut mac = secret.mac();
        mac.update(b"candidate-report\0");
        update_framed(&mut mac, realm.as_bytes());
        update_framed(&mut mac, id.as_bytes());
        let tag = hex::encode(&mac.finalize().into_bytes()[..SUFFIX_DIGEST_BYTES]);
        Self(format!("{KEY_PREFIX}{{c:{tag}}}"))
    }

    /// The store's key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for CandidateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CandidateKey(<redacted>)")
    }
}

/// Where one client network's token bucket lives (docs/throttle.md, "Per client
/// network"): `portcullis:v2:{n:<32 hex>}`, a keyed digest of (realm, network), so the
/// stored key holds no address, and its own hash tag (one key: a single-slot script).
/// `Debug` shows only [`NetworkKey::tag`].
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct NetworkKey {
    digest: String,
}

impl NetworkKey {
    /// The key of `network` (`crate::defence::client_network::Network::as_text`) in `realm`.
    pub fn new(secret: &KeySecret, realm: &str, network: &str) -> Self {
        let mut mac = secret.mac();
        // Domain separation from account keys (whose input starts with a length),
        // attempt ids and devices.
        mac.update(b"network\0");
        // Both are bounded (a realm name, a client_key of at most 256 bytes).
        update_framed(&mut mac, realm.as_bytes());
        update_framed(&mut mac, network.as_bytes());
        let digest = mac.finalize().into_bytes();
        Self { digest: hex::encode(&digest[..ACCOUNT_DIGEST_BYTES]) }
    }

    /// The per-network budget of a mail flow (docs/flows.md): the same shape as the
    /// login's network bucket, keyed with the flow's name as well, so the two never
    /// share tokens.
    pub fn flow(secret: &KeySecret, realm: &str, flow: Flow, network: &str) -> Self {
        let mut mac = secret.mac();
        mac.update(b"flow-network\0");
        update_framed(&mut mac, flow.as_str().as_bytes());
        update_framed(&mut mac, realm.as_bytes());
        update_framed(&mut mac, network.as_bytes());
        let digest = mac.finalize().into_bytes();
        Self { digest: hex::encode(&digest[..ACCOUNT_DIGEST_BYTES]) }
    }

    /// The store's key.
    pub fn as_key(&self) -> String {
        format!("{KEY_PREFIX}{{n:{}}}", self.digest)
    }

    /// The count of this bucket's tokens that `RecordAttempt`s of `account` hold
    /// (`portcullis:v2:{n:<32 hex>}:h:<account digest>`): in the bucket's hash tag, so a
    /// take or a give-back and the count change in one script.
    pub fn held_by(&self, account: &AccountKey) -> HeldKey {
        HeldKey(format!("{}:h:{}", self.as_key(), account.digest()))
    }

    /// `portcullis:v2:{n:<32 hex>}:s`: the network's bucket under the realm's candidate
    /// policy (docs/throttle.md, "Trying a policy in shadow"), in the same hash tag.
    pub fn candidate_bucket(&self) -> String {
        format!("{}:s", self.as_key())
    }

    /// The first 16 hex digits of the digest: what log lines and `Admin/InspectNetwork`
    /// name a network by, so an operator can match the two without any address being
    /// logged.
    pub fn tag(&self) -> &str {
        &self.digest[..16]
    }
}

impl std::fmt::Debug for NetworkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NetworkKey({})", self.tag())
    }
}

/// The store key of the tokens of one network's bucket that one account's
/// `RecordAttempt`s hold ([`NetworkKey::held_by`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldKey(String);

impl HeldKey {
    /// The key as the store names it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `<held>:s`: the candidate's part of the held count (`network_bucket.lua`), in
    /// the same hash tag.
    pub fn candidate(&self) -> String {
        format!("{}:s", self.0)
    }
}

/// The store key of one client's refused-password list on one bucket
/// ([`AccountKey::repeats`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepeatKey(String);

impl RepeatKey {
    /// The key as the store names it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The store key of one `attempt_id`'s answer ([`AccountKey::attempt`]): built where the
/// request is read, so a store never needs the key secret. It carries the request's
/// binding ([`AttemptKey::bound`]): the stored answer is given back only to a request
/// with the same binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptKey(String, u64);

impl AttemptKey {
    /// The key as the store names it.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This id bound to the rest of its request (`parts`: the request's fields besides
    /// the account and the id, each framed): a keyed digest (64 bits) the store keeps
    /// with the first answer, so a replay of the id with another request is told apart
    /// ([`crate::store::error::StoreError::AttemptIdReused`]) instead of getting an answer that
    /// was another request's. Names no field: keyed with the key secret.
    pub fn bound(self, secret: &KeySecret, parts: &[&[u8]]) -> Self {
        let mut mac = secret.mac();
        mac.update(b"attempt request\0");
        mac.update(self.0.as_bytes());
        for part in parts {
            update_framed(&mut mac, part);
        }
        let digest = mac.finalize().into_bytes();
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest[..8]);
        // 0 is "unbound" (an answer stored before bindings): never a binding.
        Self(self.0, u64::from_be_bytes(word).max(1))
    }

    /// The binding ([`AttemptKey::bound`]); 0: none.
    pub fn binding(&self) -> u64 {
        self.1
    }

    /// The binding as the Redis scripts keep it: 16 hex digits, or empty for none.
    pub fn binding_hex(&self) -> String {
        if self.1 == 0 { String::new() } else { format!("{:016x}", self.1) }
    }
}

/// A gateway-chosen id that makes a retried attempt idempotent (docs/architecture.md): 1–128
/// bytes of printable ASCII, e.g. a UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptId(String);

/// Longest `attempt_id`, in bytes.
pub const MAX_ATTEMPT_ID_BYTES: usize = 128;

impl AttemptId {
    /// `Ok(None)` for an empty id (the attempt is not deduplicated).
    ///
    /// # Errors
    /// A message naming the field when the id is too long or not printable ASCII.
    pub fn parse(raw: &str) -> Result<Option<Self>, &'static str> {
        if raw.is_empty() {
            Ok(None)
        } else if raw.len() > MAX_ATTEMPT_ID_BYTES {
            Err("attempt_id is longer than 128 bytes")
        } else if !raw.bytes().all(|b| b.is_ascii_graphic()) {
            Err("attempt_id must be printable ASCII without spaces")
        } else {
            Ok(Some(Self(raw.to_owned())))
        }
    }
}

#[cfg(test)]
mod tests;
