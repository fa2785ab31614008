//! The defences: each one a room of its own, beside the login throttle it sharpens.
//!
//! A *defence* is a rule that decides, for one login attempt, something the per-account
//! count alone cannot: whose device this is ([`devices`]), whether one password is being
//! tried across the realm ([`spray`]), whether this is the same wrong password again
//! ([`repeats`]), whether the client's network has used up its failures
//! ([`client_network`]), whether an accepted password is breached ([`breach`]). Each
//! owns its keyed values, its realm settings' meaning and its episodes; the login flow
//! (`crate::login`) calls it at one step and turns its answer into a signal or a
//! verdict; the store keeps whatever it must share across daemons.
//!
//! # Adding a store-backed defence: the checklist
//! 1. **Settings**: its fields in the realm's table (`src/realm/mod.rs`), each with a
//!    default; their ranges checked by the defence itself, a `checked` constructor of
//!    its policy with [`crate::setting`]'s range checks (as
//!    [`spray::SprayPolicy::checked`] and [`client_network::NetworkPolicy::checked`]),
//!    which the realm calls; and a line in `deploy/portcullis.toml`.
//! 2. **Keys**: its key kind in `src/store/keys/`, inside the account's (or its
//!    own) Redis Cluster hash tag, with a test that pins the exact format.
//! 3. **Pure rule**: the arithmetic in `src/throttle/<rule>.rs` (no store, time passed
//!    in), naming the Lua script that mirrors it.
//! 4. **Store**: a rule named for what it keeps (docs/architecture.md, "One name per
//!    rule"): its trait and request structs in `src/store/<rule>.rs`, added to
//!    [`crate::store::Store`]'s sum; its `.lua` file in `src/store/lua/` opening with
//!    its KEYS/ARGV contract (its `-- contract:` line) and a worked example, and its
//!    `script!` in `src/store/redis/scripts.rs` naming the same keys, arguments and
//!    reply; the Redis side in `src/store/redis/<rule>.rs`, the
//!    embedded side in `src/store/embedded/<rule>.rs` (calling the pure rule); the
//!    trait in the instrumented store (`src/store/instrumented.rs`) and the test
//!    suite's faulty store (`tests/support/src/faulty.rs`).
//! 5. **Conformance**: a module in `tests/integration/store_conformance/` that runs the
//!    same sequence on both stores and compares with the pure rule, and corrupt stored
//!    values read as store errors (a deny).
//! 6. **Login step**: one call from `src/login/` and, if it changes the answer, a
//!    signal on the wire (`proto/`), produced in the one place answers are built
//!    (`src/rpc/answers.rs`); every exit through the login's settle step.
//! 7. **Telemetry**: its metric names in `src/telemetry/metrics.rs` only, with bounded
//!    labels, described in `docs/observability.md`.
//! 8. **Docs**: a section in `docs/` saying what it stops and what it does not.
//!
//! A defence that needs an RPC of its own also walks the RPC checklist (`crate::rpc`,
//! docs/architecture.md, "Adding an RPC").

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

pub mod breach;
pub mod client_network;
pub mod devices;
pub mod repeats;
pub mod spray;

/// Runs `tick(watch, now)` every `interval` (the first after one interval) until `watch`
/// is dropped: how a defence's episodes end without traffic (the spray and network
/// watches).
pub(crate) fn spawn_ticks<T: Send + Sync + 'static>(
    watch: &Arc<T>,
    interval: Duration,
    tick: impl Fn(&T, Instant) + Send + 'static,
) {
    let weak: Weak<T> = Arc::downgrade(watch);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(interval);
        ticks.tick().await;
        loop {
            ticks.tick().await;
            let Some(watch) = weak.upgrade() else { return };
            tick(&watch, Instant::now());
        }
    });
}
