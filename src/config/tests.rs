//! The configuration as a user writes it: defaults, ranges, shapes, secrets redacted.

use super::*;
use crate::normalize::Normalization;
use crate::store::redis::settings::{RedisSettings, RedisShape};
use crate::throttle::candidate_report::Defence;
use crate::verify::hash::{Algorithm, HashParams, Prf};

const SECRET: &str = "0123456789abcdef0123456789abcdef";

fn from_toml(text: &str) -> Result<Settings, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path), &Overrides::default())?.validate(Some(SECRET.into()))
}

fn err(text: &str) -> String {
    from_toml(text).unwrap_err().to_string()
}

const REDIS: &str = "[store]\nredis_url = \"redis://127.0.0.1:1\"\n";

#[test]
fn defaults_match_the_design() {
    let s = from_toml(REDIS).unwrap();
    let realm = s.realms.get("default").unwrap();
    assert_eq!(realm.policy.max_failures, 5);
    assert_eq!(realm.policy.max_consecutive_failures, 100);
    assert_eq!(realm.policy.lockout_duration, Duration::from_secs(900), "first_window");
    assert_eq!(realm.flows.second_factor.max_consecutive_failures, 100);
    assert_eq!(realm.policy.first_window, Duration::from_secs(900));
    assert_eq!(realm.policy.max_window, Duration::from_secs(3600));
    assert_eq!(realm.policy.retention, Duration::from_secs(86400));
    assert!(!realm.policy.second_factor_required);
    assert_eq!(realm.normalization, Normalization::Email);
    assert_eq!(
        realm.hash_target,
        HashParams::Argon2 {
            algorithm: Algorithm::Argon2id,
            memory_kib: 19456,
            iterations: 2,
            parallelism: 1
        }
    );
    let cores = std::thread::available_parallelism().unwrap().get();
    let g = s.verify.budget;
    assert_eq!(g.max_concurrent, (cores / 2).max(1));
    assert_eq!(
        (g.max_per_client, g.max_wait, g.max_waiters),
        (1, Duration::from_secs(1), 8 * g.max_concurrent)
    );
    assert_eq!(g.max_trusted_waiters, 8 * g.max_concurrent);
    assert_eq!(realm.device_token_ttl, Duration::from_secs(90 * 24 * 3600));
}

#[test]
fn device_token_ttl_is_range_checked() {
    let e = err(&format!("{REDIS}[realms.default]\ndevice_token_ttl = \"10s\"\n"));
    assert!(e.contains("realms.default.device_token_ttl"), "{e}");
    let s = from_toml(&format!("{REDIS}[realms.default]\ndevice_token_ttl = \"7days\"\n"));
    assert_eq!(s.unwrap().realms.get("default").unwrap().device_token_ttl.as_secs(), 7 * 86400);
}

#[test]
fn a_node_list_may_not_mix_plain_and_tls_urls() {
    let e = err(
        "[store]\nredis_cluster_nodes = [\"rediss://a:1\", \"redis://b:2\"]\n[realms.default]\n",
    );
    assert!(e.contains("store.redis_cluster_nodes") && e.contains("mixes"), "{e}");
    let e = err(
        "[store]\nredis_sentinel = { master_name = \"m\", nodes = [\"redis://a:1\", \"rediss://b:2\"] }\n[realms.default]\n",
    );
    assert!(e.contains("store.redis_sentinel.nodes") && e.contains("mixes"), "{e}");
    assert!(from_toml("[store]\nredis_cluster_nodes = [\"rediss://a:1\", \"rediss://b:2\"]\n[realms.default]\n").is_ok());
}

