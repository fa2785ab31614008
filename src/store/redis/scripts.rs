//! The Lua scripts, one per store operation, each in its own file under `lua/` named
//! for its rule (`lua/X.lua`, or `lua/X/<operation>.lua` for a rule with several) that
//! opens with its KEYS/ARGV contract. Every shape (standalone, cluster, Sentinel) runs the same
//! scripts; a new operation adds a file and a function here.
//!
//! `redis::Script` sends `EVALSHA` and, on `NOSCRIPT` (a restart, `SCRIPT FLUSH`, a
//! promoted replica that never saw `SCRIPT LOAD`), loads the script and sends it again.
//! `NOSCRIPT` means the script did not run, so the retry never counts an attempt twice.
//!
//! Each script is loaded as `lua/prelude.lua` followed by its own file, so the checks of
//! stored values (`stored()`) are written once.

use std::sync::OnceLock;

use redis::Script;

/// The source of `lua/<file>` as Redis runs it: the prelude, then the file.
macro_rules! source {
    ($file:literal) => {
        concat!(include_str!("../lua/prelude.lua"), include_str!(concat!("../lua/", $file)))
    };
}

macro_rules! script {
    ($(#[$doc:meta])* $name:ident, $file:literal) => {
        $(#[$doc])*
        pub(crate) fn $name() -> &'static Script {
            static SCRIPT: OnceLock<Script> = OnceLock::new();
            SCRIPT.get_or_init(|| Script::new(source!($file)))
        }
    };
}

/// The source of `record_attempt.lua` as Redis runs it, for benches that call it
/// without the daemon (`EVALSHA` from `redis-benchmark`).
pub const RECORD_ATTEMPT_SOURCE: &str = source!("attempt_count/record_attempt.lua");

script!(
    /// `RecordAttempt`: count one attempt.
    record_attempt,
    "attempt_count/record_attempt.lua"
);
script!(
    /// `Admit`: is the door open (read only).
    admit,
    "attempt_count/admit.lua"
);
script!(
    /// Give back an attempt the CPU budget refused.
    refund,
    "attempt_count/refund.lua"
);
script!(
    /// `ClearAttempts`: delete the record.
    clear,
    "attempt_count/clear.lua"
);
script!(
    /// Admin `Inspect`: read a record and the store's clock (read only).
    inspect,
    "attempt_count/inspect.lua"
);
script!(
    /// Admin `RevokeDevices`: raise an account's device epoch.
    revoke_devices,
    "devices/revoke_devices.lua"
);
script!(
    /// Spray detection: note an account under a password fingerprint, count.
    spray_window,
    "spray_window.lua"
);
script!(
    /// The throttle per client network: take, give back, read or release a bucket.
    network_bucket,
    "network_bucket.lua"
);
script!(
    /// A failed comparison's password onto its client's refused-password list.
    repeat_list,
    "repeat_list.lua"
);
script!(
    /// The store's key check value: prove this daemon's key secret, or adopt it.
    key_check,
    "key_check.lua"
);
script!(
    /// A mail flow's send log: request a send, or read the log.
    send_log,
    "send_log.lua"
);
script!(
    /// Grace logins: count an accept of a breached password.
    breached_count,
    "breached_count.lua"
);
script!(
    /// `ConfirmDevice`: a challenge's one use, the code step's door, the epoch, and the
    /// clears, in one step.
    confirm_device,
    "devices/confirm_device.lua"
);
