//! The endpoint pool: rendezvous routing, passive health and the circuit breaker.
//!
//! Each endpoint is healthy, ejected (after `eject_after` consecutive transport failures,
//! for a back-off that doubles on every failed probe up to `eject_max`), or probing
//! (its back-off ran out and one call is trying it). The breaker is open when no endpoint
//! can take a call: every one is ejected, or probing. Only transport failures move an
//! endpoint towards ejection; any answer from the daemon, whatever it says, counts as
//! health.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tonic::transport::Channel;

/// Health of one endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    /// Taking calls; `failures` transport failures in a row so far.
    Healthy { failures: u32 },
    /// Not taking calls until `until`; `backoff` was the length of this ejection.
    Ejected { until: Instant, backoff: Duration },
    /// One probe call is in flight since `since`; on success the endpoint is healthy.
    Probing { since: Instant, backoff: Duration },
}

/// One daemon endpoint.
pub(crate) struct Endpoint {
    /// The endpoint's URL, as configured.
    pub url: String,
    /// A lazily connected channel (one HTTP/2 connection, reconnecting on demand).
    pub channel: Channel,
    health: Mutex<Health>,
}

/// Health thresholds, from the client configuration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HealthPolicy {
    pub eject_after: u32,
    pub eject_for: Duration,
    pub eject_max: Duration,
    /// How long a probe may stay in flight before another call may probe again.
    pub probe_timeout: Duration,
}

/// All endpoints and their health.
pub(crate) struct Pool {
    endpoints: Vec<Endpoint>,
    policy: HealthPolicy,
}

/// A chosen endpoint for one try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pick {
    pub index: usize,
}

impl Pool {
    pub fn new(endpoints: Vec<(String, Channel)>, policy: HealthPolicy) -> Self {
        let endpoints = endpoints
            .into_iter()
            .map(|(url, channel)| Endpoint {
                url,
                channel,
                health: Mutex::new(Health::Healthy { failures: 0 }),
            })
            .collect();
        Self { endpoints, policy }
    }

    pub fn endpoint(&self, pick: Pick) -> &Endpoint {
        &self.endpoints[pick.index]
    }