#[test]
fn spray_settings_default_and_are_range_checked() {
    let s = from_toml(REDIS).unwrap();
    let spray = s.realms.get("default").unwrap().spray;
    assert_eq!(spray.threshold, 100);
    assert_eq!(spray.action, crate::defence::spray::SprayAction::Flag);
    assert_eq!(spray.period, Duration::from_secs(3600));
    for (line, setting) in [
        ("spray_threshold = 9", "realms.default.spray_threshold"),
        ("spray_threshold = 1000001", "realms.default.spray_threshold"),
        ("spray_period = \"59s\"", "realms.default.spray_period"),
        ("spray_period = \"8days\"", "realms.default.spray_period"),
    ] {
        let e = err(&format!("{REDIS}[realms.default]\n{line}\n"));
        assert!(e.contains(setting), "{line}: {e}");
    }
    let e = err(&format!("{REDIS}[realms.default]\nspray_action = \"block\"\n"));
    assert!(e.contains("spray_action"), "{e}");
    let s = from_toml(&format!(
        "{REDIS}[realms.default]\nspray_threshold = 10\nspray_action = \"reject\"\nspray_period = \"15m\"\n"
    ));
    let spray = s.unwrap().realms.get("default").unwrap().spray;
    assert_eq!(spray.threshold, 10);
    assert_eq!(spray.action, crate::defence::spray::SprayAction::Reject);
    assert_eq!(spray.period, Duration::from_secs(900));
}

#[test]
fn telemetry_settings_default_and_validate() {
    let s = from_toml(REDIS).unwrap();
    assert_eq!(s.admin_listen, Some("127.0.0.1:9464".parse().unwrap()));
    assert_eq!(s.shutdown_delay, Duration::from_secs(5));
    let s = from_toml(&format!(
        "shutdown_delay = \"250ms\"\n[telemetry]\nadmin_listen = \"\"\n{REDIS}"
    ))
    .unwrap();
    assert_eq!((s.admin_listen, s.shutdown_delay), (None, Duration::from_millis(250)));
    let e = err(&format!("[telemetry]\nadmin_listen = \"localhost\"\n{REDIS}"));
    assert!(e.contains("telemetry.admin_listen"), "{e}");
    let e = err(&format!("shutdown_delay = \"10m\"\n{REDIS}"));
    assert!(e.contains("shutdown_delay") && e.contains("0s–5m"), "{e}");
}

#[test]
fn out_of_range_values_name_the_setting_and_range() {
    let e = err(&format!("{REDIS}[realms.web]\nmax_failures = 101\n"));
    assert!(e.contains("realms.web.max_failures") && e.contains("1–100"), "{e}");
    let e = err(&format!("{REDIS}[realms.web]\nmax_failures = 0\n"));
    assert!(e.contains("realms.web.max_failures"), "{e}");
    let e = err(&format!("{REDIS}[realms.web]\nfirst_window = \"500ms\"\n"));
    assert!(e.contains("realms.web.first_window"), "{e}");
    let e = err(&format!("{REDIS}[realms.web]\nfirst_window = \"2h\"\n"));
    assert!(e.contains("realms.web.first_window"), "{e}");
    let e = err(&format!("{REDIS}[realms.web]\nmax_window = \"24h\"\n"));
    assert!(e.contains("realms.web.max_window") && e.contains("below retention"), "{e}");
    let e = err(&format!("{REDIS}[realms.web]\nretention = \"30m\"\n"));
    assert!(e.contains("realms.web."), "{e}");
    // The ceiling: at most 100 (NIST SP 800-63B-4 §3.2.2), never none.
    let e = err(&format!("{REDIS}[realms.web]\nmax_consecutive_failures = 101\n"));
    assert!(e.contains("realms.web.max_consecutive_failures") && e.contains("1–100"), "{e}");
    let e = err(&format!("{REDIS}[realms.web]\nmax_consecutive_failures = 0\n"));
    assert!(e.contains("realms.web.max_consecutive_failures"), "{e}");
    let e = err(&format!("{REDIS}[realms.web]\nlockout_duration = \"500ms\"\n"));
    assert!(e.contains("realms.web.lockout_duration"), "{e}");
    let e = err(&format!("{REDIS}[realms.web]\nlockout_duration = \"24h\"\n"));
    assert!(e.contains("realms.web.lockout_duration") && e.contains("below retention"), "{e}");
    let e = err("[store]\nredis_url = \"redis://x\"\noperation_timeout = \"0s\"\n");
    assert!(e.contains("store.operation_timeout"), "{e}");
    let e = err("[store]\nredis_url = \"redis://x\"\npool_size = 0\n");
    assert!(e.contains("store.pool_size"), "{e}");
    let e = err(&format!("{REDIS}[realms.web.hash]\nalgorithm = \"bcrypt\"\nbcrypt_cost = 15\n"));
    assert!(e.contains("realms.web.hash.bcrypt_cost") && e.contains("max_bcrypt_cost (14)"), "{e}");
    let e = err(&format!("{REDIS}[realms.web.hash]\nargon2_memory_kib = 200000\n"));
    assert!(e.contains("realms.web.hash.argon2_memory_kib"), "{e}");
    let e = err(&format!("{REDIS}[verify]\nmax_concurrent = 2\nmax_per_client = 3\n"));
    assert!(e.contains("verify.max_per_client") && e.contains("max_concurrent (2)"), "{e}");
    let e = err(&format!("{REDIS}[verify]\nmax_wait = \"2m\"\n"));
    assert!(e.contains("verify.max_wait"), "{e}");
    let e = err(&format!("{REDIS}[verify]\nmax_bcrypt_cost = 32\n"));
    assert!(e.contains("verify.max_bcrypt_cost"), "{e}");
    let e = err(&format!("{REDIS}[verify]\nmax_password_bytes = 10\n"));
    assert!(e.contains("verify.max_password_bytes"), "{e}");
    let e = err(&format!("{REDIS}[realms.web.hash]\nalgorithm = \"md5\"\n"));
    assert!(e.contains("md5"), "{e}");
    let e = err(&format!("{REDIS}[realms.\"bad name\"]\n"));
    assert!(e.contains("realms.bad name"), "{e}");
}

