//! HTTP limits, each a named constant that configuration may lower but never raise:
//! open connections and open connections per client address ([`LimitedListener`]), idle
//! and slow connections (a timer per connection, [`IdleTimeout`]), requests in flight per
//! client address ([`admit`]) and the time one request may take (the timeout in the one
//! middleware every request passes, middleware.rs).
//!
//! Per request this file costs no lock, no hash and no clock read: the client address is
//! looked up once per connection, at accept, and its entry ([`ClientAddr`]) travels with
//! every request of the connection, so a request only increments and decrements its
//! address's atomic count of requests in flight; the idle timer reads the clock only when
//! it fires.
//!
//! Request bodies (`REQUEST_BODY_BYTES_MAX`) and batch sizes (`BATCH_COUNT_MAX`) are bounded
//! where they are read. This file must not decide statuses: errors go through `ApiError`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, Request};
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use crate::error::ApiError;

/// Largest request body accepted, in bytes (admin JSON bodies are a few hundred bytes).
pub const REQUEST_BODY_BYTES_MAX: usize = 64 * 1024;

/// Most tags with series of their own in `/metrics`; the rest are summed into
/// `tag="(other)"`. About 2 KB of text per tag shown.
pub const METRICS_TAGS_MAX: usize = 1_000;
/// Tags with series of their own by default (`limits.metrics_tags_max`).
pub const METRICS_TAGS_DEFAULT: usize = 100;
const _: () = assert!(METRICS_TAGS_DEFAULT <= METRICS_TAGS_MAX);

/// Most requests one client address may have in flight.
pub const CLIENT_IN_FLIGHT_MAX: u32 = 1_024;
/// Requests one client address may have in flight by default.
pub const CLIENT_IN_FLIGHT_DEFAULT: u32 = 64;
/// Longest a request may take, in ms.
pub const REQUEST_TIMEOUT_MS_MAX: u64 = 60_000;
/// How long a request may take by default, in ms: above the longest refill wait (10 s), so
/// a request that waits for the store answers with the store's error, not a timeout.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 15_000;
/// Shortest request timeout, in ms.
pub const REQUEST_TIMEOUT_MS_MIN: u64 = 100;
/// Longest idle timeout, in ms (a connection is closed between it and twice it after its
/// last progress, see `IdleTimeout`).
pub const IDLE_TIMEOUT_MS_MAX: u64 = 600_000;
/// The idle timeout by default, in ms.
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Most connections open at once.
pub const CONNECTIONS_MAX: usize = 65_536;
/// Connections open at once by default (accepting waits above it).
pub const CONNECTIONS_DEFAULT: usize = 4_096;
/// Most connections one client address may hold open at once.
pub const CLIENT_CONNECTIONS_MAX: usize = 4_096;
/// Connections one client address may hold open by default: a sixteenth of the default
/// total, so one address (a leaking pool, an attacker's idle sockets) cannot take the
/// slots every other client needs. Past it, that address's new connections are closed at
/// once.
pub const CLIENT_CONNECTIONS_DEFAULT: usize = 256;

/// File descriptors a node keeps beside its connections and its stores' (which each store
/// URL sets aside, `StoreUrl::descriptors_reserved`): standard streams, listeners, the
/// runtime's, the marks files and their lock, temporary and directory handles while one is
/// written, log files, `/proc` reads at a scrape, outgoing gRPC to peers.
pub const DESCRIPTORS_RESERVED_BASE: u64 = 64;
/// Fewest connections a node serves when its file descriptor limit lowers
/// `limits.connections_max`: with less room `serve` refuses to start, naming the limit.
pub const CONNECTIONS_FOR_DESCRIPTORS_MIN: usize = 16;

