//! The configuration test daemons run with: the test key secret, the test realms, and
//! the TOML and validated settings of each store shape.

use std::net::TcpListener as StdListener;
use std::path::Path;

use portcullis::config::{Config, Overrides, Settings};

/// The key secret every test daemon uses (test data, not a real secret).
pub const SECRET: &str = "test-secret-0123456789abcdef0123456789";

/// Realms the tests use: `default` (the design's defaults), `mfa` (second factor
/// required), `exact`, `ascii`, `ab`/`a` for the concatenation case, and `fast` (a
/// bcrypt cost-4 target, for tests that need many cheap comparisons).
pub const REALMS_TOML: &str = r#"
[realms.default]
[realms.mfa]
second_factor_required = true
[realms.exact]
normalization = "exact"
[realms.ascii]
normalization = "ascii_lowercase"
[realms.ab]
[realms.a]
[realms.fast]
hash = { algorithm = "bcrypt", bcrypt_cost = 4 }
"#;

/// Top-level settings of every test daemon: no shutdown delay (tests stop daemons
/// often; `tests/integration/health.rs` sets its own) and no admin listener (the default port would
/// be shared by parallel tests; `tests/integration/metrics.rs` and `tests/integration/health.rs` ask for
/// `127.0.0.1:0` with [`with_admin`]).
pub const TEST_TOP_LEVEL: &str = "shutdown_delay = \"0s\"\n[telemetry]\nadmin_listen = \"\"\n";

/// `config` with the admin listener on a free port (read it with
/// [`DaemonProcess::admin_addr`](crate::daemon::DaemonProcess::admin_addr)) and `shutdown_delay` set.
pub fn with_admin(config: &str, shutdown_delay: &str) -> String {
    config.replacen(
        TEST_TOP_LEVEL,
        &format!(
            "shutdown_delay = \"{shutdown_delay}\"\n[telemetry]\nadmin_listen = \"127.0.0.1:0\"\n"
        ),
        1,
    )
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Daemon settings for tests: [`REALMS_TOML`] plus `extra` TOML, against `redis_url`.
pub fn settings(redis_url: &str, extra: &str) -> Settings {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, config_toml(redis_url, extra)).unwrap();
    Config::load(Some(&path), &Overrides::default()).unwrap().validate(Some(SECRET.into())).unwrap()
}

/// Daemon settings for the embedded store in `data_dir`, with [`REALMS_TOML`].
pub fn embedded_settings(data_dir: &Path) -> Settings {
    embedded_settings_with(data_dir, "")
}

/// As [`embedded_settings`], plus `extra` TOML.
pub fn embedded_settings_with(data_dir: &Path, extra: &str) -> Settings {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    std::fs::write(&path, embedded_config_toml(data_dir, extra)).unwrap();
    Config::load(Some(&path), &Overrides::default()).unwrap().validate(Some(SECRET.into())).unwrap()
}

/// The TOML the tests' daemons run with.
pub fn config_toml(redis_url: &str, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n{TEST_TOP_LEVEL}[store]\nredis_url = \"{redis_url}\"\noperation_timeout = \"300ms\"\n{extra}\n{REALMS_TOML}"
    )
}

/// The TOML of a daemon on the embedded store in `data_dir`.
pub fn embedded_config_toml(data_dir: &Path, extra: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n{TEST_TOP_LEVEL}[store]\ndata_dir = {:?}\noperation_timeout = \"2s\"\n{extra}\n{REALMS_TOML}",
        data_dir.display().to_string()
    )
}

/// The TOML a daemon on a non-standalone store runs with: `store_lines` instead of
/// `redis_url`.
pub fn config_toml_with_store(store_lines: &str) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n{TEST_TOP_LEVEL}[store]\n{store_lines}\noperation_timeout = \"500ms\"\n{REALMS_TOML}"
    )
}

/// Daemon settings from [`config_toml_with_store`].
pub fn settings_with_store(store_lines: &str) -> Settings {
    settings_with_store_and(store_lines, "")
}

/// As [`settings_with_store`], plus `extra` TOML after the `[store]` lines (more realms,
/// say).
pub fn settings_with_store_and(store_lines: &str, extra: &str) -> Settings {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("portcullis.toml");
    let toml = config_toml_with_store(store_lines).replacen(
        "operation_timeout = \"500ms\"\n",
        &format!("operation_timeout = \"500ms\"\n{extra}\n"),
        1,
    );
    std::fs::write(&path, toml).unwrap();
    Config::load(Some(&path), &Overrides::default()).unwrap().validate(Some(SECRET.into())).unwrap()
}
