//! `paced_load`: an open-loop, constant-rate HTTP/1.1 load generator for latency at a given
//! rate (issue 23: "p99 at half the measured capacity below 1 ms"), where wrk, closed-loop,
//! hides the queueing behind a stall (coordinated omission).
//!
//! Request `i` is due at `start + i / RATE` (one global schedule) and is dealt to connection
//! `i mod CONNECTIONS`, each a kept-alive HTTP/1.1 connection. A connection sends its requests
//! one after the other (no pipelining); a request whose connection is still busy waits, and
//! its latency is counted from its *due* time to the end of its answer body, so a stall
//! counts for every request queued behind it.
//!
//! **One thread, one event loop, no HTTP library.** The generator must cost much less per
//! request than the server it measures, or its own delays are counted as the server's: a
//! response that waits in the generator's socket because the generator is busy is latency
//! the server did not cause, and nothing in the figures tells it apart. So every connection
//! is a non-blocking socket on one `mio` poll (epoll), each request the same bytes written
//! with one `write`, and each answer read into a buffer and parsed only as far as its status
//! and `Content-Length` (a server answering without `Content-Length` is refused with a
//! message). (The first version of this file drove hyper's client on a tokio runtime; at
//! 61 000 req/s on this 2-core VM its runs swung from 0.5 ms to 50 ms of p99 for the same
//! bare hyper server while the server's core sat idle between requests: the time was the
//! generator's.)
//!
//! Within 2 ms of the next due time the loop polls without sleeping (epoll has millisecond
//! timeouts), so it takes its whole core and requests leave within microseconds of their
//! due time: run it on a core of its own (`scripts/bench-http --latency` runs it under
//! `taskset -c 1` with the server under `taskset -c 0`).
//!
//! Requests due in the first `--warmup` seconds are sent but not counted. At the end it
//! prints one line of JSON:
//!
//! - `sent`: counted requests (those due after the warm-up); `answered`: those with a whole
//!   answer (any status); `errors`: answers whose status was not 200; `failed`: counted
//!   requests with no answer (the connection broke before their answer, or could not be
//!   made again, or none came within `DRAIN` after the schedule ended);
//! - `achieved_rate`: answered requests per second, from the first counted due time to the
//!   last counted answer;
//! - `p50_us` … `max_us`: latency of the 200 answers in µs (exact: every latency is kept, as
//!   a `u32` of µs, and sorted at the end; 60 s at 100 000 req/s is 24 MB);
//! - `late`: requests that began more than 1 ms after `max(due time, end of the previous
//!   answer on their connection)`, that is, late because the generator was behind, not
//!   because the server was; `lag_p99_us`: the 99th percentile of that delay;
//! - `slow_episodes`: how many separate times answers took over 1 ms: requests over 1 ms
//!   whose due times lie within `EPISODE_GAP` (2 ms) of each other are one episode, the
//!   queue behind one pause of the server or the machine. A few episodes that each hold many
//!   requests are pauses of something; a p99 above 1 ms with many small ones is a server too
//!   slow for the rate. (On the machine issue 23 was measured on, a kernel thread took a core
//!   for 1.5–4 ms about every 0.5 s: about 20 episodes in 10 s before anything else.)
//! - `loop_gap_max_us`: the longest time between two turns of the event loop while it was
//!   polling without sleeping (requests due within 2 ms): the longest the generator itself
//!   was away (preempted, or busy with a burst of
//!   answers). An answer that arrived in such a gap is counted late by up to that much. If
//!   `late` is more than a few or the gap is near the latencies of interest, the figures
//!   measure the generator and its core: give it a quieter core or a lower rate.
//!
//! The exit code is 1 when `errors` or `failed` is not 0, 2 on bad arguments, when no
//! connection could be opened, or when an answer cannot be read (no `Content-Length`).
//!
//! Run (a server listening, e.g. `idmint serve --store memory://` with a tag `bench`):
//!
//! ```sh
//! cargo run --release -p idmint-server --example paced_load -- \
//!     http://127.0.0.1:8080/api/segment/get/bench 50000 10 --warmup 2 --connections 32
//! ```
//!
//! Arguments: `URL RATE DURATION [--connections N] [--warmup SECONDS]`; `URL` is
//! `http://HOST:PORT/PATH` (no TLS), `RATE` requests/s, `DURATION` the counted seconds.
//! `scripts/bench-http --latency` runs it at half each server's wrk -t1 -c32 capacity, both
//! measured on the load's core against the server pinned to the other.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::ToSocketAddrs;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token};