const _: () = assert!(REQUEST_TIMEOUT_MS_DEFAULT > idmint_core::limits::REFILL_WAIT_MS_MAX);
const _: () = assert!(IDLE_TIMEOUT_MS_DEFAULT > REQUEST_TIMEOUT_MS_DEFAULT);
const _: () = assert!(CLIENT_IN_FLIGHT_DEFAULT <= CLIENT_IN_FLIGHT_MAX);
const _: () = assert!(CONNECTIONS_DEFAULT <= CONNECTIONS_MAX);
const _: () = assert!(CLIENT_CONNECTIONS_DEFAULT <= CLIENT_CONNECTIONS_MAX);
const _: () = assert!(CLIENT_CONNECTIONS_MAX <= CONNECTIONS_MAX);
// One address at its default cap leaves room for others under the default total.
const _: () = assert!(CLIENT_CONNECTIONS_DEFAULT < CONNECTIONS_DEFAULT);

/// The HTTP limits of one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpLimits {
    /// Requests one client address may have in flight (`limits.client_in_flight_max`).
    pub client_in_flight_max: u32,
    /// How long one request may take, in ms (`limits.request_timeout_ms`).
    pub request_timeout_ms: u64,
    /// The idle timeout, in ms (`limits.idle_timeout_ms`), above the request timeout: an
    /// idle connection, or a request not received and answered in time, is closed between
    /// this long and twice this long after its last progress (`IdleTimeout`).
    pub idle_timeout_ms: u64,
    /// Connections open at once (`limits.connections_max`).
    pub connections_max: usize,
    /// Connections one client address may hold open at once
    /// (`limits.client_connections_max`), at most `connections_max`.
    pub client_connections_max: usize,
    /// Tags with series of their own in `/metrics`, the busiest by recent rate; the rest
    /// are summed into `tag="(other)"` (`limits.metrics_tags_max`).
    pub metrics_tags_max: usize,
}

impl Default for HttpLimits {
    fn default() -> HttpLimits {
        HttpLimits {
            client_in_flight_max: CLIENT_IN_FLIGHT_DEFAULT,
            request_timeout_ms: REQUEST_TIMEOUT_MS_DEFAULT,
            idle_timeout_ms: IDLE_TIMEOUT_MS_DEFAULT,
            connections_max: CONNECTIONS_DEFAULT,
            client_connections_max: CLIENT_CONNECTIONS_DEFAULT,
            metrics_tags_max: METRICS_TAGS_DEFAULT,
        }
    }
}

impl HttpLimits {
    /// Checks every limit against its bound; the message names the setting and the range.
    pub fn check(&self) -> Result<(), String> {
        let out = |name: &str, value: u64, min: u64, max: u64| {
            Err(format!(
                "limits.{name} = {value} is out of range; use {min} to {max} (configuration may \
                 lower a limit, never raise it)"
            ))
        };
        let in_flight = u64::from(self.client_in_flight_max);
        if !(1..=u64::from(CLIENT_IN_FLIGHT_MAX)).contains(&in_flight) {
            return out("client_in_flight_max", in_flight, 1, u64::from(CLIENT_IN_FLIGHT_MAX));
        }
        let timeout = self.request_timeout_ms;
        if !(REQUEST_TIMEOUT_MS_MIN..=REQUEST_TIMEOUT_MS_MAX).contains(&timeout) {
            return out(
                "request_timeout_ms",
                timeout,
                REQUEST_TIMEOUT_MS_MIN,
                REQUEST_TIMEOUT_MS_MAX,
            );
        }
        let idle = self.idle_timeout_ms;
        if !(timeout + 1..=IDLE_TIMEOUT_MS_MAX).contains(&idle) {
            return Err(format!(
                "limits.idle_timeout_ms = {idle} is out of range; use {} (above \
                 limits.request_timeout_ms, so a request in progress is never cut off) to \
                 {IDLE_TIMEOUT_MS_MAX}",
                timeout + 1
            ));
        }
        let connections = self.connections_max as u64;
        if !(1..=CONNECTIONS_MAX as u64).contains(&connections) {
            return out("connections_max", connections, 1, CONNECTIONS_MAX as u64);
        }
        let per_client = self.client_connections_max as u64;
        let per_client_max = CLIENT_CONNECTIONS_MAX.min(self.connections_max) as u64;
        if !(1..=per_client_max).contains(&per_client) {
            return Err(format!(
                "limits.client_connections_max = {per_client} is out of range; use 1 to \
                 {per_client_max} (at most {CLIENT_CONNECTIONS_MAX} and at most \
                 limits.connections_max; configuration may lower a limit, never raise it)"
            ));
        }
        let tags = self.metrics_tags_max as u64;
        let tags_max = METRICS_TAGS_MAX as u64;
        if tags > tags_max {
            return out("metrics_tags_max", tags, 0, tags_max);
        }
        Ok(())
    }
}