/// A Django or Flask site's realm targets what its framework writes, inside the
/// `[verify]` ceilings, so its dummy hash costs what its users' hashes cost.
#[test]
fn pbkdf2_and_scrypt_targets_are_checked_against_the_ceilings() {
    let target = |text: &str| {
        let s = from_toml(&format!("{REDIS}[realms.web.hash]\n{text}")).unwrap();
        s.realms.get("web").unwrap().hash_target
    };
    assert_eq!(
        target("algorithm = \"pbkdf2_sha256\"\npbkdf2_iterations = 1000000\n"),
        HashParams::Pbkdf2 { prf: Prf::Sha256, iterations: 1_000_000 }
    );
    assert_eq!(
        target("algorithm = \"pbkdf2_sha512\"\n"),
        HashParams::Pbkdf2 { prf: Prf::Sha512, iterations: 600_000 }
    );
    assert_eq!(target("algorithm = \"scrypt\"\n"), HashParams::Scrypt { log_n: 17, r: 8, p: 1 });
    let e = err(&format!(
        "{REDIS}[realms.web.hash]\nalgorithm = \"pbkdf2_sha256\"\npbkdf2_iterations = 3000000\n"
    ));
    assert!(e.contains("realms.web.hash.pbkdf2_iterations") && e.contains("(2000000)"), "{e}");
    // 128 · 8 · (2^18 + 2) bytes: 256 MiB, above the 129 MiB ceiling.
    let e = err(&format!("{REDIS}[realms.web.hash]\nalgorithm = \"scrypt\"\nscrypt_log_n = 18\n"));
    assert!(e.contains("scrypt memory of realms.web.hash") && e.contains("(132096)"), "{e}");
    let e = err(&format!("{REDIS}[realms.web.hash]\nalgorithm = \"scrypt\"\nscrypt_log_n = 0\n"));
    assert!(e.contains("realms.web.hash.scrypt_log_n"), "{e}");
    let e = err(&format!("{REDIS}[verify]\nmax_pbkdf2_iterations = 0\n"));
    assert!(e.contains("verify.max_pbkdf2_iterations"), "{e}");
    let e = err(&format!("{REDIS}[verify]\nmax_scrypt_parallelism = 0\n"));
    assert!(e.contains("verify.max_scrypt_parallelism"), "{e}");
}