/// How long after the last due time the answers still in flight are waited for.
const DRAIN: Duration = Duration::from_secs(5);
/// A request that begins later than this after it could have is `late`.
const LATE: Duration = Duration::from_millis(1);
/// Latencies above this are slow, for `slow_episodes`.
const SLOW: Duration = Duration::from_millis(1);
/// Slow requests due further apart than this are separate episodes.
const EPISODE_GAP: Duration = Duration::from_millis(2);
/// How close to a due time the loop stops sleeping in epoll (whose timeout is in ms).
const SPIN: Duration = Duration::from_millis(2);
/// Between connecting every connection and the first due time.
const LEAD: Duration = Duration::from_millis(100);
/// Largest answer head (status line and headers) read before giving up on an answer.
const HEAD_BYTES_MAX: usize = 16 * 1024;

const USAGE: &str = "usage: paced_load URL RATE DURATION [--connections N] [--warmup SECONDS]";

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
}

fn parse_args() -> Result<Args, String> {
    let mut positional = Vec::new();
    let (mut connections, mut warmup) = (32usize, 2.0f64);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--connections" => connections = number(&value("--connections")?)?,
            "--warmup" => warmup = number(&value("--warmup")?)?,
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
    if !(rate > 0.0 && duration > 0.0 && warmup >= 0.0 && connections > 0) {
        return Err("RATE, DURATION and --connections must be positive".to_string());
    }
    Ok(Args {
        authority: authority.to_string(),
        path: path.to_string(),
        rate,
        duration,
        connections,
        warmup,
    })
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("not a number: {text}"))
}

/// What the counted requests saw, over all connections.
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
    /// Longest time between two turns of the loop while requests were due.
    loop_gap_max: Duration,
    /// Separate runs of slow answers (see `slow_episodes` in the file's docs).
    slow_episodes: u64,
    /// The latest due time of a slow answer so far.
    last_slow_due: Option<Instant>,
}

impl Tally {
    /// Counts the request due at `due` as sent and failed, if it is counted (due at or after
    /// `counted_from`).
    fn fail(&mut self, due: Instant, counted_from: Instant) {
        let counted = u64::from(due >= counted_from);
        self.sent += counted;
        self.failed += counted;
    }

    /// Counts a 200 answer to the request due at `due`, `latency` after it.
    fn answered_ok(&mut self, due: Instant, latency: Duration) {
        self.latencies.push(micros(latency));
        if latency <= SLOW {
            return;
        }
        if self.last_slow_due.is_none_or(|last| due > last + EPISODE_GAP) {
            self.slow_episodes += 1;
        }
        self.last_slow_due = Some(self.last_slow_due.map_or(due, |last| last.max(due)));
    }
}

fn micros(duration: Duration) -> u32 {
    u32::try_from(duration.as_micros()).unwrap_or(u32::MAX)
}

/// One kept-alive connection and the requests dealt to it.
struct Connection {
    stream: TcpStream,
    /// Due times of the requests dealt to it and not answered; the first is in flight when
    /// `in_flight`.
    queue: VecDeque<Instant>,
    /// The first queued request has been (or is being) written.
    in_flight: bool,
    /// Bytes of the request in flight still to write (a write the socket took only in part).
    unwritten: usize,
    /// Bytes read and not yet parsed into answers.
    read: Vec<u8>,
    /// End of the previous answer (or of the connect): a request cannot begin before it.
    free_since: Instant,
    /// It broke and could not connect again: requests dealt to it fail at once.
    dead: bool,
}

