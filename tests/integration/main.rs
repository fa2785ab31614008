//! The integration tests: one binary, one module per behaviour, each test against its
//! own `redis-server` (or embedded store) and daemon (`tests/support`, the
//! `portcullis-test-support` crate the benches share). Tests that install process-wide
//! state (a global metrics recorder, the global trace propagator) are in
//! `tests/process_global/`, a binary of their own. What the repository says of itself
//! (its layout, the documentation's paths, the README's tour, what deploy/ ships) is
//! checked apart from behaviour, in `consistency` (tests/integration/consistency/).

mod admin;
mod breach;
mod candidate;
mod candidate_defences;
mod candidate_flows;
mod ceiling;
mod client;
mod client_conformance;
mod client_keepalive;
mod cluster_store;
mod concurrency;
mod consistency;
mod cpu_budget;
mod daemon_process;
mod devices;
mod effective_config;
mod embedded_store;
mod error_messages;
mod example_gateway;
mod flows;
mod hardening;
mod health;
mod health_probe;
mod idempotency;
mod invalid_input;
mod json_logs;
mod key_secret;
mod lockout_notice;
mod lockout_schedule;
mod log_lines;
mod metrics;
mod network;
mod normalization;
mod operator_verify;
mod properties;
mod realm_status;
mod redis_commands;
mod redis_credentials;
mod redis_tls;
mod refusal_episodes;
mod repeats;
mod rpc_table;
mod security_events;
mod sentinel_store;
mod signals;
mod spray;
mod spray_window;
mod step_up;
mod store_conformance;
mod store_failures;
mod store_safety;
mod throttle_twins;
mod tls;
mod tls_quickstart;
mod tls_refusals;
mod tls_reload;
mod verify;
mod verify_exits;
mod why_shut;