#[test]
fn unknown_keys_are_errors() {
    let e = err(&format!("{REDIS}[realms.web]\nmax_failure = 3\n"));
    assert!(e.contains("max_failure"), "{e}");
    let e = err(&format!("{REDIS}[realms.web]\nenabled = false\n"));
    assert!(e.contains("enabled"), "{e}");
    let e = err(&format!("{REDIS}throttle_off = true\n"));
    assert!(e.contains("throttle_off"), "{e}");
    let e = err("[store]\nredis_url = \"redis://x\"\nkey_secret = \"inline\"\n");
    assert!(e.contains("key_secret"), "{e}");
}

#[test]
fn redis_requires_a_long_enough_secret() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, REDIS).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    let e = config.validate(None).unwrap_err().to_string();
    assert!(e.contains("key_secret_file") && e.contains(KEY_SECRET_ENV), "{e}");
    let e = config.validate(Some("short".into())).unwrap_err().to_string();
    assert!(e.contains("at least 32 bytes") && !e.contains("short"), "{e}");
}

#[test]
fn secret_is_redacted_in_debug() {
    let s = from_toml(REDIS).unwrap();
    assert!(!format!("{s:?}").contains(SECRET));
}

#[test]
fn redis_shapes_are_mutually_exclusive_and_checked() {
    let cluster =
        "redis_cluster_nodes = [\"redis://127.0.0.1:7000\", \"redis://127.0.0.1:7001\"]\n";
    let sentinel =
        "redis_sentinel = { master_name = \"main\", nodes = [\"redis://127.0.0.1:26379\"] }\n";
    let s = from_toml(&format!("[store]\n{cluster}")).unwrap();
    assert!(matches!(
        s.store,
        StoreSettings::Redis(RedisSettings { shape: RedisShape::Cluster { ref nodes }, .. })
            if nodes.len() == 2
    ));
    let s = from_toml(&format!("[store]\n{sentinel}")).unwrap();
    assert!(matches!(
        s.store,
        StoreSettings::Redis(RedisSettings { shape: RedisShape::Sentinel { ref master_name, .. }, .. })
            if master_name == "main"
    ));
    let e = err(&format!("{REDIS}{cluster}"));
    assert!(
        e.contains("store.redis_url, store.redis_cluster_nodes")
            && e.contains("mutually exclusive"),
        "{e}"
    );
    let e = err(&format!("[store]\n{cluster}{sentinel}"));
    assert!(e.contains("store.redis_cluster_nodes, store.redis_sentinel"), "{e}");
    let e = err("[store]\nredis_cluster_nodes = []\n");
    assert!(e.contains("store.redis_cluster_nodes") && e.contains("no node"), "{e}");
    let e = err("[store]\nredis_cluster_nodes = [\"http://x\"]\n");
    assert!(e.contains("store.redis_cluster_nodes"), "{e}");
    let e = err("[store]\nredis_sentinel = { master_name = \"\", nodes = [\"redis://h\"] }\n");
    assert!(e.contains("store.redis_sentinel.master_name"), "{e}");
    let e = err("[store]\nredis_sentinel = { master_name = \"m\", nodes = [] }\n");
    assert!(e.contains("store.redis_sentinel.nodes"), "{e}");
    let e = err("[store]\nredis_sentinel = { master_name = \"m\" }\n");
    assert!(e.contains("nodes"), "{e}");
    let e = err(&format!("{REDIS}wait_replicas = 65\n"));
    assert!(e.contains("store.wait_replicas"), "{e}");
    let e = err(&format!("{REDIS}wait_timeout = \"1s\"\n"));
    assert!(e.contains("store.wait_timeout") && e.contains("operation_timeout"), "{e}");
    let s = from_toml(&format!(
        "{REDIS}allow_eviction = true\nwait_replicas = 1\nwait_timeout = \"50ms\"\n"
    ))
    .unwrap();
    let StoreSettings::Redis(r) = s.store else { panic!("not redis") };
    assert!(r.allow_eviction);
    assert_eq!((r.wait_replicas, r.wait_timeout), (1, Duration::from_millis(50)));
}