impl HttpLimits {
    /// Lowers `connections_max` to what a file descriptor limit of `limit` leaves after
    /// `reserved` (the stores, marks and logs), shared by `listeners` listeners (each holds
    /// up to `connections_max`), and `client_connections_max` with it: past the limit, an
    /// accept fails and so does every file the node opens, a refill's marks file included.
    /// `Ok(Some(configured))` when lowered, `Ok(None)` when it fits; `Err` when fewer than
    /// [`CONNECTIONS_FOR_DESCRIPTORS_MIN`] would be left, with the fix.
    pub fn fit_descriptors(
        &mut self,
        limit: u64,
        reserved: u64,
        listeners: u64,
    ) -> Result<Option<usize>, String> {
        let room = limit.saturating_sub(reserved) / listeners.max(1);
        let room = usize::try_from(room).unwrap_or(usize::MAX);
        if self.connections_max <= room {
            return Ok(None);
        }
        if room < CONNECTIONS_FOR_DESCRIPTORS_MIN {
            return Err(format!(
                "the file descriptor limit (RLIMIT_NOFILE) of {limit} leaves room for {room} \
                 connections after {reserved} for the stores, marks files and logs; idmint \
                 needs room for at least {CONNECTIONS_FOR_DESCRIPTORS_MIN}: raise the limit \
                 (`ulimit -n`, systemd LimitNOFILE=, the container runtime's nofile ulimit) \
                 or lower the stores' pool_max"
            ));
        }
        let configured = self.connections_max;
        self.connections_max = room;
        self.client_connections_max = self.client_connections_max.min(room);
        Ok(Some(configured))
    }
}

/// The client's address, as the connection gave it, and for a connection a
/// [`LimitedListener`] accepted, its address's count of requests in flight: axum clones it
/// into every request of the connection (`ConnectInfo<ClientAddr>`), so `admit` finds the
/// count without a lookup.
#[derive(Debug, Clone)]
pub struct ClientAddr {
    addr: SocketAddr,
    client: Arc<ClientEntry>,
}

impl ClientAddr {
    /// The peer's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connect info of a connection `io` that [`LimitedListener`] accepted from `addr`.
    pub(crate) fn accepted(io: &IdleTimeout, addr: SocketAddr) -> ClientAddr {
        ClientAddr { addr, client: Arc::clone(&io.client.entry) }
    }
}

impl Connected<IncomingStream<'_, LimitedListener>> for ClientAddr {
    fn connect_info(stream: IncomingStream<'_, LimitedListener>) -> ClientAddr {
        ClientAddr::accepted(stream.io(), *stream.remote_addr())
    }
}

/// Counts a request against its client address: `Err` (429) when the address has
/// `limits.client_in_flight_max` requests in flight already. The pass uncounts it when
/// dropped (the answer is made, the request timed out, its handler panicked, or its
/// connection closed and dropped it). No pass, and no limit, when the router is served
/// without [`ClientAddr`] connect info (embedders, some tests).
///
/// Costs one atomic increment (undone when refused) and, when the pass drops, one
/// decrement on the address's count, and the pass's reference to the entry: no lock, no
/// hash.
///
/// The connect info is taken out of the request (nothing after the middleware reads it):
/// the pass keeps the entry without another reference count, and the request's extensions
/// keep room for the tag the checks hand the handler.
pub(crate) fn admit(limits: &HttpLimits, request: &mut Request) -> Result<Option<Pass>, ApiError> {
    match request.extensions_mut().remove::<ConnectInfo<ClientAddr>>() {
        Some(ConnectInfo(client)) => client.client.enter(limits.client_in_flight_max).map(Some),
        None => Ok(None),
    }
}

/// A request counted against its client address; uncounted when dropped.
pub(crate) struct Pass {
    client: Arc<ClientEntry>,
}