/// The generator's state: the connections, the request's bytes, the poll, the tally.
struct Load {
    poll: Poll,
    connections: Vec<Connection>,
    address: std::net::SocketAddr,
    request: Vec<u8>,
    counted_from: Instant,
    /// Requests dealt and not yet ended (answered, or failed on a broken connection).
    outstanding: u64,
    tally: Tally,
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("paced_load: {message}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("paced_load: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> Result<ExitCode, String> {
    let address = args
        .authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", args.authority))?
        .next()
        .ok_or_else(|| format!("{} resolves to no address", args.authority))?;
    let poll = Poll::new().map_err(|e| format!("epoll: {e}"))?;
    let request = format!("GET {} HTTP/1.1\r\nHost: {}\r\n\r\n", args.path, args.authority);
    let mut load = Load {
        poll,
        connections: Vec::with_capacity(args.connections),
        address,
        request: request.into_bytes(),
        counted_from: Instant::now(),
        outstanding: 0,
        tally: Tally::default(),
    };
    // Every connection open before the first due time.
    for index in 0..args.connections {
        let stream = load.connect(index)?;
        load.connections.push(Connection {
            stream,
            queue: VecDeque::new(),
            in_flight: false,
            unwritten: 0,
            read: Vec::with_capacity(4096),
            free_since: Instant::now(),
            dead: false,
        });
    }
    let start = Instant::now() + LEAD;
    load.counted_from = start + Duration::from_secs_f64(args.warmup);
    let total = ((args.warmup + args.duration) * args.rate).round() as u64;
    let nanos_per_request = 1e9 / args.rate;
    let due = |i: u64| start + Duration::from_nanos((i as f64 * nanos_per_request) as u64);
    let drain_until = due(total) + DRAIN;

    let mut events = Events::with_capacity(args.connections * 2);
    let mut next = 0u64;
    // The start of the last turn of the loop, when that turn polled without sleeping.
    let mut last_turn: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if let Some(last) = last_turn {
            load.tally.loop_gap_max = load.tally.loop_gap_max.max(now - last);
        }
        // Deal every request that is due.
        while next < total && due(next) <= now {
            let index = (next % args.connections as u64) as usize;
            if load.connections[index].dead {
                load.tally.fail(due(next), load.counted_from);
            } else {
                load.connections[index].queue.push_back(due(next));
                load.outstanding += 1;
                load.begin(index, now)?;
            }
            next += 1;
        }
        if next == total && load.outstanding == 0 {
            break;
        }
        if now >= drain_until {
            // Past the drain: what is still queued is counted as failed.
            for connection in &load.connections {
                for due in &connection.queue {
                    load.tally.fail(*due, load.counted_from);
                }
            }
            break;
        }
        let wait = if next < total {
            due(next).saturating_duration_since(now).saturating_sub(SPIN)
        } else {
            drain_until.saturating_duration_since(now).min(Duration::from_millis(10))
        };
        // A turn that sleeps in epoll on purpose (nothing due within `SPIN`) is no absence.
        last_turn = (wait.is_zero() && next < total && now >= start).then_some(now);
        match load.poll.poll(&mut events, Some(wait)) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("epoll: {e}")),
        }
        for event in events.iter() {
            let index = event.token().0;
            if load.connections[index].dead {
                continue;
            }
            if event.is_writable() {
                load.write(index, Instant::now())?;
            }
            if event.is_readable() || event.is_read_closed() || event.is_error() {
                load.read(index)?;
            }
        }
    }
    Ok(load.report(args))
}

impl Load {
    /// A connection for slot `index`, registered on the poll, `TCP_NODELAY` set.
    fn connect(&self, index: usize) -> Result<TcpStream, String> {
        let stream = std::net::TcpStream::connect(self.address)
            .map_err(|e| format!("cannot connect to {}: {e}", self.address))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_nonblocking(true).map_err(|e| e.to_string())?;
        let mut stream = TcpStream::from_std(stream);
        self.poll
            .registry()
            .register(&mut stream, Token(index), Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| format!("epoll: {e}"))?;
        Ok(stream)
    }

