//! The repository's own HTTP/2 load generator for unary gRPC calls, in the manner of
//! h2load (`h2load -c C -m S -n N -d BODY -H "content-type: application/grpc" -H "te:
//! trailers"`), on the `h2` crate directly: `C` plaintext (h2c) connections with `S`
//! streams in flight each, every stream a closed loop that POSTs one pre-encoded gRPC
//! frame, reads the answer's body and trailers and counts its `grpc-status` (which h2load
//! does not see: it counts HTTP statuses only).
//!
//! A run is a warm-up of unmeasured calls, then `N` measured calls on the same
//! connections; the rate is `N` over the measured phase's wall time, the latency of a
//! call runs from when its loop starts it (before the connection takes the stream, which
//! is at once while `S` is within the server's `max_concurrent_streams`) to its
//! trailers.
//!
//! By default every loop is closed (a call as soon as the last one answered: the peak
//! rate). With [`Load::rate`] the measured calls are paced instead, an open loop, in the
//! manner of wrk2: call `k` is due `k / rate` seconds into the phase, and its latency
//! runs from when it was due, so a wait for a free loop counts in it (no coordinated
//! omission). A pacer thread (`h2-load-pacer`) hands each due call to the next free
//! loop; it sleeps with the operating system's high-resolution timer, so calls come
//! evenly, not in the bursts of tokio's 1 ms timer. A call that starts more than
//! [`LATE`] after it was due is counted in [`LoadReport::late`]: the loops could not keep
//! up. It samples the CPU of the serving process, if given, and its own (both
//! from `/proc`) over the measured phase.
//!
//! Lean on purpose, as its figures are compared with ones h2load measured: the
//! request's URI, headers and body are built once and cloned for each call (reference
//! counts, and the header map h2 takes by value), every stream loop keeps its latencies
//! in a buffer reserved up front, and the calls run on a runtime of their own
//! ([`Load::threads`] workers, named `h2-load`), apart from whatever else the calling
//! process runs. [`run`] blocks: call it outside any tokio runtime.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};

use crate::bench::{millis, percentile};
use crate::proc_cpu::{process_cpu_seconds, threads_cpu};

/// Errors quoted per run when calls fail.
const QUOTED_ERRORS: usize = 3;
/// HTTP/2 receive windows the generator announces (h2load's defaults are larger
/// still): answers never wait for a `WINDOW_UPDATE`.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 1 << 24;
/// The name of the generator's threads; its pacer's begins with it.
const THREAD_NAME: &str = "h2-load";
const PACER_NAME: &str = "h2-load-pacer";
/// How long after it was due a paced call may start before it counts as late: longer
/// than the pacer's sleep overshoots on a loaded machine.
pub const LATE: Duration = Duration::from_millis(1);

/// What to send, where, and how much.
pub struct Load {
    /// The server (plaintext HTTP/2).
    pub addr: SocketAddr,
    /// The method's path, e.g. `/portcullis.v1.Governor/RecordAttempt`.
    pub path: &'static str,
    /// The request body: one gRPC length-prefixed message ([`grpc_frame`]).
    pub frame: Bytes,
    /// An `authorization` header value (e.g. `Bearer …`) sent with every call, if any.
    pub authorization: Option<String>,
    /// HTTP/2 connections.
    pub connections: usize,
    /// Streams in flight per connection.
    pub streams: usize,
    /// Unmeasured calls before the measured ones.
    pub warm_up: u64,
    /// Measured calls.
    pub calls: u64,
    /// Calls per second to pace the measured calls at (an open loop); `None`: every loop
    /// calls again as soon as it is answered (a closed loop, the peak rate).
    pub rate: Option<f64>,
    /// Worker threads of the generator's runtime (h2load's `-t`).
    pub threads: usize,
    /// A process whose CPU is sampled over the measured phase (the server's).
    pub cpu_of: Option<u32>,
}

/// What one [`run`] measured.
pub struct LoadReport {
    /// Measured calls answered with `grpc-status` 0.
    pub ok: u64,
    /// Measured calls answered with another `grpc-status`, by status, most first.
    pub failed: Vec<(u32, u64)>,
    /// Measured calls that got no gRPC answer (HTTP/2 errors, HTTP status not 200).
    pub errors: u64,
    /// A few of the failures and errors, as text.
    pub quoted: Vec<String>,
    /// Calls sent in all, warm-up included (to divide server-side counts by).
    pub sent: u64,
    /// Measured calls asked for ([`Load::calls`]).
    pub calls: u64,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
    /// Latencies of the measured calls that were answered, sorted.
    pub latencies: Vec<Duration>,
    /// CPU of [`Load::cpu_of`] over the measured phase, in percent of one core.
    pub cpu_percent: Option<f64>,
    /// CPU of the generator's own threads over the measured phase, in percent of one
    /// core (`None` where `/proc` is not readable).
    pub load_cpu_percent: Option<f64>,
    /// Connections × streams, for the report line.
    pub shape: (usize, usize),
    /// The rate the measured calls were paced at, if they were ([`Load::rate`]).
    pub paced: Option<f64>,
    /// Paced calls that started more than [`LATE`] after they were due (always 0 for a
    /// closed loop).
    pub late: u64,
}