impl Drop for Pass {
    fn drop(&mut self) {
        let before = self.client.in_flight.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "a pass uncounted a request that was not counted");
    }
}

/// One client address on one listener: found (or made) once per connection at accept, and
/// shared by the address's connections and their requests.
#[derive(Debug)]
struct ClientEntry {
    /// The address, canonical (an IPv4-mapped IPv6 address as IPv4).
    ip: IpAddr,
    /// Requests in flight. Relaxed is enough: the count publishes nothing else, and every
    /// change is a read-modify-write, so the count sees each of them in one order.
    in_flight: AtomicU32,
}

impl ClientEntry {
    /// Counts a request, or refuses it when the address has `max` in flight. A request is
    /// admitted only when the count before its own increment was below `max`, so at most
    /// `max` admitted requests are in flight at once; a refusal's increment is undone at
    /// once (for that instant it may refuse another request racing it at the limit).
    fn enter(self: Arc<Self>, max: u32) -> Result<Pass, ApiError> {
        let before = self.in_flight.fetch_add(1, Ordering::Relaxed);
        if before >= max {
            self.in_flight.fetch_sub(1, Ordering::Relaxed);
            return Err(ApiError::TooManyRequests(format!(
                "this client already has {max} requests in flight (limits.client_in_flight_max); \
                 wait for answers, or ask for more ids per request with count"
            )));
        }
        Ok(Pass { client: self })
    }
}

/// The client addresses with an open connection on one listener: each entry counts its
/// connections (from accept to close) and holds the address's [`ClientEntry`]. An address
/// leaves when its last connection closes, so the table holds at most
/// `limits.connections_max` addresses (each holds a connection slot). Requests still in
/// flight when their address's last connection closed (an HTTP/2 stream runs on after its
/// connection, for at most the request timeout) keep their old entry alive and are
/// uncounted from it; a new connection of that address starts a new count.
#[derive(Debug, Default)]
struct ClientConnections {
    open: Mutex<HashMap<IpAddr, Tracked>>,
}

/// An address in the table: its open connections and its entry.
#[derive(Debug)]
struct Tracked {
    connections: usize,
    entry: Arc<ClientEntry>,
}

/// One open connection of a client address; uncounted when dropped (the connection closed).
struct ClientSlot {
    clients: Arc<ClientConnections>,
    entry: Arc<ClientEntry>,
}

impl ClientConnections {
    /// Counts a connection of `ip`, or `None` when the address already holds `max`.
    fn enter(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        // An IPv4 client of a dual-stack listener arrives as ::ffff:a.b.c.d: one address.
        let ip = ip.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let tracked = open.entry(ip).or_insert_with(|| Tracked {
            connections: 0,
            entry: Arc::new(ClientEntry { ip, in_flight: AtomicU32::new(0) }),
        });
        if tracked.connections >= max {
            return None;
        }
        tracked.connections += 1;
        Some(ClientSlot { clients: Arc::clone(self), entry: Arc::clone(&tracked.entry) })
    }

    /// Connections `ip` holds open.
    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&ip.to_canonical()).map_or(0, |tracked| tracked.connections)
    }

    /// Addresses in the table.
    #[cfg(test)]
    fn addresses(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tracked) = open.get_mut(&self.entry.ip) {
            // The address's entry stays in the table while it has a connection, so it is
            // this slot's; checked all the same.
            if Arc::ptr_eq(&tracked.entry, &self.entry) {
                tracked.connections -= 1;
                if tracked.connections == 0 {
                    open.remove(&self.entry.ip);
                }
            }
        }
    }
}

/// A TCP listener that holds at most `connections_max` connections open (accepting waits
/// for one to close), at most `client_connections_max` of them from one client address
/// (past it, that address's new connections are closed at once, before a byte is read), and
/// closes a connection that reads and writes nothing for `idle_timeout_ms`: idle keep-alive
/// connections and clients that send their request, or read their answer, too slowly.
pub struct LimitedListener {
    inner: TcpListener,
    open: Arc<Semaphore>,
    clients: Arc<ClientConnections>,
    client_connections_max: usize,
    idle: Duration,
}

