//! The Lua scripts, one per store operation, each in its own file under `lua/` named
//! for its rule (`lua/X.lua`, or `lua/X/<operation>.lua` for a rule with several) that
//! opens with its KEYS/ARGV contract. Every shape (standalone, cluster, Sentinel) runs the
//! same scripts; a new operation adds a file and a [`script!`] here.
//!
//! Each script's contract is written once on this side, by name: its keys (the required
//! ones, then the optional ones in the order they are sent), its arguments with their
//! types, and its reply's fields. A caller fills `Keys` and `Args` by name and reads
//! `Reply` by name; nothing is sent or read by position outside this file. Every script's
//! header opens with the same contract as one `-- contract:` line, and its
//! `-- ARGV[n]  name` lines name the arguments in that order: the tests below read both
//! and fail when a header and its caller disagree.
//!
//! [`Invocation`](super::invocation::Invocation) sends `EVALSHA` and, on `NOSCRIPT` (a restart, `SCRIPT FLUSH`, a
//! promoted replica that never saw `SCRIPT LOAD`), loads the script and sends it again.
//! `NOSCRIPT` means the script did not run, so the retry never counts an attempt twice.
//!
//! Each script is loaded as `lua/prelude.lua` followed by its own file, so the checks of
//! stored values (`stored()`) are written once.

/// The source of `lua/<file>` as Redis runs it: the prelude, then the file.
macro_rules! source {
    ($file:literal) => {
        concat!(include_str!("../lua/prelude.lua"), include_str!(concat!("../lua/", $file)))
    };
}