    /// Starts the first queued request of connection `index` if it has none in flight.
    fn begin(&mut self, index: usize, now: Instant) -> Result<(), String> {
        let connection = &mut self.connections[index];
        let Some(&due) = connection.queue.front() else { return Ok(()) };
        if connection.in_flight {
            return Ok(());
        }
        connection.in_flight = true;
        connection.unwritten = self.request.len();
        if due >= self.counted_from {
            let lag = now.saturating_duration_since(due.max(connection.free_since));
            self.tally.late += u64::from(lag > LATE);
            self.tally.lags.push(micros(lag));
        }
        self.write(index, now)
    }

    /// Writes what is left of connection `index`'s request; the rest waits for its socket's
    /// next writable event.
    fn write(&mut self, index: usize, now: Instant) -> Result<(), String> {
        let connection = &mut self.connections[index];
        while connection.in_flight && connection.unwritten > 0 {
            let from = self.request.len() - connection.unwritten;
            match connection.stream.write(&self.request[from..]) {
                Ok(0) => return self.broke(index, now),
                Ok(n) => connection.unwritten -= n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.broke(index, now),
            }
        }
        Ok(())
    }

    /// Reads what connection `index` has, and counts each whole answer.
    ///
    /// An answer that came with the connection's end (a server that closes after answering)
    /// is counted before the connection is made again: the end fails only a request it left
    /// without its answer.
    fn read(&mut self, index: usize) -> Result<(), String> {
        let mut chunk = [0u8; 16 * 1024];
        let mut closed = false;
        loop {
            let connection = &mut self.connections[index];
            match connection.stream.read(&mut chunk) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(n) => connection.read.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    closed = true;
                    break;
                }
            }
        }
        // The end of the answers just read (a read that brought data is followed by one that
        // found none, so this is within a system call of their arrival).
        let now = Instant::now();
        while let Some((status, length)) = answer(&self.connections[index].read)? {
            let connection = &mut self.connections[index];
            connection.read.drain(..length);
            let Some(due) = connection.queue.pop_front() else {
                return Err("an answer came with no request in flight".to_string());
            };
            connection.in_flight = false;
            connection.free_since = now;
            self.outstanding -= 1;
            if due >= self.counted_from {
                let tally = &mut self.tally;
                tally.sent += 1;
                tally.answered += 1;
                tally.last_answer = Some(now);
                if status == 200 {
                    tally.answered_ok(due, now - due);
                } else {
                    tally.errors += 1;
                }
            }
            if !closed {
                self.begin(index, now)?;
            }
        }
        if closed {
            return self.broke(index, now);
        }
        Ok(())
    }

    /// Connection `index` broke: its request in flight failed; it connects again and sends
    /// the rest of its queue. (Each call ends one request, so a server that keeps breaking
    /// connections ends the queue, not the stack.) If it cannot connect again, every request
    /// dealt to it fails now and later ones fail as they are dealt: the run goes on with the
    /// other connections and reports them as `failed`.
    fn broke(&mut self, index: usize, now: Instant) -> Result<(), String> {
        let stream = match self.connect(index) {
            Ok(stream) => stream,
            Err(_) => {
                let connection = &mut self.connections[index];
                connection.dead = true;
                connection.in_flight = false;
                for due in std::mem::take(&mut connection.queue) {
                    self.tally.fail(due, self.counted_from);
                    self.outstanding -= 1;
                }
                return Ok(());
            }
        };
        let connection = &mut self.connections[index];
        let old = std::mem::replace(&mut connection.stream, stream);
        drop(old);
        connection.read.clear();
        if connection.in_flight {
            if let Some(due) = connection.queue.pop_front() {
                self.tally.fail(due, self.counted_from);
                self.outstanding -= 1;
            }
            connection.in_flight = false;
        }
        connection.free_since = now;
        self.begin(index, now)
    }

    /// Prints the JSON line; the exit code.
    fn report(mut self, args: &Args) -> ExitCode {
        let all = &mut self.tally;
        all.latencies.sort_unstable();
        all.lags.sort_unstable();
        let span = all.last_answer.map_or(0.0, |end| (end - self.counted_from).as_secs_f64());
        let achieved = if span > 0.0 { all.answered as f64 / span } else { 0.0 };
        let at = |p: f64| percentile(&all.latencies, p);
        println!(
            "{{\"url\":\"http://{}{}\",\"rate\":{},\"duration_s\":{},\"warmup_s\":{},\
             \"connections\":{},\"sent\":{},\"answered\":{},\"errors\":{},\"failed\":{},\
             \"achieved_rate\":{:.0},\"p50_us\":{},\"p90_us\":{},\"p99_us\":{},\
             \"p99_9_us\":{},\"max_us\":{},\"late\":{},\"lag_p99_us\":{},\
             \"slow_episodes\":{},\"loop_gap_max_us\":{}}}",
            args.authority,
            args.path,
            args.rate,
            args.duration,
            args.warmup,
            args.connections,
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
            all.slow_episodes,
            micros(all.loop_gap_max),
        );
        if all.late > 0 {
            eprintln!(
                "paced_load: {} of {} requests began more than 1 ms late because the generator \
                 was behind; the latencies are partly the generator's",
                all.late, all.sent
            );
        }
        if all.errors > 0 || all.failed > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS }
    }
}