#[test]
fn redis_passwords_are_redacted_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("redis-password");
    std::fs::write(&file, "filepassword\n").unwrap();
    let text = format!(
        "[store]\nredis_url = \"redis://app:urlpassword@127.0.0.1:1/\"\nredis_username = \"app\"\nredis_password_file = {:?}\n",
        file.display().to_string()
    );
    let path = dir.path().join("p.toml");
    std::fs::write(&path, &text).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    let settings = config.validate(Some(SECRET.into())).unwrap();
    let StoreSettings::Redis(r) = &settings.store else { panic!("not redis") };
    assert_eq!(r.credentials.password.as_deref(), Some("filepassword"));
    let shown = format!("{config:?} {settings:?}");
    assert!(!shown.contains("urlpassword") && !shown.contains("filepassword"), "{shown}");
    let from_env = Config::load(Some(&path), &Overrides::default()).unwrap();
    let mut from_env = from_env;
    from_env.store.redis_password_file = None;
    let settings = from_env.validate_with(Some(SECRET.into()), Some("envpassword".into())).unwrap();
    assert!(!format!("{settings:?}").contains("envpassword"));
    let o = Overrides { redis_url: Some("redis://:flagpassword@h".into()), ..Overrides::default() };
    assert!(!format!("{o:?}").contains("flagpassword"));
    let e = err("[store]\nredis_url = \"http://:leak@h\"\n");
    assert!(!e.contains("leak"), "{e}");
}

#[test]
fn a_url_in_the_wrong_place_is_not_echoed() {
    for (setting, line) in [
        ("store.redis_cluster_nodes", "redis_cluster_nodes = \"rediss://:leakpw@h:1\""),
        ("store.redis_sentinel", "redis_sentinel = \"rediss://:leakpw@h:1\""),
        ("store.wait_replicas", "wait_replicas = \"rediss://:leakpw@h:1\""),
        ("store.redis_url", "redis_url = [\"rediss://:leakpw@h:1\"]"),
    ] {
        let e = err(&format!("[store]\n{line}\n"));
        assert!(e.contains(setting) && !e.contains("leakpw"), "{e}");
        // Nor in `Debug`, nor anywhere down the error chain (which `serve` logs).
        let error = from_toml(&format!("[store]\n{line}\n")).unwrap_err();
        let mut chain = format!("{error:?}");
        let mut source = std::error::Error::source(&error);
        while let Some(s) = source {
            chain.push_str(&s.to_string());
            source = s.source();
        }
        assert!(!chain.contains("leakpw"), "{chain}");
    }
}

#[test]
fn overrides_replace_file_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, format!("listen = \"127.0.0.1:1\"\n{REDIS}")).unwrap();
    let o = Overrides {
        listen: Some("127.0.0.1:2".parse().unwrap()),
        redis_url: Some("redis://127.0.0.1:3".into()),
        admin_listen: Some(String::new()),
        ..Overrides::default()
    };
    let c = Config::load(Some(&path), &o).unwrap();
    assert_eq!(c.listen.port(), 2);
    assert_eq!(c.telemetry.admin_listen, "");
    assert_eq!(c.store.redis_url.as_deref(), Some("redis://127.0.0.1:3"));
}

