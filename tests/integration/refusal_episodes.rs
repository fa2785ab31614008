//! A flood of refusals is a refusal episode: one line when it opens, one summary when
//! it closes after a quiet interval, never a line per refusal.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::telemetry::episodes::RefusalEpisodes;
use portcullis::verify::budget::{BudgetSettings, CpuBudget, Lane, Refusal};

/// Collects every log line written in this process.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Lines {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

#[tokio::test]
async fn ten_thousand_refusals_make_a_handful_of_log_lines() {
    let lines = Lines::default();
    let writer = lines.clone();
    // The lines of the CPU budget and of refusal episodes, at every level: a line per
    // refusal would be one of them. On this thread only (the test's runtime has one, and
    // the episode's closing task runs on it): the other tests of this process run their
    // daemons on other threads, and their own episodes (a store refused on purpose) must
    // not land here.
    let subscriber = tracing_subscriber::fmt()
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            "portcullis::verify=trace,portcullis::telemetry::episodes=trace",
        ))
        .with_writer(move || writer.clone())
        .finish();
    let _scope = tracing::subscriber::set_default(subscriber);

    let quiet = Duration::from_millis(300);
    let episodes = RefusalEpisodes::new(quiet);
    let settings = BudgetSettings {
        max_concurrent: 1,
        max_per_client: 1,
        max_wait: Duration::from_secs(1),
        max_waiters: 1,
        max_trusted_waiters: 1,
    };
    let governor = Arc::new(CpuBudget::with_episodes(settings, episodes.clone()).unwrap());
    // One ticket holds the slot, one the only place in the queue: every further call is
    // refused with queue_full.
    let _slot = governor.reserve("a", Lane::Untrusted).unwrap();
    let _queued = governor.reserve("b", Lane::Untrusted).unwrap();
    for n in 0..10_000 {
        let refused = governor.reserve(&format!("flood-{n}"), Lane::Untrusted).err();
        assert_eq!(refused, Some(Refusal::QueueFull));
    }
    assert_eq!(governor.stats().refused[0], 10_000);
    assert!(episodes.is_open());

    // The quiet interval passes: the episode closes with its summary.
    tokio::time::sleep(quiet * 3).await;
    assert!(!episodes.is_open());
    let text = lines.text();
    let count = text.lines().count();
    assert!(count <= 3, "{count} log lines for 10,000 refusals:\n{text}");
    let opened: Vec<_> = text.lines().filter(|l| l.contains("refusal episode opened")).collect();
    assert_eq!(opened.len(), 1, "{text}");
    assert!(opened[0].contains("queue_full"), "{text}");
    let closed: Vec<_> = text.lines().filter(|l| l.contains("refusal episode closed")).collect();
    assert_eq!(closed.len(), 1, "{text}");
    assert!(closed[0].contains("total=10000") && closed[0].contains("queue_full=10000"), "{text}");
    assert!(!text.contains("flood-"), "a client key was logged");

    // A refusal after the quiet interval opens a new episode.
    assert!(governor.reserve("again", Lane::Untrusted).is_err());
    let text = lines.text();
    assert_eq!(text.lines().filter(|l| l.contains("refusal episode opened")).count(), 2);
}
