//! The Verify flood's probe: a child process (the bench binary re-run with [`PROBE_ENV`]
//! set, which then runs [`probe_main`] only) that times a fixed unit of SHA-256 work back
//! to back, and [`Probe`], the parent's side, which collects the unit times.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Set in the probe child's environment: the bench then runs [`probe_main`] only.
pub const PROBE_ENV: &str = "PORTCULLIS_VERIFY_BENCH_PROBE";
/// The probe's buffer: SHA-256 runs over it [`PROBE_PASSES`] times per unit.
pub const PROBE_BUFFER: usize = 1 << 20;
/// SHA-256 passes over [`PROBE_BUFFER`] per timed unit (about 3 ms here, idle).
pub const PROBE_PASSES: usize = 4;

/// Whether this process is the probe child (the bench's `main` then returns
/// [`probe_main`]).
pub fn is_probe() -> bool {
    std::env::var_os(PROBE_ENV).is_some()
}

/// The probe child: times units of SHA-256 work forever, one line of nanoseconds per
/// unit on stdout, and exits when the parent stops reading.
pub fn probe_main() -> ExitCode {
    let mut buffer: Vec<u8> = (0..PROBE_BUFFER).map(|i| (i % 251) as u8).collect();
    let mut out = std::io::stdout().lock();
    loop {
        let start = Instant::now();
        for _ in 0..PROBE_PASSES {
            let digest = Sha256::digest(std::hint::black_box(&buffer));
            // Each pass depends on the last, so none can be skipped.
            buffer[0] ^= digest[0];
        }
        let nanos = start.elapsed().as_nanos();
        if writeln!(out, "{nanos}").and_then(|()| out.flush()).is_err() {
            return ExitCode::SUCCESS;
        }
    }
}

/// The probe child and the thread collecting its unit times.
pub struct Probe {
    child: Child,
    /// (when the parent read it, how long the unit took).
    units: Arc<Mutex<Vec<(Instant, Duration)>>>,
    reader: Option<JoinHandle<()>>,
}

impl Probe {
    /// Starts this binary again as the probe child.
    pub fn start() -> Self {
        let exe = std::env::current_exe().expect("this bench's path");
        let mut child = Command::new(exe)
            .env(PROBE_ENV, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the probe");
        let stdout = child.stdout.take().unwrap();
        let units = Arc::new(Mutex::new(Vec::new()));
        let sink = units.clone();
        let reader = std::thread::Builder::new()
            .name("probe-reader".into())
            .spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Ok(nanos) = line.trim().parse::<u64>() {
                        let unit = (Instant::now(), Duration::from_nanos(nanos));
                        sink.lock().unwrap().push(unit);
                    }
                }
            })
            .expect("probe reader thread");
        Self { child, units, reader: Some(reader) }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Unit times reported in `[from, to)`, sorted.
    pub fn units(&self, from: Instant, to: Instant) -> Vec<Duration> {
        let units = self.units.lock().unwrap();
        let mut v: Vec<Duration> =
            units.iter().filter(|(at, _)| *at >= from && *at < to).map(|(_, d)| *d).collect();
        v.sort_unstable();
        v
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}
