//! The configuration test daemons run with: the test key secret, the test realms, and
//! [`TestConfig`], the TOML and validated settings of each store shape.

use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};

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
/// often; `tests/integration/health.rs` sets its own) and no admin listener (the default
/// port would be shared by parallel tests; `tests/integration/metrics.rs` and
/// `tests/integration/health.rs` ask for `127.0.0.1:0` with [`TestConfig::admin`]).
pub const TEST_TOP_LEVEL: &str = "shutdown_delay = \"0s\"\n[telemetry]\nadmin_listen = \"\"\n";

/// The store a [`TestConfig`] names.
#[derive(Clone, Debug)]
enum Store {
    /// A standalone Redis at this URL (`operation_timeout` 300 ms).
    Redis(String),
    /// The embedded store in this directory (`operation_timeout` 2 s).
    Embedded(PathBuf),
    /// These `[store]` lines, for a cluster or a Sentinel group, say (`operation_timeout`
    /// 500 ms).
    Lines(String),
}

/// The configuration of a test daemon: `listen` on `127.0.0.1:0`, [`TEST_TOP_LEVEL`] (or
/// the admin listener, with [`admin`](Self::admin)), a `[store]` of one of three shapes,
/// `extra` TOML after the store's lines, then [`REALMS_TOML`]. Read it as TOML
/// ([`toml`](Self::toml), for the real binary) or as validated [`Settings`]
/// ([`settings`](Self::settings), for a daemon in this process).
///
/// ```ignore
/// let extra = "[verify]\nmax_concurrent = 2\n";
/// let daemon = Daemon::start(TestConfig::redis(&redis.url()).extra(extra).settings()).await;
/// let process = DaemonProcess::spawn(&TestConfig::embedded(&data_dir).admin("0s").toml());
/// ```
#[derive(Clone, Debug)]
#[must_use]
pub struct TestConfig {
    store: Store,
    extra: String,
    admin_shutdown_delay: Option<String>,
}

impl TestConfig {
    /// A daemon on the standalone Redis at `url`, with a 300 ms operation timeout.
    pub fn redis(url: &str) -> Self {
        Self::with_store(Store::Redis(url.to_owned()))
    }

    /// A daemon on the embedded store in `data_dir`, with a 2 s operation timeout.
    pub fn embedded(data_dir: &Path) -> Self {
        Self::with_store(Store::Embedded(data_dir.to_owned()))
    }

    /// A daemon whose `[store]` section is `lines` (a cluster's `redis_cluster_nodes`, a
    /// Sentinel group's lines), with a 500 ms operation timeout.
    pub fn store(lines: &str) -> Self {
        Self::with_store(Store::Lines(lines.to_owned()))
    }

    fn with_store(store: Store) -> Self {
        Self { store, extra: String::new(), admin_shutdown_delay: None }
    }

    /// `toml` added after the `[store]` lines: more store keys, or sections of their own
    /// (`[verify]`, `[server]`, more realms). Called again, it adds to what is there.
    pub fn extra(mut self, toml: &str) -> Self {
        self.extra.push_str(toml);
        self
    }

    /// The admin HTTP listener on a free port (read it with
    /// [`DaemonProcess::admin_addr`](crate::daemon::DaemonProcess::admin_addr)) and
    /// `shutdown_delay` set, instead of [`TEST_TOP_LEVEL`]'s none and `0s`.
    pub fn admin(mut self, shutdown_delay: &str) -> Self {
        self.admin_shutdown_delay = Some(shutdown_delay.to_owned());
        self
    }

    /// The configuration as the TOML a `portcullis.toml` holds.
    pub fn toml(&self) -> String {
        let top_level = match &self.admin_shutdown_delay {
            None => TEST_TOP_LEVEL.to_owned(),
            Some(delay) => format!(
                "shutdown_delay = \"{delay}\"\n[telemetry]\nadmin_listen = \"127.0.0.1:0\"\n"
            ),
        };
        // A test's Redis is its own, new: its first daemon claims it at once rather than
        // wait `store.key_check_claim_wait` for a fleet that is not there.
        let (store, timeout) = match &self.store {
            Store::Redis(url) => {
                (format!("redis_url = \"{url}\"\nkey_check_claim_wait = \"0s\""), "300ms")
            }
            Store::Embedded(dir) => (format!("data_dir = {:?}", dir.display().to_string()), "2s"),
            Store::Lines(lines) => (format!("{lines}\nkey_check_claim_wait = \"0s\""), "500ms"),
        };
        // A store given by its lines has no blank line before the realms unless `extra`
        // adds something.
        let extra = match (&self.store, self.extra.as_str()) {
            (Store::Lines(_), "") => String::new(),
            (_, extra) => format!("{extra}\n"),
        };
        format!(
            "listen = \"127.0.0.1:0\"\n{top_level}[store]\n{store}\noperation_timeout = \"{timeout}\"\n{extra}{REALMS_TOML}"
        )
    }

