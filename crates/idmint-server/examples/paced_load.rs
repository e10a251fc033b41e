//! `paced_load`: an open-loop, constant-rate HTTP/1.1 load generator for latency at a given
//! rate (issue 23: "p99 at half the measured capacity below 1 ms"), where wrk, closed-loop,
//! hides the queueing behind a stall (coordinated omission).
//!
//! Request `i` is due at `start + i / RATE` (one global schedule) and is dealt to connection
//! `i mod CONNECTIONS`, each a kept-alive hyper HTTP/1.1 connection. A connection sends its
//! requests one after the other (no pipelining); a request whose connection is still busy
//! waits, and its latency is counted from its *due* time to the end of its answer body, so a
//! stall counts for every request queued behind it. The pacer is a task on the same runtime
//! as the connections, a tokio runtime of `--threads` workers (default 1, so that on a 2-core
//! machine the server keeps the other core). Tokio's timer ticks in milliseconds, so within
//! 2 ms of a due time the pacer yields to the runtime in a loop instead of sleeping: the
//! worker is busy all the time (one core, whatever the rate), but requests leave within
//! microseconds of their due time. (A pacer thread sleeping to each due time and handing the
//! request over was tried first: on this 2-core VM each request then left about 100 µs late,
//! the wake-up of the runtime's worker by another thread, which added to every latency.)
//!
//! So give it a core of its own: `scripts/bench-http --latency` runs it under `taskset -c 1`
//! with the server under `taskset -c 0`. There the spin is what it should be: it takes only
//! the generator's own core, and the worker never sleeps, so no request waits for a wake-up.
//! The kernel yield in the spin then finds nothing else to run on that core and returns at
//! once; it is kept for runs by hand without pinning, where it lets a server thread waiting
//! for the core run before this one's time slice ends.
//!
//! Requests due in the first `--warmup` seconds are sent but not counted. At the end it
//! prints one line of JSON:
//!
//! - `sent`: counted requests (those due after the warm-up); `answered`: those with a whole answer
//!   (any status); `errors`: answers whose status was not 200; `failed`: counted requests
//!   with no answer (connection error, or none within `DRAIN` after the schedule ended);
//! - `achieved_rate`: answered requests per second, from the first counted due time to the
//!   last counted answer;
//! - `p50_us` … `max_us`: latency of the 200 answers in µs (exact: every latency is kept, as
//!   a `u32` of µs, and sorted at the end; 60 s at 100 000 req/s is 24 MB);
//! - `late`: requests that began more than 1 ms after `max(due time, end of the previous
//!   answer on their connection)`, that is, late because the generator was behind, not because the server was; `lag_p99_us`: the 99th percentile
//!   of that delay. If `late` is more than a few, the figures measure the generator: use
//!   fewer connections or more `--threads`, or a lower rate.
//!
//! The exit code is 1 when `errors` or `failed` is not 0, 2 on bad arguments or when no
//! connection could be opened.
//!
//! Run (a server listening, e.g. `idmint serve --store memory://` with a tag `bench`):
//!
//! ```sh
//! cargo run --release -p idmint-server --example paced_load -- \
//!     http://127.0.0.1:8080/api/segment/get/bench 50000 10 --warmup 2 --connections 32
//! ```
//!
//! Arguments: `URL RATE DURATION [--connections N] [--warmup SECONDS] [--threads N]`; `URL`
//! is `http://HOST:PORT/PATH` (no TLS), `RATE` requests/s, `DURATION` the counted seconds.
//! `scripts/bench-http --latency` runs it at half each server's wrk -t1 -c32 capacity, both
//! measured on the load's core against the server pinned to the other.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::client::conn::http1;
use hyper::header::HOST;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;

/// How long after the last due time the answers still in flight are waited for.
const DRAIN: Duration = Duration::from_secs(5);
/// A request that begins later than this after it could have is `late`.
const LATE: Duration = Duration::from_millis(1);
/// How close to a due time the pacer stops sleeping on tokio's (millisecond) timer.
const SPIN: Duration = Duration::from_millis(2);
/// Between connecting every connection and the first due time.
const LEAD: Duration = Duration::from_millis(100);

const USAGE: &str = "usage: paced_load URL RATE DURATION [--connections N] [--warmup SECONDS] \
                     [--threads N]";

