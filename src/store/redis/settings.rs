//! Validated Redis settings: which shape (one URL, a cluster, a Sentinel-watched master),
//! the credentials shared by every shape, the eviction override and the replication
//! requirement. Built by `config.rs` from `[store]`; every URL and password is redacted in
//! `Debug`, so logging a whole `Settings` leaks no credential.

use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo};

use crate::store::keys::KeySecret;

/// Where the Redis store lives: exactly one of `store.redis_url`,
/// `store.redis_cluster_nodes`, `store.redis_sentinel`.
#[derive(Clone)]
pub enum RedisShape {
    /// `store.redis_url`: one Redis (or a proxy in front of one).
    Standalone {
        /// `redis://` or `rediss://` URL.
        url: String,
    },
    /// `store.redis_cluster_nodes`: a Redis Cluster, found from any of these nodes; the
    /// library follows MOVED/ASK and refreshes the slot map.
    Cluster {
        /// Seed node URLs.
        nodes: Vec<String>,
    },
    /// `store.redis_sentinel`: the master Sentinel names `master_name`, asked of `nodes`
    /// (the Sentinels, usually port 26379) on every new connection.
    Sentinel {
        /// The monitored master's name (`sentinel monitor <name> …`).
        master_name: String,
        /// Sentinel URLs.
        nodes: Vec<String>,
    },
}

/// An ACL user and password for the data nodes (Redis 6 `AUTH user password`), applied to
/// every URL of the shape; a URL's own credentials win. Read from `store.redis_username`
/// and `store.redis_password_file` or `PORTCULLIS_REDIS_PASSWORD`.
#[derive(Clone, Default)]
pub struct Credentials {
    /// ACL user name (`default` when unset and a password is given).
    pub username: Option<String>,
    /// The password; never logged.
    pub password: Option<String>,
}

/// Everything the Redis store needs.
#[derive(Clone)]
pub struct RedisSettings {
    /// Which Redis.
    pub shape: RedisShape,
    /// Credentials for the data nodes.
    pub credentials: Credentials,
    /// Keys every account key; identical on every daemon of a fleet.
    pub secret: KeySecret,
    /// Deadline of one operation (checkout or connect, script, reply, `WAIT`).
    pub operation_timeout: Duration,
    /// Most multiplexed connections per pool.
    pub pool_size: usize,
    /// Serve although `maxmemory-policy` may evict keys (a lockout record among them).
    pub allow_eviction: bool,
    /// Replicas that must confirm a counted attempt (`WAIT N`) before it is answered; 0:
    /// answer on the master's acknowledgement.
    pub wait_replicas: u32,
    /// Longest wait for those confirmations, below `operation_timeout`.
    pub wait_timeout: Duration,
}

impl RedisSettings {
    /// Settings for one Redis at `url` with the defaults for everything else (benches
    /// and tests build stores this way).
    pub fn standalone(
        url: &str,
        secret: KeySecret,
        operation_timeout: Duration,
        pool_size: usize,
    ) -> Self {
        Self {
            shape: RedisShape::Standalone { url: url.to_owned() },
            credentials: Credentials::default(),
            secret,
            operation_timeout,
            pool_size,
            allow_eviction: false,
            wait_replicas: 0,
            wait_timeout: Duration::from_millis(100),
        }
    }
}

/// `url` with its credentials applied: the URL's own user or password win.
pub(super) fn connection_info(
    url: &str,
    credentials: &Credentials,
) -> redis::RedisResult<ConnectionInfo> {
    let info = url.into_connection_info()?;
    let mut redis = info.redis_settings().clone();
    if redis.username().is_none()
        && let Some(user) = &credentials.username
    {
        redis = redis.set_username(user);
    }
    if redis.password().is_none()
        && let Some(password) = &credentials.password
    {
        redis = redis.set_password(password);
    }
    Ok(info.set_redis_settings(redis))
}

/// `url` with any password replaced by `***`, for logs and `Debug`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<not a URL>".into();
    };
    let (authority, path) = rest.split_once('/').map_or((rest, None), |(a, p)| (a, Some(p)));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None if !userinfo.is_empty() => format!("***@{host}"),
            None => format!("@{host}"),
        },
        None => authority.to_owned(),
    };
    // A query string may carry a password too (`?password=`): dropped.
    let path = path.map(|p| p.split('?').next().unwrap_or_default().to_owned());
    match path {
        Some(path) => format!("{scheme}://{authority}/{path}"),
        None => format!("{scheme}://{authority}"),
    }
}

impl std::fmt::Debug for RedisShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls = |nodes: &[String]| nodes.iter().map(|n| redact_url(n)).collect::<Vec<_>>();
        match self {
            RedisShape::Standalone { url } => {
                f.debug_struct("Standalone").field("url", &redact_url(url)).finish()
            }
            RedisShape::Cluster { nodes } => {
                f.debug_struct("Cluster").field("nodes", &urls(nodes)).finish()
            }
            RedisShape::Sentinel { master_name, nodes } => f
                .debug_struct("Sentinel")
                .field("master_name", master_name)
                .field("nodes", &urls(nodes))
                .finish(),
        }
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("shape", &self.shape)
            .field("credentials", &self.credentials)
            .field("secret", &self.secret)
            .field("operation_timeout", &self.operation_timeout)
            .field("pool_size", &self.pool_size)
            .field("allow_eviction", &self.allow_eviction)
            .field("wait_replicas", &self.wait_replicas)
            .field("wait_timeout", &self.wait_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_lose_their_passwords() {
        assert_eq!(redact_url("redis://u:pw@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact_url("rediss://:pw@h:1"), "rediss://:***@h:1");
        assert_eq!(redact_url("redis://pw@h"), "redis://***@h");
        assert_eq!(redact_url("redis://h:1/2?password=pw"), "redis://h:1/2");
        assert_eq!(redact_url("redis://h:1"), "redis://h:1");
        let c = Credentials { username: Some("app".into()), password: Some("hunter2".into()) };
        let shape = RedisShape::Sentinel {
            master_name: "m".into(),
            nodes: vec!["redis://:sentinelpw@h:26379".into()],
        };
        let text = format!("{c:?} {shape:?}");
        assert!(!text.contains("hunter2") && !text.contains("sentinelpw"), "{text}");
    }

    #[test]
    fn rediss_is_refused_rather_than_sent_in_plain_text() {
        // This build compiles no TLS into redis-rs: a TLS URL must fail, never connect
        // without TLS.
        assert!(connection_info("rediss://h:1", &Credentials::default()).is_err());
    }

    #[test]
    fn credentials_apply_unless_the_url_has_its_own() {
        let c = Credentials { username: Some("app".into()), password: Some("pw".into()) };
        let info = connection_info("redis://h:1", &c).unwrap();
        assert_eq!(info.redis_settings().username(), Some("app"));
        assert_eq!(info.redis_settings().password(), Some("pw"));
        let info = connection_info("redis://own:ownpw@h:1", &c).unwrap();
        assert_eq!(info.redis_settings().username(), Some("own"));
        assert_eq!(info.redis_settings().password(), Some("ownpw"));
    }
}