#[test]
fn trusted_networks_that_mean_everyone_or_no_one_are_refused_by_name() {
    let realm = |nets: &str| format!("{REDIS}[realms.default]\ntrusted_networks = [{nets}]\n");
    for (entry, why) in [
        ("0.0.0.0/0", "turns the network throttle off"),
        ("::/0", "turns the network throttle off"),
        ("10.0.0.0/7", "shorter than /8"),
        ("2a00::/8", "shorter than /32"),
        ("10.0.0.1/8", "host bits are set; write the network as 10.0.0.0/8"),
        ("2001:db8::1/64", "host bits are set"),
        (
            "::ffff:10.0.0.0/104",
            "never matches (client addresses in that form are compared as IPv4); write it as 10.0.0.0/8",
        ),
    ] {
        let e = err(&realm(&format!("\"192.168.0.0/16\", \"{entry}\"")));
        assert!(e.contains("realms.default.trusted_networks"), "{entry}: {e}");
        assert!(e.contains(&format!("{entry}: ")), "{entry} is named: {e}");
        assert!(e.contains(why), "{entry}: {e}");
        assert!(!e.contains("192.168.0.0/16"), "a good entry is not named: {e}");
    }
    let good = "\"10.0.0.0/8\", \"172.16.0.0/12\", \"192.168.1.7/32\", \"fd00::/8\", \"2001:db8::/48\", \"2001:db8::/32\"";
    let s = from_toml(&realm(good)).unwrap();
    assert_eq!(s.realms.get("default").unwrap().network.trusted.len(), 6);
}

#[test]
fn predictable_key_secrets_are_refused_without_showing_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, REDIS).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    let weak = [
        " ".repeat(40),
        "\0".repeat(32),
        "z".repeat(64),
        "passwordpasswordpasswordpassword".to_owned(),
        format!("{}abcdefgh", "a".repeat(60)),
    ];
    for secret in weak {
        let e = config.validate(Some(secret.clone())).unwrap_err().to_string();
        assert!(e.contains(KEY_SECRET_ENV) && e.contains("too predictable"), "{e}");
        assert!(e.contains("openssl rand"), "{e}");
        assert!(!e.contains(&secret) && !e.contains(&secret[..8]), "the secret is shown: {e}");
    }
    // A file the same (one trailing newline is not part of the secret).
    let file = dir.path().join("key_secret");
    std::fs::write(&file, format!("{}\n", " ".repeat(40))).unwrap();
    let text = format!("{REDIS}key_secret_file = {:?}\n", file.display().to_string());
    std::fs::write(&path, text).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    let e = config.validate(None).unwrap_err().to_string();
    assert!(e.contains("store.key_secret_file") && e.contains("too predictable"), "{e}");
    // Random secrets of the usual shapes pass: hex, base64, and the tests' own.
    for good in [
        SECRET,
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "q8n0vJ3cX+T1r6Kp0yZb2m4Wd9sLhE7uGfQaBcD5tIo=",
        "test-secret-0123456789abcdef0123456789",
    ] {
        std::fs::write(&path, REDIS).unwrap();
        let config = Config::load(Some(&path), &Overrides::default()).unwrap();
        config.validate(Some(good.into())).unwrap();
    }
}