/// The command line.
struct Args {
    /// Host and port to connect to.
    authority: String,
    /// Path and query of each request.
    path: String,
    /// Requests per second, over all connections.
    rate: f64,
    /// Counted seconds.
    duration: f64,
    /// Kept-alive connections.
    connections: usize,
    /// Seconds sent but not counted, before the counted ones.
    warmup: f64,
    /// Tokio worker threads.
    threads: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut positional = Vec::new();
    let (mut connections, mut warmup, mut threads) = (32usize, 2.0f64, 1usize);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--connections" => connections = number(&value("--connections")?)?,
            "--warmup" => warmup = number(&value("--warmup")?)?,
            "--threads" => threads = number(&value("--threads")?)?,
            "-h" | "--help" => return Err(USAGE.to_string()),
            _ if arg.starts_with("--") => return Err(format!("unknown option {arg}")),
            _ => positional.push(arg),
        }
    }
    let [url, rate, duration] = <[String; 3]>::try_from(positional)
        .map_err(|_| "needs URL, RATE and DURATION".to_string())?;
    let rest = url.strip_prefix("http://").ok_or("the URL must start with http://")?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    let (rate, duration): (f64, f64) = (number(&rate)?, number(&duration)?);
    if !(rate > 0.0 && duration > 0.0 && warmup >= 0.0 && connections > 0 && threads > 0) {
        return Err("RATE, DURATION, --connections and --threads must be positive".to_string());
    }
    Ok(Args {
        authority: authority.to_string(),
        path: path.to_string(),
        rate,
        duration,
        connections,
        warmup,
        threads,
    })
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("not a number: {text}"))
}

/// What one connection saw of the counted requests.
#[derive(Default)]
struct Tally {
    sent: u64,
    answered: u64,
    errors: u64,
    failed: u64,
    late: u64,
    /// Due time to end of body of each 200 answer, µs.
    latencies: Vec<u32>,
    /// How long each request began after it could have, µs.
    lags: Vec<u32>,
    /// End of the last counted answer.
    last_answer: Option<Instant>,
}