impl LoadReport {
    /// Measured calls per second (answered or not, as h2load counts them).
    pub fn rate(&self) -> f64 {
        let calls = self.ok + self.failed.iter().map(|(_, n)| n).sum::<u64>() + self.errors;
        calls as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The p99 latency, in ms.
    pub fn p99_ms(&self) -> f64 {
        millis(percentile(&self.latencies, 990))
    }

    /// Whether every measured call was made and answered with `grpc-status` 0.
    pub fn all_ok(&self) -> bool {
        self.failed.is_empty() && self.errors == 0 && self.ok == self.calls
    }

    /// One line in the manner of the h2load script's: shape, calls/s, latencies, counts.
    pub fn line(&self) -> String {
        let mean = if self.latencies.is_empty() {
            Duration::ZERO
        } else {
            self.latencies.iter().sum::<Duration>() / self.latencies.len() as u32
        };
        let failed: Vec<String> =
            self.failed.iter().map(|(status, n)| format!("grpc-status {status}: {n}")).collect();
        let cpu = self.cpu_percent.map_or(String::new(), |c| format!(", server CPU {c:.0}%"));
        let own =
            self.load_cpu_percent.map_or(String::new(), |c| format!(", load tool CPU {c:.0}%"));
        let paced = self.paced.map_or(String::new(), |r| {
            format!(" (paced at {r:.0}, {} started over {} ms late)", self.late, LATE.as_millis())
        });
        format!(
            "{}x{}: {:.0} calls/s{paced}; ms mean {:.3} p50 {:.3} p90 {:.3} p99 {:.3} \
             max {:.3}; grpc-status 0: {}{}{}, errors: {}{cpu}{own}",
            self.shape.0,
            self.shape.1,
            self.rate(),
            millis(mean),
            millis(percentile(&self.latencies, 500)),
            millis(percentile(&self.latencies, 900)),
            self.p99_ms(),
            millis(self.latencies.last().copied().unwrap_or_default()),
            self.ok,
            if failed.is_empty() { "" } else { ", " },
            failed.join(", "),
            self.errors,
        )
    }
}

/// A gRPC length-prefixed message around `message`: flag byte 0 (not compressed), its
/// length in 4 bytes big-endian, the protobuf.
pub fn grpc_frame(message: &impl prost::Message) -> Bytes {
    let encoded = message.encode_to_vec();
    let mut frame = Vec::with_capacity(5 + encoded.len());
    frame.push(0);
    frame.extend_from_slice(&u32::try_from(encoded.len()).expect("a small message").to_be_bytes());
    frame.extend_from_slice(&encoded);
    frame.into()
}

/// Runs `load`: connects, sends the warm-up, then the measured calls. Blocks until done;
/// an error if the runtime cannot start or no connection can be made.
pub fn run(load: &Load) -> Result<LoadReport, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(load.threads.max(1))
        .thread_name(THREAD_NAME)
        .enable_all()
        .build()
        .map_err(|e| format!("load runtime: {e}"))?;
    let report = runtime.block_on(drive(load));
    // The connections' tasks end with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(1));
    report
}

/// The parts every call's request is cloned from.
struct Template {
    uri: Uri,
    headers: HeaderMap,
    frame: Bytes,
}

