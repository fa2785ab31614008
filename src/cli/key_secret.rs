//! `portcullis adopt-key-secret`: the operator's step that rotates a store's key secret
//! (docs/store.md, "One key secret per store"). Every daemon proves at start and on every
//! reconnect that it holds the key secret the store was first used with, and refuses to
//! serve otherwise; this command makes the store's key check value the configured
//! secret's, so daemons with that secret serve and every other one stops at its next
//! check (within a second). Changing the secret forgets every count, which is why this is
//! an explicit step with `--forget-counts`, never something a daemon does by itself.

use std::process::ExitCode;

use clap::Args;
use portcullis::config::StoreSettings;
use portcullis::secret::KeySecret;
use portcullis::setting::error_chain;
use portcullis::store::embedded::{DB_FILE, EmbeddedStore};
use portcullis::store::key_check::ROTATION_PAUSE;
use portcullis::store::redis::RedisStore;
use portcullis::telemetry::events::{self, EventKind, SecurityEvent};

use super::serve_command::{ServeArgs, load};

/// `portcullis adopt-key-secret`'s flags: the store and secret exactly as `serve` reads
/// them, and the acknowledgement.
#[derive(Args)]
pub struct AdoptArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Acknowledge that every count kept under the old key secret is forgotten (its
    /// records expire unread) and that daemons holding the old secret stop serving.
    #[arg(long)]
    forget_counts: bool,
    /// Why, a ticket reference: put in the security event this step emits, with the
    /// operating system user who ran it (at most 256 bytes, no identifier).
    #[arg(long, default_value = "")]
    note: String,
}

/// Makes the configured store's key check value the configured key secret's. Exit
/// status: 0 done, 2 error (nothing changed).
pub async fn adopt_key_secret(args: AdoptArgs) -> ExitCode {
    if let Some(why) = portcullis::validate::note_refusal(&args.note) {
        eprintln!("portcullis: --note {why}");
        return ExitCode::from(2);
    }
    if !args.forget_counts {
        eprintln!(
            "portcullis: adopt-key-secret makes the store's key secret the one this \
             configuration gives (store.key_secret_file or PORTCULLIS_KEY_SECRET): every \
             count kept under the old secret is forgotten, and daemons still holding the old \
             secret stop serving (on Redis the store is closed to every secret for a few seconds \
             first, so two never serve at once). Run it again with --forget-counts to do so."
        );
        return ExitCode::from(2);
    }
    let settings = match load(args.serve.config(), &args.serve.overrides()) {
        Ok((_, settings)) => settings,
        Err(e) => {
            eprintln!("portcullis: {}", error_chain(&*e));
            return ExitCode::from(2);
        }
    };
    let adopted = match settings.store {
        StoreSettings::Redis(redis) => {
            let Some(secret) = settings.secret else {
                eprintln!(
                    "portcullis: no key secret: set store.key_secret_file or PORTCULLIS_KEY_SECRET"
                );
                return ExitCode::from(2);
            };
            let target = redis.shape.describe();
            say!(
                "closing {target} to every key secret for {} s, then opening it to this one",
                ROTATION_PAUSE.as_secs()
            );
            match RedisStore::open(&redis) {
                Ok(store) => store
                    .adopt_key_check(&secret.store_check())
                    .await
                    .map(|()| target.clone())
                    .map_err(|e| format!("{target} did not take the key check value: {}; check that it runs and that this host can reach it, then run this again", error_chain(&e))),
                Err(e) => Err(format!("{target} could not be opened: {}", error_chain(&e))),
            }
        }
        StoreSettings::Embedded { data_dir, .. } => {
            let target = format!("the embedded store in {} (store.data_dir)", data_dir.display());
            if !data_dir.join(DB_FILE).is_file() {
                eprintln!(
                    "portcullis: there is no {target}: nothing to adopt. For a Redis store, give \
                     --config with its [store] (or --redis-url); for an embedded one, --data-dir"
                );
                return ExitCode::from(2);
            }
            let secret = match settings.secret {
                Some(secret) => Ok(secret),
                None => KeySecret::load_or_generate(&data_dir),
            };
            match secret {
                Ok(secret) => EmbeddedStore::adopt_key_check(&data_dir, &secret.store_check())
                    .map(|()| target.clone())
                    .map_err(|e| {
                        format!("{} (is a daemon still using it? stop it first)", error_chain(&e))
                    }),
                Err(e) => Err(error_chain(&e)),
            }
        }
    };
    match adopted {
        Ok(target) => {
            say!(
                "{target} is now keyed by this key secret: daemons holding it serve (on Redis \
                 at their next check, within a second), every other one refuses"
            );
            // The operator is whoever ran the command: the system's user name.
            let user = std::env::var("USER").or_else(|_| std::env::var("LOGNAME"));
            let caller = format!("cli:{}", user.as_deref().unwrap_or("-"));
            let event = SecurityEvent::new(EventKind::OperatorAdoptKeySecret)
                .operator(&caller, None, &args.note);
            if !events::deliver_now(event).await {
                eprintln!("portcullis: the security event could not be exported (OTEL_*)");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("portcullis: {e}");
            ExitCode::from(2)
        }
    }
}