fn micros(duration: Duration) -> u32 {
    u32::try_from(duration.as_micros()).unwrap_or(u32::MAX)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("paced_load: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads)
        .enable_all()
        .build();
    match runtime.map_err(|e| e.to_string()).and_then(|r| r.block_on(run(&args))) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("paced_load: {message}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: &Args) -> Result<ExitCode, String> {
    // Every connection open before the first due time.
    let mut senders = Vec::with_capacity(args.connections);
    let mut receivers = Vec::with_capacity(args.connections);
    let mut connections = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        connections.push(connect(&args.authority).await?);
        let (sender, receiver) = mpsc::unbounded_channel::<Instant>();
        senders.push(sender);
        receivers.push(receiver);
    }
    let start = Instant::now() + LEAD;
    let counted_from = start + Duration::from_secs_f64(args.warmup);
    let total = ((args.warmup + args.duration) * args.rate).round() as u64;
    let last_due = start + Duration::from_secs_f64(total as f64 / args.rate);
    let drain_until = tokio::time::Instant::from_std(last_due + DRAIN);

    let mut tasks = Vec::with_capacity(args.connections);
    for (connection, receiver) in connections.into_iter().zip(receivers) {
        let (authority, path) = (args.authority.clone(), args.path.clone());
        tasks.push(tokio::spawn(drive(
            connection,
            receiver,
            authority,
            path,
            counted_from,
            drain_until,
        )));
    }
    let rate = args.rate;
    let pacer = tokio::spawn(pace(senders, start, rate, total));

    let mut all = Tally::default();
    for task in tasks {
        let tally = task.await.map_err(|e| format!("a connection's task failed: {e}"))?;
        all.sent += tally.sent;
        all.answered += tally.answered;
        all.errors += tally.errors;
        all.failed += tally.failed;
        all.late += tally.late;
        all.latencies.extend(tally.latencies);
        all.lags.extend(tally.lags);
        all.last_answer = all.last_answer.max(tally.last_answer);
    }
    pacer.await.map_err(|e| format!("the pacer failed: {e}"))?;

    all.latencies.sort_unstable();
    all.lags.sort_unstable();
    let span = all.last_answer.map_or(0.0, |end| (end - counted_from).as_secs_f64());
    let achieved = if span > 0.0 { all.answered as f64 / span } else { 0.0 };
    let at = |p: f64| percentile(&all.latencies, p);
    println!(
        "{{\"url\":\"http://{}{}\",\"rate\":{},\"duration_s\":{},\"warmup_s\":{},\
         \"connections\":{},\"threads\":{},\"sent\":{},\"answered\":{},\"errors\":{},\
         \"failed\":{},\"achieved_rate\":{:.0},\"p50_us\":{},\"p90_us\":{},\"p99_us\":{},\
         \"p99_9_us\":{},\"max_us\":{},\"late\":{},\"lag_p99_us\":{}}}",
        args.authority,
        args.path,
        args.rate,
        args.duration,
        args.warmup,
        args.connections,
        args.threads,
        all.sent,
        all.answered,
        all.errors,
        all.failed,
        achieved,
        at(0.50),
        at(0.90),
        at(0.99),
        at(0.999),
        all.latencies.last().copied().unwrap_or(0),
        all.late,
        percentile(&all.lags, 0.99),
    );
    if all.late > 0 {
        eprintln!(
            "paced_load: {} of {} requests began more than 1 ms late because the generator \
             was behind; the latencies are partly the generator's",
            all.late, all.sent
        );
    }
    Ok(if all.errors > 0 || all.failed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The nearest-rank percentile of sorted values (0 when there are none).
fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A kept-alive HTTP/1.1 connection: its request sender; the connection itself runs as a task.
async fn connect(authority: &str) -> Result<http1::SendRequest<Empty<Bytes>>, String> {
    let stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| format!("cannot connect to {authority}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("handshake with {authority}: {e}"))?;
    tokio::spawn(async move {
        // A broken connection shows as the next request's error.
        let _ = connection.await;
    });
    Ok(sender)
}

/// The pacer: request `i` (of `total`) handed to connection `i mod n` at its due time.
///
/// Tokio's timer ticks in milliseconds, so it only brings the pacer to within `SPIN` of a due
/// time; from there the pacer yields to the runtime until the time has come (the runtime
/// polls its sockets between yields), so the worker does not sleep while requests are due
/// and no other thread has to wake it.
async fn pace(senders: Vec<mpsc::UnboundedSender<Instant>>, start: Instant, rate: f64, total: u64) {
    let nanos_per_request = 1e9 / rate;
    for i in 0..total {
        let due = start + Duration::from_nanos((i as f64 * nanos_per_request) as u64);
        loop {
            let now = Instant::now();
            if now >= due {
                break;
            }
            if due - now > SPIN {
                tokio::time::sleep_until(tokio::time::Instant::from_std(due - SPIN)).await;
            } else {
                // The kernel's yield first: a server thread waiting for this core runs now
                // rather than after this thread's time slice; then the runtime's, which polls
                // the sockets and runs the connections' tasks before coming back here.
                std::thread::yield_now();
                tokio::task::yield_now().await;
            }
        }
        // A connection whose task has ended (drain timeout) takes no more requests.
        let _ = senders[(i % senders.len() as u64) as usize].send(due);
    }
}

/// One connection's loop: each request dealt to it sent once the previous one is answered.
async fn drive(
    mut sender: http1::SendRequest<Empty<Bytes>>,
    mut due_times: mpsc::UnboundedReceiver<Instant>,
    authority: String,
    path: String,
    counted_from: Instant,
    drain_until: tokio::time::Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut free_since = Instant::now();
    let mut broken = false;
    loop {
        let due = match tokio::time::timeout_at(drain_until, due_times.recv()).await {
            Ok(Some(due)) => due,
            Ok(None) => break,
            Err(_) => {
                // Past the drain: what is still queued is counted as failed.
                due_times.close();
                while let Ok(due) = due_times.try_recv() {
                    tally.sent += u64::from(due >= counted_from);
                    tally.failed += u64::from(due >= counted_from);
                }
                break;
            }
        };
        let counted = due >= counted_from;
        tally.sent += u64::from(counted);
        if broken {
            match connect(&authority).await {
                Ok(fresh) => (sender, broken) = (fresh, false),
                Err(_) => {
                    tally.failed += u64::from(counted);
                    continue;
                }
            }
        }
        let began = Instant::now();
        let lag = began.saturating_duration_since(due.max(free_since));
        let request =
            Request::get(path.as_str()).header(HOST, authority.as_str()).body(Empty::new());
        let request = match request {
            Ok(request) => request,
            Err(_) => {
                tally.failed += u64::from(counted);
                continue;
            }
        };
        if counted {
            tally.late += u64::from(lag > LATE);
            tally.lags.push(micros(lag));
        }
        let answer = tokio::time::timeout_at(drain_until, exchange(&mut sender, request)).await;
        let end = Instant::now();
        free_since = end;
        match answer {
            Ok(Ok(status)) => {
                if counted {
                    tally.answered += 1;
                    tally.last_answer = Some(end);
                    if status == StatusCode::OK {
                        tally.latencies.push(micros(end - due));
                    } else {
                        tally.errors += 1;
                    }
                }
            }
            Ok(Err(_)) => {
                tally.failed += u64::from(counted);
                broken = true;
            }
            Err(_) => {
                tally.failed += u64::from(counted);
                due_times.close();
                while let Ok(due) = due_times.try_recv() {
                    tally.sent += u64::from(due >= counted_from);
                    tally.failed += u64::from(due >= counted_from);
                }
                break;
            }
        }
    }
    tally
}

/// One request on the connection, to the end of its answer's body; its status.
async fn exchange(
    sender: &mut http1::SendRequest<Empty<Bytes>>,
    request: Request<Empty<Bytes>>,
) -> Result<StatusCode, hyper::Error> {
    sender.ready().await?;
    let answer = sender.send_request(request).await?;
    let status = answer.status();
    let mut body = answer.into_body();
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok(status)
}