    /// Endpoint indexes in rendezvous (highest random weight) order for `route_key`: the
    /// same key ranks the endpoints the same way on every gateway replica, and removing
    /// one endpoint only moves the keys that ranked it first. SHA-256 keeps the ranking
    /// stable across builds and platforms, unlike `std`'s hasher.
    fn ranked(&self, route_key: &str) -> Vec<usize> {
        let mut scored: Vec<(u64, usize)> = self
            .endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let mut h = Sha256::new();
                h.update((e.url.len() as u32).to_be_bytes());
                h.update(e.url.as_bytes());
                h.update(route_key.as_bytes());
                let d = h.finalize();
                (u64::from_be_bytes(d[..8].try_into().unwrap_or_default()), i)
            })
            .collect();
        scored.sort_unstable_by(|a, b| b.cmp(a));
        scored.into_iter().map(|(_, i)| i).collect()
    }

    /// The endpoint for the next try of a call routed by `route_key`, preferring
    /// endpoints not in `tried`. `None` when the breaker is open: no endpoint is healthy
    /// and none is due for a probe.
    pub fn pick(&self, route_key: &str, tried: &[usize]) -> Option<Pick> {
        let now = Instant::now();
        let ranked = self.ranked(route_key);
        let untried = ranked.iter().filter(|i| !tried.contains(i));
        let again = ranked.iter().filter(|i| tried.contains(i));
        for &i in untried.chain(again) {
            let mut h = self.endpoints[i].health.lock().unwrap_or_else(|e| e.into_inner());
            match *h {
                Health::Healthy { .. } => return Some(Pick { index: i }),
                Health::Ejected { until, backoff } if until <= now => {
                    *h = Health::Probing { since: now, backoff };
                    return Some(Pick { index: i });
                }
                Health::Probing { since, backoff }
                    if now.duration_since(since) >= self.policy.probe_timeout =>
                {
                    *h = Health::Probing { since: now, backoff };
                    return Some(Pick { index: i });
                }
                _ => {}
            }
        }
        None
    }

    /// Which endpoint a call routed by `route_key` would use now, without claiming a
    /// probe. `None` when the breaker is open.
    pub fn route(&self, route_key: &str) -> Option<&str> {
        let now = Instant::now();
        self.ranked(route_key).into_iter().find_map(|i| {
            let h = *self.endpoints[i].health.lock().unwrap_or_else(|e| e.into_inner());
            let usable = match h {
                Health::Healthy { .. } => true,
                Health::Ejected { until, .. } => until <= now,
                Health::Probing { .. } => false,
            };
            usable.then_some(self.endpoints[i].url.as_str())
        })
    }

    /// The endpoint answered (with anything at all): healthy again.
    pub fn answered(&self, pick: Pick) {
        *self.endpoints[pick.index].health.lock().unwrap_or_else(|e| e.into_inner()) =
            Health::Healthy { failures: 0 };
    }

    /// A transport failure (connect, reset, timeout) on this endpoint.
    pub fn failed(&self, pick: Pick) {
        let p = self.policy;
        let now = Instant::now();
        let mut h = self.endpoints[pick.index].health.lock().unwrap_or_else(|e| e.into_inner());
        *h = match *h {
            Health::Healthy { failures } if failures + 1 < p.eject_after => {
                Health::Healthy { failures: failures + 1 }
            }
            Health::Healthy { .. } => {
                self.ejected(pick);
                Health::Ejected { until: now + p.eject_for, backoff: p.eject_for }
            }
            Health::Probing { backoff, .. } | Health::Ejected { backoff, .. } => {
                if matches!(*h, Health::Probing { .. }) {
                    self.ejected(pick);
                }
                let backoff = (backoff * 2).min(p.eject_max);
                Health::Ejected { until: now + backoff, backoff }
            }
        };
    }

    /// Counts an ejection (a healthy or probing endpoint taken out), by configured URL.
    fn ejected(&self, pick: Pick) {
        let endpoint = self.endpoints[pick.index].url.clone();
        ::metrics::counter!(crate::metrics::CLIENT_EJECTIONS, "endpoint" => endpoint).increment(1);
    }

    /// Whether each endpoint is healthy now (in configuration order).
    pub fn healthy(&self) -> Vec<bool> {
        self.endpoints
            .iter()
            .map(|e| {
                matches!(
                    *e.health.lock().unwrap_or_else(|e| e.into_inner()),
                    Health::Healthy { .. }
                )
            })
            .collect()
    }

    /// Whether the breaker is open: no endpoint can take a call now.
    pub fn breaker_open(&self) -> bool {
        let now = Instant::now();
        self.endpoints.iter().all(|e| match *e.health.lock().unwrap_or_else(|e| e.into_inner()) {
            Health::Healthy { .. } => false,
            Health::Ejected { until, .. } => until > now,
            Health::Probing { since, .. } => now.duration_since(since) < self.policy.probe_timeout,
        })
    }
}

/// The retry budget: a token bucket that holds at most `reserve` tokens, gains `ratio`
/// of a token per call and spends one per retry, so retries stay below `ratio` of calls
/// in the long run, with bursts of at most `reserve` (the shape of gRPC's retry
/// throttling, gRFC A6).
pub(crate) struct RetryBudget {
    /// Tokens, in thousandths (integer, so ten deposits of 0.1 make exactly one token).
    milli_tokens: Mutex<u64>,
    milli_ratio: u64,
    milli_reserve: u64,
}

impl RetryBudget {
    pub fn new(ratio: f64, reserve: u32) -> Self {
        let milli_reserve = u64::from(reserve) * 1000;
        // `ratio` is validated to 0.0–1.0, so this is 0–1000.
        let milli_ratio = (ratio * 1000.0).round() as u64;
        Self { milli_tokens: Mutex::new(milli_reserve), milli_ratio, milli_reserve }
    }