impl LimitedListener {
    /// Wraps a bound listener.
    pub fn new(inner: TcpListener, limits: &HttpLimits) -> LimitedListener {
        LimitedListener {
            inner,
            open: Arc::new(Semaphore::new(limits.connections_max)),
            clients: Arc::default(),
            client_connections_max: limits.client_connections_max,
            idle: Duration::from_millis(limits.idle_timeout_ms),
        }
    }
}

impl Listener for LimitedListener {
    type Io = IdleTimeout;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (IdleTimeout, SocketAddr) {
        let permit = loop {
            // The semaphore is never closed; the loop only satisfies the type.
            if let Ok(permit) = Arc::clone(&self.open).acquire_owned().await {
                break permit;
            }
        };
        loop {
            match self.inner.accept().await {
                Ok((stream, addr)) => {
                    let Some(client) = self.clients.enter(addr.ip(), self.client_connections_max)
                    else {
                        // Closed at once, unread and unanswered: the cheapest refusal, and
                        // the slot stays free for the next connection of another address.
                        drop(stream);
                        metrics::counter!(CONNECTIONS_REFUSED_METRIC).increment(1);
                        tracing::debug!(%addr, "connection refused: limits.client_connections_max");
                        continue;
                    };
                    // Ids are small answers: send them at once.
                    let _ = stream.set_nodelay(true);
                    return (IdleTimeout::new(stream, self.idle, permit, client), addr);
                }
                // A connection that failed before it was accepted (reset, aborted) is the
                // peer's problem; anything else (out of file descriptors) is retried after a
                // pause rather than spinning.
                Err(error) if is_connection_error(&error) => {}
                Err(error) => {
                    tracing::warn!(%error, "accept failed; retrying in 1 s");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// Connections closed at once because their client address held
/// `limits.client_connections_max` already.
pub const CONNECTIONS_REFUSED_METRIC: &str = "idmint_http_connections_refused_total";

fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// A connection with an idle timer, which fails with `TimedOut` once the connection made no
/// progress for a whole period, and gives its connection slot back when dropped.
///
/// Progress is recorded with plain flags, never with the clock: an answer byte written, or
/// a request's first byte read (the bytes after it until the answer do not count, so a
/// client that trickles its headers a byte at a time, slowloris, is cut off as surely as
/// one that sends nothing). The timer fires every `idle` (the idle timeout); when it fires,
/// the connection is closed unless, in the period that just ended, a byte was written or a
/// request began; otherwise the clock is read once and the timer re-armed for one more
/// period. So, the timer's lateness (the scheduling delay of the connection's task) aside:
/// - a connection with nothing to read and nothing being answered is closed at least
///   `idle` and less than `2 × idle` after its last byte written (exactly `idle` after
///   accept when it never sends a byte);
/// - a request must arrive in full and its answer start at least `idle`, at most `2 ×
///   idle`, after its first byte, or the connection is closed then.
///
/// A handler is bounded by the request timeout, below `idle`, so a request that arrived at
/// once is never cut off.
pub struct IdleTimeout {
    stream: TcpStream,
    idle: Duration,
    /// Fires at the end of the current period (see [`IdleTimeout::expired`]).
    deadline: Pin<Box<Sleep>>,
    /// A byte was written in the current period.
    wrote: bool,
    /// A request's first byte was read and no answer byte was written since.
    in_request: bool,
    /// The request in progress began in the current period.
    began: bool,
    _slot: OwnedSemaphorePermit,
    client: ClientSlot,
}

impl IdleTimeout {
    fn new(
        stream: TcpStream,
        idle: Duration,
        slot: OwnedSemaphorePermit,
        client: ClientSlot,
    ) -> IdleTimeout {
        IdleTimeout {
            stream,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
            wrote: false,
            in_request: false,
            began: false,
            _slot: slot,
            client,
        }
    }

    /// A read made progress: the first one of a request begins it.
    fn read_progressed(&mut self) {
        if !self.in_request {
            self.in_request = true;
            self.began = true;
        }
    }

    /// A write's poll: one that is ready made progress (the answer is flowing); a pending
    /// one waits, or ends in the timeout error once a period ended without progress.
    fn written(
        &mut self,
        cx: &mut Context<'_>,
        poll: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if poll.is_pending() {
            return self.expired(cx);
        }
        self.in_request = false;
        self.wrote = true;
        poll
    }

    /// Pending, or the timeout error once a period ended without progress. A period with
    /// progress re-arms the timer from the clock (read here, once per period, never per
    /// request) and forgets it.
    fn expired<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if !self.wrote && !self.began {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle longer than limits.idle_timeout_ms",
                )));
            }
            self.wrote = false;
            self.began = false;
            self.deadline.as_mut().reset(Instant::now() + self.idle);
        }
    }
}