/// `Admin/EffectiveConfig` shows every URL without its password, in each Redis shape,
/// and names each secret by where it comes from, never by value.
#[test]
fn the_running_configuration_shows_no_secret() {
    let shapes = [
        "redis_url = \"redis://app:pw-in-url-1@redis:6379/0?password=pw-in-query\"",
        "redis_cluster_nodes = [\"redis://app:pw-in-url-1@a:7000\", \"redis://:pw-in-url-2@b:7001\"]",
        "redis_sentinel = { master_name = \"m\", nodes = [\"redis://:pw-in-url-1@s:26379\"] }",
    ];
    for shape in shapes {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        let text = format!(
            "[store]\n{shape}\nredis_password_file = \"/run/secrets/redis\"\n\
             [tls]\ncert_file = \"/tls/c.pem\"\nkey_file = \"/tls/k.pem\"\n"
        );
        std::fs::write(&path, text).unwrap();
        let config = Config::load(Some(&path), &Overrides::default()).unwrap();
        let report = config.report(true, false);
        let shown = format!("{report:?}");
        for secret in ["pw-in-url-1", "pw-in-url-2", "pw-in-query"] {
            assert!(!shown.contains(secret), "{secret} shown for {shape}: {shown}");
        }
        assert!(report.settings["store"].to_string().contains(":***@"), "{shape}");
        let named = report.secrets.join("\n");
        assert!(named.contains("store.key_secret: from the environment variable"), "{named}");
        assert!(named.contains("store.redis_password: from the file /run/secrets/redis"));
        assert!(named.contains("store.redis_password: in a URL (not shown)"));
        assert!(named.contains("tls.key_file: the listener's private key, in the file /tls/k.pem"));
        // The defaults are filled in: the file names no realm.
        assert_eq!(report.settings["realms"]["default"]["max_failures"], 5);
    }
    // The sizes left to the machine are shown as they came out, never as null.
    let settings = from_toml(REDIS).unwrap();
    let verify = &settings.report.settings["verify"];
    assert_eq!(verify["max_concurrent"], settings.verify.budget.max_concurrent);
    let realm = &settings.report.settings["realms"]["default"];
    assert_eq!(
        (realm["lockout_duration"].as_str(), realm["step_up_failures"].as_u64()),
        (Some("15m"), Some(3))
    );
    assert!(settings.report.settings["breach"]["filter_file"].is_null());
    for key in ["max_concurrent", "max_waiters", "max_trusted_waiters"] {
        assert!(verify[key].is_u64(), "{key}: {verify}");
    }
}

#[test]
fn a_candidate_takes_the_realms_values_and_is_checked_as_they_are() {
    let s = from_toml("[realms.r]\nmax_failures = 6\n[realms.r.candidate]\nmax_failures = 3\n")
        .unwrap();
    let realm = s.realms.get("r").unwrap();
    let candidate = realm.candidate.as_ref().expect("a candidate");
    assert_eq!((realm.policy.max_failures, candidate.policy.max_failures), (6, 3));
    assert_eq!(candidate.policy.first_window, realm.policy.first_window, "unset: the realm's");
    assert_eq!(realm.step_up_failures, Some(4));
    assert_eq!(candidate.step_up_failures, Some(1), "the candidate's own default");
    assert_eq!(candidate.id.len(), 16);
    let again = from_toml("[realms.r]\n[realms.r.candidate]\nmax_failures = 3\n").unwrap();
    let other = from_toml("[realms.r]\n[realms.r.candidate]\nmax_failures = 4\n").unwrap();
    let id = |s: &Settings| s.realms.get("r").unwrap().candidate.as_ref().unwrap().id.clone();
    assert_ne!(id(&again), id(&other), "other rules, another report");
    assert!(from_toml("[realms.r]\n").unwrap().realms.get("r").unwrap().candidate.is_none());
    let e = err("[realms.r]\n[realms.r.candidate]\nmax_failures = 0\n");
    assert!(e.contains("realms.r.candidate.max_failures"), "{e}");
    let e = err("[realms.r]\n[realms.r.candidate]\nmax_failures = 3\nstep_up_failures = 3\n");
    assert!(e.contains("realms.r.candidate.step_up_failures"), "{e}");
    let e = err("[realms.r]\n[realms.r.candidate]\nnetwork_capacity = 0\n");
    assert!(e.contains("realms.r.candidate.network_capacity"), "{e}");
    let e = err("[realms.r]\n[realms.r.candidate]\nnetwork_refill_period = \"1s\"\n");
    assert!(e.contains("realms.r.candidate.network_refill_period"), "{e}");
    assert_eq!(candidate.network, None, "no network value set: not tried in shadow");
    let with_network =
        "[realms.r]\n[realms.r.candidate]\nmax_failures = 3\nnetwork_capacity = 10\n";
    let s = from_toml(with_network).unwrap();
    let c = s.realms.get("r").unwrap().candidate.clone().unwrap();
    let period = s.realms.get("r").unwrap().network.bucket.burst_ms();
    assert_eq!(c.network.map(|b| (b.capacity, b.burst_ms())), Some((10, period)));
    assert_eq!(c.defences(), [Defence::Login, Defence::Network]);
    assert_ne!(c.id, id(&again), "the network's rules name the candidate too");
}

