//! The gRPC layer: translation only. A request is validated ([`crate::validate`]) before any
//! store or CPU work, handed to the domain (the store, `crate::login`), and its answer
//! built in one place ([`answers`]). Nothing below this layer knows gRPC.
//!
//! - [`governor`]: `portcullis.v1.Governor`, the gateways' RPCs.
//! - [`admin`]: `portcullis.v1.Admin`, the operators' RPCs.
//!
//! Which RPCs exist, their paths, permission names, spans and per-call metrics come from
//! the one RPC table generated from the `.proto` files (`portcullis_client::rpcs`); no
//! RPC is named by hand here.
//!
//! # Adding an RPC: the checklist (docs/architecture.md, "Adding an RPC")
//! 1. **Contract**: the `rpc` and its messages in `proto/portcullis/v1/`, commented; new
//!    field numbers only. The table, authorization, spans and metrics follow from it.
//! 2. **Handler**: the generated trait's method in [`governor`] or [`admin`]: validate
//!    ([`crate::validate`]), check the realm, call the domain, build the answer in [`answers`].
//! 3. **Rule and store**, if it reads or counts: the defence checklist's steps 2–5
//!    (`crate::defence`).
//! 4. **Callers**: the shipped caller tables that grant it; an operator RPC's CLI command.
//! 5. **Clients**: the Rust, TypeScript and Python clients' methods (the Python stubs
//!    are committed: `clients/python/scripts/generate_stubs.py`).
//! 6. **Docs**: its section in `docs/` and CHANGELOG.md's "Wire contract".

pub mod admin;
pub mod answers;
pub mod governor;

pub use admin::AdminService;
pub use answers::reject;
pub use governor::{GovernorService, MAX_REPLAYS};