    /// The configuration loaded from a file and validated with [`SECRET`], as the daemon
    /// does at start.
    pub fn settings(&self) -> Settings {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("portcullis.toml");
        std::fs::write(&path, self.toml()).unwrap();
        Config::load(Some(&path), &Overrides::default())
            .unwrap()
            .validate(Some(SECRET.into()))
            .unwrap()
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[cfg(test)]
mod tests {
    use super::*;

    const URL: &str = "redis://127.0.0.1:6390/";
    const DIR: &str = "/tmp/portcullis-test/data";
    const LINES: &str = "redis_cluster_nodes = [\"redis://127.0.0.1:7000/\"]";
    const EXTRA: &str = "[verify]\nmax_concurrent = 2\n";

    /// The TOML of each shape, byte for byte as the functions the builder replaced wrote
    /// it (`config_toml`, `embedded_config_toml`, `config_toml_with_store`,
    /// `settings_with_store_and`, `with_admin`; the `settings` forms wrote the same TOML
    /// to a file and validated it).
    #[test]
    fn each_shape_writes_the_toml_it_always_wrote() {
        let top =
            "listen = \"127.0.0.1:0\"\nshutdown_delay = \"0s\"\n[telemetry]\nadmin_listen = \"\"\n";
        let redis = "[store]\nredis_url = \"redis://127.0.0.1:6390/\"\nkey_check_claim_wait = \"0s\"\n\
                     operation_timeout = \"300ms\"\n";
        let embedded =
            "[store]\ndata_dir = \"/tmp/portcullis-test/data\"\noperation_timeout = \"2s\"\n";
        let lines = "[store]\nredis_cluster_nodes = [\"redis://127.0.0.1:7000/\"]\n\
                     key_check_claim_wait = \"0s\"\noperation_timeout = \"500ms\"\n";
        let extra = "[verify]\nmax_concurrent = 2\n";
        let dir = Path::new(DIR);

        assert_eq!(TestConfig::redis(URL).toml(), format!("{top}{redis}\n{REALMS_TOML}"));
        assert_eq!(
            TestConfig::redis(URL).extra(EXTRA).toml(),
            format!("{top}{redis}{extra}\n{REALMS_TOML}")
        );
        assert_eq!(TestConfig::embedded(dir).toml(), format!("{top}{embedded}\n{REALMS_TOML}"));
        assert_eq!(
            TestConfig::embedded(dir).extra(EXTRA).toml(),
            format!("{top}{embedded}{extra}\n{REALMS_TOML}")
        );
        // Store lines with no extra: no blank line of their own before the realms.
        assert_eq!(TestConfig::store(LINES).toml(), format!("{top}{lines}{REALMS_TOML}"));
        assert_eq!(
            TestConfig::store(LINES).extra(EXTRA).toml(),
            format!("{top}{lines}{extra}\n{REALMS_TOML}")
        );
        // The admin listener replaces the top level, whatever the store.
        let admin = |delay: &str| {
            format!(
                "listen = \"127.0.0.1:0\"\nshutdown_delay = \"{delay}\"\n\
                 [telemetry]\nadmin_listen = \"127.0.0.1:0\"\n"
            )
        };
        assert_eq!(
            TestConfig::redis(URL).admin("2s").toml(),
            format!("{}{redis}\n{REALMS_TOML}", admin("2s"))
        );
        assert_eq!(
            TestConfig::embedded(dir).extra(EXTRA).admin("0s").toml(),
            format!("{}{embedded}{extra}\n{REALMS_TOML}", admin("0s"))
        );
        assert_eq!(
            TestConfig::store(LINES).admin("0s").toml(),
            format!("{}{lines}{REALMS_TOML}", admin("0s"))
        );
        // `extra` adds to what is there.
        assert_eq!(
            TestConfig::redis(URL).extra("[verify]\n").extra("max_concurrent = 2\n").toml(),
            TestConfig::redis(URL).extra(EXTRA).toml()
        );
    }

    #[test]
    fn each_shape_validates() {
        let settings = TestConfig::redis(URL).extra(EXTRA).settings();
        assert!(settings.realms.get("fast").is_some(), "the test realms are there");
        assert!(settings.admin_listen.is_none());
        let dir = tempfile::tempdir().unwrap();
        let settings = TestConfig::embedded(&dir.path().join("data")).admin("0s").settings();
        assert!(settings.admin_listen.is_some());
        let settings = TestConfig::store(LINES).extra("[realms.more]\n").settings();
        assert!(settings.realms.get("more").is_some());
    }
}