impl Template {
    fn request(&self) -> Request<()> {
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// What one stream's loop saw in one phase.
#[derive(Default)]
struct StreamReport {
    ok: u64,
    failed: Vec<(u32, u64)>,
    errors: u64,
    quoted: Vec<String>,
    latencies: Vec<Duration>,
    late: u64,
}

/// When paced calls are due: call `k` at `start + k / rate` (`rate` in calls/s).
#[derive(Clone, Copy)]
struct Pace {
    start: Instant,
    rate: f64,
}

/// The due times of a paced phase, handed out by the pacer: the next free loop takes
/// the next one; none left when the pacer has sent them all.
type Dues = Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Instant>>>;

/// Starts the pacer thread: it sends call `k`'s due time when it is due, for `calls`
/// calls, sleeping between them (a thread's sleep, not tokio's 1 ms timer).
fn start_pacer(pace: Pace, calls: u64) -> (Dues, std::io::Result<std::thread::JoinHandle<()>>) {
    let (due_tx, due_rx) = tokio::sync::mpsc::unbounded_channel();
    let pacer = std::thread::Builder::new().name(PACER_NAME.into()).spawn(move || {
        for k in 0..calls {
            let due = pace.start + Duration::from_secs_f64(k as f64 / pace.rate);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            if due_tx.send(due).is_err() {
                return;
            }
        }
    });
    // A pacer that cannot start sends nothing: the phase ends at once, its calls missing.
    (Arc::new(tokio::sync::Mutex::new(due_rx)), pacer)
}

impl StreamReport {
    fn fail(&mut self, status: u32, calls: u64) {
        match self.failed.iter_mut().find(|(s, _)| *s == status) {
            Some((_, n)) => *n += calls,
            None => self.failed.push((status, calls)),
        }
    }

    fn quote(&mut self, e: String) {
        if self.quoted.len() < QUOTED_ERRORS {
            self.quoted.push(e);
        }
    }

    fn merge(&mut self, other: StreamReport) {
        self.ok += other.ok;
        for (status, n) in other.failed {
            self.fail(status, n);
        }
        self.errors += other.errors;
        for e in other.quoted {
            self.quote(e);
        }
        self.latencies.extend(other.latencies);
        self.late += other.late;
    }
}

async fn drive(load: &Load) -> Result<LoadReport, String> {
    if load.rate.is_some_and(|rate| !(rate.is_finite() && rate > 0.0)) {
        return Err(format!("rate {:?}: calls/s must be a positive number", load.rate));
    }
    let mut headers = HeaderMap::with_capacity(3);
    headers.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    if let Some(token) = &load.authorization {
        let value = HeaderValue::from_str(token).map_err(|e| format!("authorization: {e}"))?;
        headers.insert(http::header::AUTHORIZATION, value);
    }
    let uri: Uri =
        format!("http://{}{}", load.addr, load.path).parse().map_err(|e| format!("uri: {e}"))?;
    let template = Arc::new(Template { uri, headers, frame: load.frame.clone() });

    let mut senders = Vec::with_capacity(load.connections);
    for _ in 0..load.connections.max(1) {
        senders.push(connect(load.addr).await?);
    }
    let streams = load.streams.max(1);
    let warm = phase(&senders, streams, &template, load.warm_up, None).await;
    let cpu_before = load.cpu_of.and_then(process_cpu_seconds);
    let own_before = own_cpu_seconds();
    let started = Instant::now();
    let pace = load.rate.map(|rate| Pace { start: started, rate });
    let mut measured = phase(&senders, streams, &template, load.calls, pace).await;
    let elapsed = started.elapsed();
    let percent = |before: f64, after: f64| 100.0 * (after - before) / elapsed.as_secs_f64();
    let cpu_percent = cpu_before
        .zip(load.cpu_of.and_then(process_cpu_seconds))
        .map(|(before, after)| percent(before, after));
    let load_cpu_percent = own_before.zip(own_cpu_seconds()).map(|(b, a)| percent(b, a));
    measured.latencies.sort_unstable();
    measured.failed.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
    // The warm-up's failures are not counted, but quoted first: a daemon that refused
    // from the start says so there.
    let mut quoted = warm.quoted;
    quoted.extend(measured.quoted);
    quoted.truncate(QUOTED_ERRORS);
    Ok(LoadReport {
        ok: measured.ok,
        failed: measured.failed,
        errors: measured.errors,
        quoted,
        sent: load.warm_up + load.calls,
        calls: load.calls,
        elapsed,
        latencies: measured.latencies,
        cpu_percent,
        load_cpu_percent,
        shape: (senders.len(), streams),
        paced: load.rate,
        late: measured.late,
    })
}

/// CPU seconds of this process's `h2-load` threads (the generator's runtime).
fn own_cpu_seconds() -> Option<f64> {
    threads_cpu(|name| name.starts_with(THREAD_NAME).then_some(THREAD_NAME))
        .get(THREAD_NAME)
        .copied()
}

/// One HTTP/2 connection to `addr` (Nagle off, as h2load has it), its connection task
/// spawned.
async fn connect(addr: SocketAddr) -> Result<SendRequest<Bytes>, String> {
    let tcp =
        tokio::net::TcpStream::connect(addr).await.map_err(|e| format!("connect {addr}: {e}"))?;
    tcp.set_nodelay(true).map_err(|e| format!("TCP_NODELAY: {e}"))?;
    let (sender, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .handshake(tcp)
        .await
        .map_err(|e| format!("HTTP/2 handshake with {addr}: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

/// `calls` calls from `streams` loops on each connection, every loop taking the next
/// call from one shared count until they are all taken, or, if `pace`, the next due
/// call from the pacer.
async fn phase(
    senders: &[SendRequest<Bytes>],
    streams: usize,
    template: &Arc<Template>,
    calls: u64,
    pace: Option<Pace>,
) -> StreamReport {
    let (dues, pacer) = match pace {
        Some(pace) => {
            let (dues, pacer) = start_pacer(pace, calls);
            (Some(dues), Some(pacer))
        }
        None => (None, None),
    };
    let taken = Arc::new(AtomicU64::new(0));
    let loops = (senders.len() * streams) as u64;
    // Room for a fair share and then some, so no loop grows its buffer while measuring.
    let reserve = (calls.div_ceil(loops.max(1)) * 2 + 16) as usize;
    let mut tasks = Vec::with_capacity(senders.len() * streams);
    for sender in senders {
        for _ in 0..streams {
            let (sender, template, taken) = (sender.clone(), template.clone(), taken.clone());
            let calls = Calls { taken, total: calls, dues: dues.clone() };
            tasks.push(tokio::spawn(stream_loop(sender, template, calls, reserve)));
        }
    }
    let mut total = StreamReport::default();
    for task in tasks {
        match task.await {
            Ok(report) => total.merge(report),
            Err(e) => {
                total.errors += 1;
                total.quote(format!("load task: {e}"));
            }
        }
    }
    // The pacer has sent every due time (the loops took them all), or failed: say so.
    let failed = match pacer {
        Some(Ok(pacer)) => pacer.join().err().map(|_| "the pacer panicked".to_owned()),
        Some(Err(e)) => Some(format!("the pacer did not start: {e}")),
        None => None,
    };
    if let Some(e) = failed {
        total.errors += 1;
        total.quote(e);
    }
    total
}

/// A phase's calls as one loop sees them: the shared count of those taken and how many
/// there are, or (paced) the due times from the pacer.
struct Calls {
    taken: Arc<AtomicU64>,
    total: u64,
    dues: Option<Dues>,
}

async fn stream_loop(
    mut sender: SendRequest<Bytes>,
    template: Arc<Template>,
    calls: Calls,
    reserve: usize,
) -> StreamReport {
    let mut report = StreamReport { latencies: Vec::with_capacity(reserve), ..Default::default() };
    loop {
        // A paced call's latency runs from when it was due.
        let start = match &calls.dues {
            Some(dues) => {
                let Some(due) = dues.lock().await.recv().await else { break };
                if due.elapsed() > LATE {
                    report.late += 1;
                }
                due
            }
            None if calls.taken.fetch_add(1, Ordering::Relaxed) < calls.total => Instant::now(),
            None => break,
        };
        match call(&mut sender, &template).await {
            Ok(0) => {
                report.ok += 1;
                report.latencies.push(start.elapsed());
            }
            Ok(status) => {
                report.latencies.push(start.elapsed());
                report.fail(status, 1);
                if report.quoted.len() < QUOTED_ERRORS {
                    report.quote(format!("grpc-status {status}"));
                }
            }
            Err(e) => {
                report.errors += 1;
                report.quote(e);
            }
        }
    }
    report
}

/// One unary call: the request and its frame, then the answer, its body and trailers.
/// Returns the `grpc-status`.
async fn call(sender: &mut SendRequest<Bytes>, template: &Template) -> Result<u32, String> {
    poll_fn(|cx| sender.poll_ready(cx)).await.map_err(|e| format!("stream not ready: {e}"))?;
    let (response, mut body) =
        sender.send_request(template.request(), false).map_err(|e| format!("request: {e}"))?;
    body.send_data(template.frame.clone(), true).map_err(|e| format!("body: {e}"))?;
    let response = response.await.map_err(|e| format!("response: {e}"))?;
    if response.status() != StatusCode::OK {
        return Err(format!("HTTP status {}", response.status()));
    }
    let (head, mut answer) = response.into_parts();
    // A trailers-only answer (an error) has its status in the headers.
    if let Some(status) = head.headers.get("grpc-status") {
        return grpc_status(status);
    }
    while let Some(data) = answer.data().await {
        let data = data.map_err(|e| format!("answer body: {e}"))?;
        let _ = answer.flow_control().release_capacity(data.len());
    }
    let trailers = answer.trailers().await.map_err(|e| format!("trailers: {e}"))?;
    match trailers.as_ref().and_then(|t| t.get("grpc-status")) {
        Some(status) => grpc_status(status),
        None => Err("an answer without grpc-status".into()),
    }
}

fn grpc_status(value: &HeaderValue) -> Result<u32, String> {
    value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("grpc-status {value:?} is not a number"))
}