/// One script and its contract, as a module of its name: `FILE`, `KEYS`, `ARGV` and
/// `REPLY` (the names, an optional one marked `?`, a list of keys `*`), `Keys` and `Args`
/// (sent in that order: the required keys or arguments, then each optional one that is
/// `Some`, then the keys of the list, for a script whose keys are a fixed family),
/// `Reply` (read by [`Reply::parse`](self), which refuses a reply of another length), and
/// `call`, the invocation. A script that answers bytes (`reply: bytes value`) has no
/// `Reply` struct.
macro_rules! script {
    (
        $(#[$doc:meta])*
        $name:ident = $file:literal {
            keys: [$($key:ident),* $(; $($okey:ident),*)?],
            $(list_keys: $lkey:ident,)?
            argv: [$($arg:ident: $aty:ty),* $(; $($oarg:ident: $oty:ty),*)?],
            reply: [$($field:ident),+] $(,)?
        }
    ) => {
        script!(@module $(#[$doc])* $name = $file,
            [$($key),* $(; $($okey),*)?], [$($lkey)?], [$($arg: $aty),* $(; $($oarg: $oty),*)?],
            [$(stringify!($field)),+], {
                /// The script's reply, by name.
                #[derive(Debug, Clone, Copy, PartialEq, Eq)]
                pub(crate) struct Reply {
                    $(#[allow(missing_docs)] pub(crate) $field: i64,)+
                }

                impl Reply {
                    /// The reply's integers by name.
                    ///
                    /// # Errors
                    /// [`StoreError::Protocol`] for a reply of another length.
                    pub(crate) fn parse(values: &[i64]) -> Result<Self, StoreError> {
                        let [$($field),+] = values else {
                            return Err(StoreError::Protocol(format!(
                                "{FILE} returned {} values",
                                values.len()
                            )));
                        };
                        Ok(Self { $($field: *$field),+ })
                    }
                }
            });
    };
    (
        $(#[$doc:meta])*
        $name:ident = $file:literal {
            keys: [$($key:ident),* $(; $($okey:ident),*)?],
            argv: [$($arg:ident: $aty:ty),* $(; $($oarg:ident: $oty:ty),*)?],
            reply: bytes $field:ident $(,)?
        }
    ) => {
        script!(@module $(#[$doc])* $name = $file,
            [$($key),* $(; $($okey),*)?], [], [$($arg: $aty),* $(; $($oarg: $oty),*)?],
            [stringify!($field)], {});
    };
    (@module
        $(#[$doc:meta])* $name:ident = $file:literal,
        [$($key:ident),* $(; $($okey:ident),*)?],
        [$($lkey:ident)?],
        [$($arg:ident: $aty:ty),* $(; $($oarg:ident: $oty:ty),*)?],
        [$($reply:expr),+], { $($reply_items:item)* }
    ) => {
        $(#[$doc])*
        pub(crate) mod $name {
            use std::sync::OnceLock;

            use redis::Script;

            use crate::store::redis::invocation::Invocation;

            #[allow(unused_imports)]
            use crate::store::error::StoreError;

            /// The script's file under `lua/`.
            #[allow(dead_code)] // only scripts that answer integers name it in errors
            pub(crate) const FILE: &str = $file;
            /// The keys' names, in the order they are sent (`?`: sent when given).
            #[cfg(test)]
            pub(crate) const KEYS: &[&str] = &[
                $(stringify!($key),)*
                $($(concat!(stringify!($okey), "?"),)*)?
                $(concat!(stringify!($lkey), "*"),)?
            ];
            /// The arguments' names, in the order they are sent (`?`: sent when given).
            #[cfg(test)]
            pub(crate) const ARGV: &[&str] =
                &[$(stringify!($arg),)* $($(concat!(stringify!($oarg), "?"),)*)?];
            /// The reply's fields, in the order the script answers them.
            #[cfg(test)]
            pub(crate) const REPLY: &[&str] = &[$($reply),+];

            /// The script's keys, by name (no default: a required key is always named).
            #[derive(Debug, Clone)]
            pub(crate) struct Keys {
                $(#[allow(missing_docs)] pub(crate) $key: String,)*
                $($(#[allow(missing_docs)] pub(crate) $okey: Option<String>,)*)?
                $(#[allow(missing_docs)] pub(crate) $lkey: Vec<String>,)?
            }

            /// The script's arguments, by name.
            #[derive(Debug, Clone)]
            pub(crate) struct Args {
                $(#[allow(missing_docs)] pub(crate) $arg: $aty,)*
                $($(#[allow(missing_docs)] pub(crate) $oarg: Option<$oty>,)*)?
            }

            $($reply_items)*

            /// The script, loaded once per process.
            pub(crate) fn script() -> &'static Script {
                static SCRIPT: OnceLock<Script> = OnceLock::new();
                SCRIPT.get_or_init(|| Script::new(source!($file)))
            }

            /// `args` as the text the script receives, in its order (for benches that
            /// call the script without the daemon).
            #[allow(dead_code, unused_variables, unused_mut)] // a script without arguments
            pub(crate) fn argv_text(args: &Args) -> Vec<String> {
                let mut text: Vec<Vec<u8>> = Vec::new();
                $(text.extend(redis::ToRedisArgs::to_redis_args(&args.$arg));)*
                $($(if let Some(arg) = &args.$oarg {
                    text.extend(redis::ToRedisArgs::to_redis_args(arg));
                })*)?
                text.into_iter().map(|t| String::from_utf8_lossy(&t).into_owned()).collect()
            }

            /// The invocation of the script with `keys` and `args`, each in its order.
            #[allow(unused_variables, unused_mut)] // a script without arguments
            pub(crate) fn call(keys: &Keys, args: &Args) -> Invocation {
                const REQUIRED: &[&str] = &[$(stringify!($key),)*];
                let count = REQUIRED.len()
                    $($(+ usize::from(keys.$okey.is_some()))*)?
                    $(+ keys.$lkey.len())?;
                let mut call = Invocation::new(script(), count, ARGUMENTS);
                $(call.key(&keys.$key);)*
                $($(if let Some(key) = &keys.$okey {
                    call.key(key);
                })*)?
                $(for key in &keys.$lkey {
                    call.key(key);
                })?
                $(call.arg(&args.$arg);)*
                $($(if let Some(arg) = &args.$oarg {
                    call.arg(arg);
                })*)?
                call
            }

            /// The most arguments the script takes (keys apart).
            const ARGUMENTS: usize = {
                const NAMES: &[&str] = &[$(stringify!($arg),)* $($(stringify!($oarg),)*)?];
                NAMES.len()
            };
        }
    };
}

/// The source of `record_attempt.lua` as Redis runs it, for benches that call it
/// without the daemon (`EVALSHA` from `redis-benchmark`).
pub const RECORD_ATTEMPT_SOURCE: &str = source!("attempt_count/record_attempt.lua");

script!(
    /// `RecordAttempt`: count one attempt (`device_bucket` and `device_epoch` for a
    /// device's attempt, `device_epoch` alone when the account's epoch is asked for). Its
    /// reply's integers come packed in one string: `attempt_count::packed_integers`.
    record_attempt = "attempt_count/record_attempt.lua" {
        keys: [
            record;
            device_bucket,
            device_epoch,
            device_index,
            attempt,
            repeat_list,
            networks,
            device_networks,
            candidate,
            device_candidate
        ],
        argv: [
            max_failures: u32,
            first_window_ms: u64,
            max_window_ms: u64,
            retention_ms: u64,
            escalate: u8,
            max_step: u32,
            device_epoch: i64,
            epoch_ttl_ms: u64,
            attempt_ttl_ms: u64,
            fingerprint: String,
            max_consecutive: u32,
            lockout_ms: u64,
            binding: String,
            network: String,
            max_networks: usize,
            device_tag: String,
            max_devices: usize,
            candidate: String
        ],
        reply: [
            allowed, failures, step, window_start_ms, replays, trusted, repeat,
            consecutive, epoch, added, shadow, shadow_failures, shadow_window_start_ms,
            shadow_added
        ],
    }
);
script!(
    /// `Admit`: is the door open (read only).
    admit = "attempt_count/admit.lua" {
        keys: [record],
        argv: [max_failures: u32, first_window_ms: u64, max_window_ms: u64, max_consecutive: u32],
        reply: [open],
    }
);
script!(
    /// Give back an attempt the CPU budget refused.
    refund = "attempt_count/refund.lua" {
        keys: [record; attempt, candidate],
        argv: [window_start_ms: u64, allowed: u8, candidate: String],
        reply: [refunded],
    }
);
script!(
    /// `ClearAttempts`: delete the record; `Verify`'s accept also reads (and keeps) the
    /// account's device epoch.
    clear = "attempt_count/clear.lua" {
        keys: [record, networks; device_epoch, candidate],
        argv: [; epoch_ttl_ms: u64],
        reply: [deleted, epoch, candidate_refused],
    }
);
script!(
    /// Admin `Inspect`: read a record, its window's networks, the account's device
    /// lanes and the store's clock (read only).
    inspect = "attempt_count/inspect.lua" {
        keys: [record, networks; device_index, candidate],
        argv: [; first_window_ms: u64, max_window_ms: u64, bucket_prefix: String],
        reply: [
            exists, failures, window_start_ms, step, now_ms, repeats, consecutive,
            locked_until, shut_at, networks, device_lanes, device_failures, candidate_exists,
            candidate_failures, candidate_window_start_ms, candidate_step,
            candidate_consecutive, candidate_locked_until
        ],
    }
);
script!(
    /// Admin `RevokeDevices`: raise an account's device epoch.
    revoke_devices = "devices/revoke_devices.lua" {
        keys: [device_epoch],
        argv: [ttl_ms: u64],
        reply: [epoch],
    }
);
script!(
    /// `ConfirmDevice`: a challenge's one use, the code step's door, the epoch, and the
    /// clears, in one step.
    confirm_device = "devices/confirm_device.lua" {
        keys: [record, second_factor, device_epoch, mark, second_factor_candidate, candidate],
        argv: [
            challenge_epoch: u64,
            max_failures: u32,
            first_window_ms: u64,
            max_window_ms: u64,
            max_consecutive: u32,
            mark_ttl_ms: u64,
            epoch_ttl_ms: u64
        ],
        reply: [confirmed, detail, code_candidate_refused],
    }
);
script!(
    /// Spray detection: note an account under a password fingerprint, count.
    spray_window = "spray_window.lua" {
        keys: [failed_even, failed_odd, periods],
        argv: [note: &'static str, member: String, period_ms: u64],
        reply: [count],
    }
);
script!(
    /// The throttle per client network: take, give back, read or release a bucket.
    network_bucket = "network_bucket.lua" {
        keys: [bucket; held, shadow, shadow_held],
        argv: [op: &'static str, capacity: u32, interval_ms: u64, candidate: String],
        reply: [taken, tokens, full_in_ms, shadow],
    }
);
script!(
    /// A failed comparison's password onto its client's refused-password list.
    repeat_list = "repeat_list.lua" {
        keys: [record, list],
        argv: [fingerprint: String, max_len: u32],
        reply: [noted],
    }
);
script!(
    /// The store's key check value: prove this daemon's key secret, or adopt it.
    key_check = "key_check.lua" {
        keys: [check_value],
        argv: [check: String, mode: &'static str],
        reply: bytes value,
    }
);
script!(
    /// A mail flow's send log: request a send, or read the log.
    send_log = "send_log.lua" {
        keys: [log; attempt, candidate],
        argv: [
            op: &'static str,
            min_interval_ms: u64,
            daily_cap: u32,
            cap_window_ms: u64,
            attempt_ttl_ms: u64,
            binding: String,
            candidate: String
        ],
        reply: [allowed, sends, next_in_ms, replays, shadow],
    }
);
script!(
    /// Grace logins: count an accept of a breached password.
    breached_count = "breached_count.lua" {
        keys: [count],
        argv: [credential: String, ttl_ms: u64],
        reply: [count],
    }
);

script!(
    /// A realm's status: add a daemon's notes to the current minute's slot.
    realm_tally_note = "realm_tally/note.lua" {
        keys: [labels],
        list_keys: slots,
        argv: [
            counts: String,
            locked: String,
            ceiling: String,
            networks: String,
            spray: String,
            grace: String,
            ttl_ms: u64
        ],
        reply: [noted],
    }
);
script!(
    /// A realm's status: read its tally over each look-back.
    realm_tally_read = "realm_tally/read.lua" {
        keys: [labels],
        list_keys: slots,
        argv: [
            locked_slots: u64,
            ceiling_slots: u64,
            networks_slots: u64,
            spray_slots: u64,
            grace_slots: u64,
            count_slots: u64
        ],
        reply: [
            now_ms,
            locked,
            ceiling,
            networks,
            spray,
            grace,
            challenges,
            confirmed,
            refused_2f,
            refused_rc,
            refused_pr,
            refused_vr
        ],
    }
);

script!(
    /// A candidate policy's report: add counts, or read it.
    candidate_report = "candidate_report.lua" {
        keys: [report],
        argv: [op: &'static str, defence: &'static str, counts: String, ttl_ms: u64],
        reply: [
            since_ms,
            would_refuse,
            would_allow,
            user_locked_out,
            step_up_added,
            step_up_dropped
        ],
    }
);

/// A script's file and its contract's names: keys, arguments, reply.
#[cfg(test)]
type Contract =
    (&'static str, &'static [&'static str], &'static [&'static str], &'static [&'static str]);

/// Every script's file and contract, for the tests.
#[cfg(test)]
const CONTRACTS: [Contract; 16] = [
    (record_attempt::FILE, record_attempt::KEYS, record_attempt::ARGV, record_attempt::REPLY),
    (admit::FILE, admit::KEYS, admit::ARGV, admit::REPLY),
    (refund::FILE, refund::KEYS, refund::ARGV, refund::REPLY),
    (clear::FILE, clear::KEYS, clear::ARGV, clear::REPLY),
    (inspect::FILE, inspect::KEYS, inspect::ARGV, inspect::REPLY),
    (revoke_devices::FILE, revoke_devices::KEYS, revoke_devices::ARGV, revoke_devices::REPLY),
    (confirm_device::FILE, confirm_device::KEYS, confirm_device::ARGV, confirm_device::REPLY),
    (spray_window::FILE, spray_window::KEYS, spray_window::ARGV, spray_window::REPLY),
    (network_bucket::FILE, network_bucket::KEYS, network_bucket::ARGV, network_bucket::REPLY),
    (repeat_list::FILE, repeat_list::KEYS, repeat_list::ARGV, repeat_list::REPLY),
    (key_check::FILE, key_check::KEYS, key_check::ARGV, key_check::REPLY),
    (send_log::FILE, send_log::KEYS, send_log::ARGV, send_log::REPLY),
    (breached_count::FILE, breached_count::KEYS, breached_count::ARGV, breached_count::REPLY),
    (
        realm_tally_note::FILE,
        realm_tally_note::KEYS,
        realm_tally_note::ARGV,
        realm_tally_note::REPLY,
    ),
    (
        candidate_report::FILE,
        candidate_report::KEYS,
        candidate_report::ARGV,
        candidate_report::REPLY,
    ),
    (
        realm_tally_read::FILE,
        realm_tally_read::KEYS,
        realm_tally_read::ARGV,
        realm_tally_read::REPLY,
    ),
];

#[cfg(test)]
mod tests {
    use super::CONTRACTS;

    /// `KEYS a, b? | ARGV x | REPLY r` as the three lists of names.
    fn contract_line(header: &str) -> Option<[Vec<String>; 3]> {
        let line = header.lines().find_map(|l| l.strip_prefix("-- contract: "))?;
        let mut parts = line.split(" | ");
        let mut list = |head: &str| -> Option<Vec<String>> {
            let part = parts.next()?.strip_prefix(head)?.trim();
            let names = part.split(", ").filter(|s| !s.is_empty() && *s != "(none)");
            Some(names.map(str::to_owned).collect())
        };
        Some([list("KEYS")?, list("ARGV")?, list("REPLY")?])
    }

    /// The names the `-- ARGV[n]  name` lines give, in their order.
    fn argv_lines(header: &str) -> Vec<String> {
        header
            .lines()
            .filter_map(|l| l.strip_prefix("-- ARGV["))
            .filter_map(|l| l.split_once(']'))
            .map(|(_, rest)| rest.split_whitespace().next().unwrap_or_default())
            .map(|name| name.trim_end_matches(':').to_owned())
            .collect()
    }

    fn header_of(file: &str) -> String {
        let path = format!("{}/src/store/lua/{file}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap();
        text.lines().take_while(|l| l.starts_with("--")).collect::<Vec<_>>().join("\n")
    }

    /// A call's command as text: `EVALSHA`, the SHA1, the key count, keys, arguments.
    fn words(call: &crate::store::redis::invocation::Invocation) -> Vec<String> {
        call.command()
            .args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<not bytes>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn a_call_counts_the_keys_it_sends_and_sends_the_arguments_after_them() {
        use super::refund;
        let keys = refund::Keys {
            record: "{a:1}:r".into(),
            attempt: None,
            candidate: Some("{a:1}:r:s".into()),
        };
        let args = refund::Args { window_start_ms: 7, allowed: 1, candidate: "5,1".into() };
        let sha = refund::script().get_hash().to_owned();
        assert_eq!(
            words(&refund::call(&keys, &args)),
            ["EVALSHA", &sha, "2", "{a:1}:r", "{a:1}:r:s", "7", "1", "5,1"]
        );
        let every = refund::Keys { attempt: Some("{a:1}:a".into()), ..keys };
        assert_eq!(
            words(&refund::call(&every, &args))[2..6],
            ["3", "{a:1}:r", "{a:1}:a", "{a:1}:r:s"]
        );

        use super::realm_tally_read as read;
        let keys = read::Keys {
            labels: "{t:1}:l".into(),
            slots: vec!["{t:1}:0".into(), "{t:1}:1".into()],
        };
        let args = read::Args {
            locked_slots: 1,
            ceiling_slots: 2,
            networks_slots: 3,
            spray_slots: 4,
            grace_slots: 5,
            count_slots: 6,
        };
        assert_eq!(
            words(&read::call(&keys, &args))[2..],
            ["3", "{t:1}:l", "{t:1}:0", "{t:1}:1", "1", "2", "3", "4", "5", "6"]
        );
    }

    #[test]
    fn every_scripts_header_names_the_keys_arguments_and_reply_its_caller_uses() {
        for (file, keys, argv, reply) in CONTRACTS {
            let header = header_of(file);
            let [h_keys, h_argv, h_reply] =
                contract_line(&header).unwrap_or_else(|| panic!("{file}: no `-- contract:` line"));
            assert_eq!(h_keys, keys, "{file}: KEYS");
            assert_eq!(h_argv, argv, "{file}: ARGV");
            assert_eq!(h_reply, reply, "{file}: REPLY");
            let names: Vec<String> =
                argv.iter().map(|a| a.trim_end_matches('?').to_owned()).collect();
            assert_eq!(argv_lines(&header), names, "{file}: the ARGV[n] lines");
        }
    }

    #[test]
    fn every_script_file_has_a_contract_here() {
        let root = format!("{}/src/store/lua", env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        for dir in [
            root.clone(),
            format!("{root}/attempt_count"),
            format!("{root}/devices"),
            format!("{root}/realm_tally"),
        ] {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "lua") {
                    let relative = path.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
                    files.push(relative);
                }
            }
        }
        files.retain(|f| f != "prelude.lua");
        files.sort();
        let mut known: Vec<String> = CONTRACTS.iter().map(|c| c.0.to_owned()).collect();
        known.sort();
        assert_eq!(files, known);
    }

    #[test]
    fn the_header_check_sees_a_script_that_drifted() {
        let header = "-- x.lua\n-- contract: KEYS record; attempt? | ARGV a, b | REPLY r\n-- ARGV[1]  a\n-- ARGV[2]  c\n";
        let [keys, argv, reply] = contract_line(header).unwrap();
        assert_ne!(keys, ["record", "attempt?"], "a malformed list is not read as right");
        assert_eq!(argv, ["a", "b"]);
        assert_eq!(reply, ["r"]);
        assert_ne!(argv_lines(header), argv, "an ARGV line naming another argument");
        assert!(contract_line("-- no contract here\n").is_none());
    }
}