/// The first whole answer in `bytes`: its status and its length in bytes (head and body);
/// `None` while it is not all there. An answer without `Content-Length`, or with a head
/// past `HEAD_BYTES_MAX`, is an error.
fn answer(bytes: &[u8]) -> Result<Option<(u16, usize)>, String> {
    let Some(end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        if bytes.len() > HEAD_BYTES_MAX {
            return Err(format!("an answer's head is longer than {HEAD_BYTES_MAX} bytes"));
        }
        return Ok(None);
    };
    let head = std::str::from_utf8(&bytes[..end]).map_err(|_| "an answer's head is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP/1.1 status line: {status_line:?}"))?;
    let length = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse::<usize>().ok())
        .ok_or_else(|| {
            format!(
                "an answer ({status_line}) has no Content-Length; paced_load reads only \
                 answers that give their length"
            )
        })?;
    let total = end + 4 + length;
    Ok((bytes.len() >= total).then_some((status, total)))
}

/// The nearest-rank percentile of sorted values (0 when there are none).
fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::{Tally, answer};

    #[test]
    fn slow_answers_due_close_together_are_one_episode() {
        let start = Instant::now();
        let ms = |m: u64| start + Duration::from_millis(m);
        let mut tally = Tally::default();
        let slow = Duration::from_micros(1_500);
        tally.answered_ok(ms(0), Duration::from_micros(900));
        assert_eq!(tally.slow_episodes, 0, "1 ms or less is not slow");
        for due in [10, 11, 13, 12, 15] {
            tally.answered_ok(ms(due), slow);
        }
        assert_eq!(tally.slow_episodes, 1, "each within 2 ms of the latest slow one");
        tally.answered_ok(ms(16), Duration::from_micros(50));
        tally.answered_ok(ms(18), slow);
        assert_eq!(tally.slow_episodes, 2, "more than 2 ms after the last slow one");
        assert_eq!(tally.latencies.len(), 8);
    }

    #[test]
    fn an_answer_is_whole_only_with_all_its_body() {
        let whole = b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nx: y\r\n\r\n123";
        assert_eq!(answer(whole), Ok(Some((200, whole.len()))));
        assert_eq!(answer(&whole[..whole.len() - 1]), Ok(None));
        assert_eq!(answer(&whole[..20]), Ok(None));
        // The next answer's first bytes are not this one's.
        let mut two = whole.to_vec();
        two.extend_from_slice(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
        assert_eq!(answer(&two), Ok(Some((200, whole.len()))));
        assert_eq!(answer(&two[whole.len()..]), Ok(Some((503, two.len() - whole.len()))));
    }

    #[test]
    fn an_answer_without_its_length_or_status_is_refused() {
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\n123\r\n0\r\n\r\n";
        assert!(answer(chunked).unwrap_err().contains("no Content-Length"));
        assert!(answer(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n").is_err());
        assert!(answer(&vec![b'a'; 20_000]).unwrap_err().contains("longer than"));
    }
}