#[test]
fn a_candidate_takes_the_flows_values_and_is_checked_as_the_realms_flows() {
    let base = "[realms.r]\n[realms.r.candidate]\nmax_failures = 3\n";
    let plain = from_toml(base).unwrap();
    let id = |s: &Settings| s.realms.get("r").unwrap().candidate.as_ref().unwrap().id.clone();
    let text = format!(
        "{base}[realms.r.candidate.flows.second_factor]\nmax_failures = 2\n\
         [realms.r.candidate.flows.password_reset]\ndaily_cap = 2\n"
    );
    let s = from_toml(&text).unwrap();
    let realm = s.realms.get("r").unwrap();
    let c = realm.candidate.as_ref().unwrap();
    let sf = c.flows.second_factor.expect("second_factor tried");
    assert_eq!(sf.max_failures, 2);
    assert_eq!(sf.first_window, realm.flows.second_factor.first_window, "unset: the realm's");
    let pr = c.flows.password_reset.expect("password_reset tried");
    assert_eq!(pr.send.daily_cap, 2);
    assert_eq!(pr.send.min_interval_ms, realm.flows.password_reset.send.min_interval_ms);
    assert_eq!(pr.network, realm.flows.password_reset.network);
    assert_eq!((c.flows.recovery_code, c.flows.verification_resend), (None, None));
    use crate::throttle::flow::Flow;
    assert_eq!(
        c.defences(),
        [Defence::Login, Defence::Flow(Flow::SecondFactor), Defence::Flow(Flow::PasswordReset)]
    );
    assert_eq!(
        plain.realms.get("r").unwrap().candidate.as_ref().unwrap().defences(),
        [Defence::Login]
    );
    assert_ne!(id(&s), id(&plain), "a flow's rules name the candidate");
    // An empty flow table sets nothing: the candidate keeps its id, the flow is not tried.
    let empty = from_toml(&format!("{base}[realms.r.candidate.flows.recovery_code]\n")).unwrap();
    assert_eq!(id(&empty), id(&plain), "an unset flow keeps the id");
    assert_eq!(
        empty.realms.get("r").unwrap().candidate.as_ref().unwrap().flows.recovery_code,
        None
    );
    for (flow, field, value) in [
        ("second_factor", "max_failures", "0"),
        ("second_factor", "window", "\"1s\""),
        ("recovery_code", "first_window", "\"2d\""),
        ("recovery_code", "retention", "\"400d\""),
        ("password_reset", "min_interval", "\"2h\""),
        ("verification_resend", "daily_cap", "51"),
        ("verification_resend", "network_budget", "0"),
    ] {
        let e = err(&format!("{base}[realms.r.candidate.flows.{flow}]\n{field} = {value}\n"));
        assert!(e.contains(&format!("realms.r.candidate.flows.{flow}.{field}")), "{e}");
    }
    let e = err(&format!("{base}[realms.r.candidate.flows.second_factor]\nwindoww = \"1m\"\n"));
    assert!(e.contains("windoww"), "an unknown field is refused: {e}");
    let e = err(&format!("{base}[realms.r.candidate.flows.login]\nmax_failures = 1\n"));
    assert!(e.contains("login"), "an unknown flow is refused: {e}");
    // config-dump shows the flows it tries, as they run.
    let shown = &s.report.settings["realms"]["r"]["candidate"]["flows"];
    assert_eq!(shown["second_factor"]["max_failures"], 2);
    assert_eq!(shown["second_factor"]["window"], "15m");
    assert_eq!(shown["password_reset"]["daily_cap"], 2);
    assert_eq!(shown["password_reset"]["min_interval"], "1m");
    assert_eq!(shown["password_reset"]["network_budget"], 30);
    assert!(shown.get("recovery_code").is_none(), "{shown}");
    assert!(plain.report.settings["realms"]["r"]["candidate"].get("flows").is_none());
}