    /// One call was made.
    pub fn deposit(&self) {
        let mut t = self.milli_tokens.lock().unwrap_or_else(|e| e.into_inner());
        *t = (*t + self.milli_ratio).min(self.milli_reserve);
    }

    /// Takes a token for one retry, if there is one.
    pub fn withdraw(&self) -> bool {
        let mut t = self.milli_tokens.lock().unwrap_or_else(|e| e.into_inner());
        if *t >= 1000 {
            *t -= 1000;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(n: usize, eject_for: Duration) -> Pool {
        let endpoints = (0..n)
            .map(|i| {
                let url = format!("http://127.0.0.1:{}", 40000 + i);
                let channel =
                    tonic::transport::Endpoint::from_shared(url.clone()).unwrap().connect_lazy();
                (url, channel)
            })
            .collect();
        let policy = HealthPolicy {
            eject_after: 2,
            eject_for,
            eject_max: eject_for * 8,
            probe_timeout: Duration::from_secs(5),
        };
        Pool::new(endpoints, policy)
    }

    #[tokio::test]
    async fn routing_is_stable_and_ejection_moves_only_that_endpoints_keys() {
        let p = pool(3, Duration::from_secs(60));
        let keys: Vec<String> =
            (0..3000).map(|i| format!("10.1.{}.{}", i / 256, i % 256)).collect();
        let before: Vec<String> = keys.iter().map(|k| p.route(k).unwrap().to_owned()).collect();
        // Stable, and spread over all three.
        for (k, b) in keys.iter().zip(&before) {
            assert_eq!(p.route(k).unwrap(), b);
        }
        for i in 0..3 {
            let n = before.iter().filter(|u| u.ends_with(&format!("{}", 40000 + i))).count();
            assert!(n > 800, "endpoint {i} got {n} of 3000 keys");
        }
        // Eject endpoint 1: only its keys move.
        p.failed(Pick { index: 1 });
        p.failed(Pick { index: 1 });
        assert_eq!(p.healthy(), [true, false, true]);
        let ejected = &p.endpoints[1].url;
        for (k, b) in keys.iter().zip(&before) {
            let now = p.route(k).unwrap();
            if b == ejected {
                assert_ne!(now, ejected);
            } else {
                assert_eq!(now, b, "a key of a healthy endpoint moved");
            }
        }
    }

    #[tokio::test]
    async fn breaker_opens_when_all_are_ejected_and_half_opens_after_backoff() {
        let p = pool(1, Duration::from_millis(50));
        assert!(!p.breaker_open());
        let pick = p.pick("k", &[]).unwrap();
        p.failed(pick);
        assert!(!p.breaker_open(), "one failure is below eject_after");
        p.failed(pick);
        assert!(p.breaker_open());
        assert_eq!(p.pick("k", &[]), None);
        tokio::time::sleep(Duration::from_millis(60)).await;
        // Half-open: exactly one probe.
        let probe = p.pick("k", &[]).unwrap();
        assert_eq!(p.pick("k", &[]), None, "a second probe while the first is in flight");
        p.failed(probe);
        assert!(p.breaker_open(), "a failed probe ejects again, for longer");
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(p.breaker_open(), "the back-off doubled to 100 ms");
        tokio::time::sleep(Duration::from_millis(60)).await;
        let probe = p.pick("k", &[]).unwrap();
        p.answered(probe);
        assert!(!p.breaker_open());
        assert_eq!(p.healthy(), [true]);
    }

    #[test]
    fn retry_budget_is_a_ratio_of_calls_with_a_reserve() {
        let b = RetryBudget::new(0.1, 2);
        assert!(b.withdraw() && b.withdraw());
        assert!(!b.withdraw(), "reserve spent");
        for _ in 0..9 {
            b.deposit();
        }
        assert!(!b.withdraw(), "0.9 of a token");
        b.deposit();
        assert!(b.withdraw());
        for _ in 0..1000 {
            b.deposit();
        }
        assert!(b.withdraw() && b.withdraw() && !b.withdraw(), "capped at the reserve");
    }
}