impl AsyncRead for IdleTimeout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > before {
                    this.read_progressed();
                }
                Poll::Ready(result)
            }
            Poll::Pending => this.expired(cx),
        }
    }
}

impl AsyncWrite for IdleTimeout {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.written(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.written(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_bounded() {
        assert!(HttpLimits::default().check().is_ok());
        let raised =
            HttpLimits { client_in_flight_max: CLIENT_IN_FLIGHT_MAX + 1, ..HttpLimits::default() };
        assert!(raised.check().unwrap_err().contains("client_in_flight_max"));
        let idle_below = HttpLimits { idle_timeout_ms: 1_000, ..HttpLimits::default() };
        assert!(idle_below.check().unwrap_err().contains("idle_timeout_ms"));
        let zero = HttpLimits { connections_max: 0, ..HttpLimits::default() };
        assert!(zero.check().unwrap_err().contains("connections_max"));
        let per_client = HttpLimits {
            client_connections_max: CLIENT_CONNECTIONS_MAX + 1,
            connections_max: CONNECTIONS_MAX,
            ..HttpLimits::default()
        };
        assert!(per_client.check().unwrap_err().contains("client_connections_max"));
        let above_total = HttpLimits { connections_max: 100, ..HttpLimits::default() };
        let error = above_total.check().unwrap_err();
        assert!(error.contains("client_connections_max") && error.contains("1 to 100"), "{error}");
    }

    #[test]
    fn connections_fit_what_the_descriptor_limit_leaves() {
        // The default 4 096 fits a limit of 65 536 with any reserve below 61 440.
        let mut limits = HttpLimits::default();
        assert_eq!(limits.fit_descriptors(65_536, 200, 1), Ok(None));
        assert_eq!(limits, HttpLimits::default());
        // At the common 1 024, after 76 reserved: 948, the per-address cap unchanged.
        assert_eq!(limits.fit_descriptors(1_024, 76, 1), Ok(Some(CONNECTIONS_DEFAULT)));
        assert_eq!((limits.connections_max, limits.client_connections_max), (948, 256));
        assert!(limits.check().is_ok());
        // Two listeners (HTTP and gRPC apart) share it; the per-address cap follows.
        let mut limits = HttpLimits::default();
        assert_eq!(limits.fit_descriptors(256, 76, 2), Ok(Some(CONNECTIONS_DEFAULT)));
        assert_eq!((limits.connections_max, limits.client_connections_max), (90, 90));
        assert!(limits.check().is_ok());
        // A configured value below the room stays.
        let mut small = HttpLimits { connections_max: 50, ..HttpLimits::default() };
        assert_eq!(small.fit_descriptors(256, 76, 1), Ok(None));
        // Too little room: refused, naming the limit; a limit below the reserve too.
        let mut limits = HttpLimits::default();
        let error = limits.fit_descriptors(90, 76, 1).unwrap_err();
        assert!(error.contains("RLIMIT_NOFILE") && error.contains("90"), "{error}");
        assert!(limits.fit_descriptors(10, 76, 1).is_err());
        assert_eq!(limits, HttpLimits::default(), "a refusal changes nothing");
    }

    #[test]
    fn an_address_at_its_connection_cap_is_refused_until_one_closes() {
        let clients = Arc::new(ClientConnections::default());
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().expect("ip");
        let first = clients.enter(ip, 2).expect("first");
        let _second = clients.enter(mapped, 2).expect("second");
        assert!(clients.enter(ip, 2).is_none(), "the mapped address is the same client");
        assert!(clients.enter("10.0.0.2".parse().expect("ip"), 2).is_some());
        drop(first);
        assert_eq!(clients.count(ip), 1);
        assert!(clients.enter(ip, 2).is_some());
    }

    /// A request of the connection `slot`, with its connect info as axum gives it.
    fn request_of(slot: &ClientSlot) -> Request {
        let client = ClientAddr {
            addr: SocketAddr::new(slot.entry.ip, 40_000),
            client: Arc::clone(&slot.entry),
        };
        let mut request = Request::new(axum::body::Body::empty());
        request.extensions_mut().insert(ConnectInfo(client));
        request
    }

    fn limits(max: u32) -> HttpLimits {
        HttpLimits { client_in_flight_max: max, ..HttpLimits::default() }
    }

    fn in_flight(slot: &ClientSlot) -> u32 {
        slot.entry.in_flight.load(Ordering::Relaxed)
    }

    #[test]
    fn a_client_at_its_limit_is_refused_until_a_request_ends() {
        let clients = Arc::new(ClientConnections::default());
        let one = clients.enter("10.0.0.1".parse().expect("ip"), 8).expect("connection");
        // Another connection of the same address (IPv4-mapped): the same count.
        let same = clients.enter("::ffff:10.0.0.1".parse().expect("ip"), 8).expect("connection");
        let other = clients.enter("10.0.0.2".parse().expect("ip"), 8).expect("connection");
        let first = admit(&limits(2), &mut request_of(&one)).expect("first").expect("a pass");
        let _second = admit(&limits(2), &mut request_of(&same)).expect("second").expect("a pass");
        let refused = admit(&limits(2), &mut request_of(&one)).err().expect("a third is refused");
        assert!(matches!(refused, ApiError::TooManyRequests(_)), "{refused:?}");
        assert!(admit(&limits(2), &mut request_of(&same)).is_err());
        assert_eq!(in_flight(&one), 2, "a refusal's increment is undone");
        assert!(
            admit(&limits(2), &mut request_of(&other)).is_ok(),
            "another client is not affected"
        );
        drop(first);
        assert!(admit(&limits(2), &mut request_of(&one)).is_ok());
        assert_eq!(in_flight(&one), 1, "the passes above were dropped");
    }

    #[test]
    fn a_router_served_without_connect_info_has_no_limit() {
        let mut request = Request::new(axum::body::Body::empty());
        for _ in 0..3 {
            assert!(matches!(admit(&limits(1), &mut request), Ok(None)));
        }
    }

    #[tokio::test]
    async fn a_pass_dropped_by_the_request_timeout_uncounts_its_request() {
        let clients = Arc::new(ClientConnections::default());
        let slot = clients.enter("10.0.0.1".parse().expect("ip"), 8).expect("connection");
        let limits = HttpLimits { request_timeout_ms: 100, ..limits(1) };
        // As the router does: the pass lives until the bounded answer is made.
        let mut request = request_of(&slot);
        let answer = async {
            let _pass = admit(&limits, &mut request).expect("admitted");
            let timeout = Duration::from_millis(limits.request_timeout_ms);
            tokio::time::timeout(timeout, std::future::pending::<()>()).await
        };
        assert!(answer.await.is_err(), "timed out");
        assert_eq!(in_flight(&slot), 0);
        // A request future dropped from outside (its connection closed) drops its pass.
        let mut request = request_of(&slot);
        let dropped = tokio::time::timeout(Duration::from_millis(10), async {
            let _pass = admit(&limits, &mut request).expect("admitted");
            std::future::pending::<()>().await;
        });
        assert!(dropped.await.is_err());
        assert_eq!(in_flight(&slot), 0);
        assert!(admit(&limits, &mut request_of(&slot)).is_ok());
    }

    // The panics unwind without the panic hook (`resume_unwind`): the hook would print and
    // symbolize a backtrace, which grows this process by tens of MB while
    // `metrics::tests::a_node_nobody_scrapes_stays_bounded` measures it.
    #[tokio::test]
    async fn a_handler_that_panics_uncounts_its_request() {
        let clients = Arc::new(ClientConnections::default());
        let slot = clients.enter("10.0.0.1".parse().expect("ip"), 8).expect("connection");
        let mut request = request_of(&slot);
        let task = tokio::spawn(async move {
            let _pass = admit(&limits(1), &mut request).expect("admitted");
            tokio::task::yield_now().await;
            std::panic::resume_unwind(Box::new("the handler panics"));
        });
        assert!(task.await.expect_err("the task panicked").is_panic());
        assert_eq!(in_flight(&slot), 0);
        let unwound = std::panic::catch_unwind(|| {
            let _pass = admit(&limits(1), &mut request_of(&slot)).expect("admitted");
            std::panic::resume_unwind(Box::new("the handler panics"));
        });
        assert!(unwound.is_err());
        assert_eq!(in_flight(&slot), 0);
        assert!(admit(&limits(1), &mut request_of(&slot)).is_ok());
    }

    #[test]
    fn connections_closing_with_requests_in_flight_leave_no_count_behind() {
        let clients = Arc::new(ClientConnections::default());
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let slot = clients.enter(ip, 8).expect("connection");
        let entry = Arc::clone(&slot.entry);
        let pass = admit(&limits(1), &mut request_of(&slot)).expect("admitted").expect("a pass");
        // The address's last connection closes while its request runs on (an HTTP/2
        // stream does): the address leaves the table at once.
        drop(slot);
        assert_eq!((clients.count(ip), clients.addresses()), (0, 0));
        // A new connection of the address starts a new count; the old request is
        // uncounted from its own entry, never from the new one.
        let again = clients.enter(ip, 8).expect("connection");
        assert!(!Arc::ptr_eq(&entry, &again.entry));
        let second = admit(&limits(1), &mut request_of(&again)).expect("admitted").expect("a pass");
        drop(pass);
        assert_eq!(entry.in_flight.load(Ordering::Relaxed), 0);
        assert_eq!(in_flight(&again), 1);
        drop(second);
        assert_eq!(in_flight(&again), 0);
        // While one connection of the address stays open, a new one shares its count.
        let other = clients.enter(ip, 8).expect("connection");
        assert!(Arc::ptr_eq(&again.entry, &other.entry));
        drop((again, other));
        assert_eq!(clients.addresses(), 0, "the table holds only addresses with connections");
        assert_eq!(Arc::strong_count(&entry), 1, "the old entry is freed with its last holder");
    }

    #[test]
    fn concurrent_requests_never_exceed_the_limit_and_leave_the_count_at_zero() {
        // Four threads admit and drop requests of one address as fast as they can, with
        // random holding times (seeded); at most `MAX` admitted passes ever coexist.
        const MAX: u32 = 3;
        let clients = Arc::new(ClientConnections::default());
        let slot = clients.enter("10.0.0.1".parse().expect("ip"), 8).expect("connection");
        let admitted = AtomicU32::new(0);
        let refused = AtomicU32::new(0);
        std::thread::scope(|scope| {
            for seed in 1..=4u64 {
                let (slot, admitted, refused) = (&slot, &admitted, &refused);
                scope.spawn(move || {
                    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let mut held = Vec::new();
                    for _ in 0..20_000 {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        if state % 3 == 0 && !held.is_empty() {
                            // Uncounted here before the pass drops, and counted below
                            // after it is admitted: this count never exceeds the passes
                            // alive, so it is above `MAX` only if they are.
                            admitted.fetch_sub(1, Ordering::SeqCst);
                            drop(held.swap_remove(state as usize % held.len()));
                            continue;
                        }
                        match admit(&limits(MAX), &mut request_of(slot)) {
                            Ok(Some(pass)) => {
                                let now = admitted.fetch_add(1, Ordering::SeqCst) + 1;
                                assert!(now <= MAX, "{now} admitted passes at once");
                                held.push(pass);
                            }
                            Ok(None) => unreachable!("the request has connect info"),
                            Err(_) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    admitted.fetch_sub(held.len() as u32, Ordering::SeqCst);
                });
            }
        });
        assert_eq!(in_flight(&slot), 0);
        assert!(refused.load(Ordering::Relaxed) > 0, "the limit was reached");
    }
}
