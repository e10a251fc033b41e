//! HTTP limits, each a named constant that configuration may lower but never raise:
//! open connections and open connections per client address ([`LimitedListener`]), idle
//! and slow connections (a deadline per connection, [`IdleTimeout`]), requests in flight per client address and the time one
//! request may take ([`admit`] here, the timeout in the one middleware every request
//! passes, middleware.rs).
//!
//! Request bodies (`REQUEST_BODY_BYTES_MAX`) and batch sizes (`BATCH_COUNT_MAX`) are bounded
//! where they are read. This file must not decide statuses: errors go through `ApiError`.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
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
/// Client addresses tracked at once; past it, new addresses share one overflow allowance.
pub const CLIENTS_TRACKED_MAX: usize = 10_000;
/// Longest a request may take, in ms.
pub const REQUEST_TIMEOUT_MS_MAX: u64 = 60_000;
/// How long a request may take by default, in ms: above the longest refill wait (10 s), so
/// a request that waits for the store answers with the store's error, not a timeout.
pub const REQUEST_TIMEOUT_MS_DEFAULT: u64 = 15_000;
/// Shortest request timeout, in ms.
pub const REQUEST_TIMEOUT_MS_MIN: u64 = 100;
/// Longest a connection may go without a byte read or written, in ms.
pub const IDLE_TIMEOUT_MS_MAX: u64 = 600_000;
/// How long a connection may go without a byte read or written by default, in ms.
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
    /// How long a connection may stay without a byte read or written, in ms
    /// (`limits.idle_timeout_ms`); above the request timeout.
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

/// Requests in flight per client address.
#[derive(Debug, Default)]
pub struct ClientGate {
    in_flight: Mutex<HashMap<IpAddr, u32>>,
}

/// A request counted against its client; uncounted when dropped.
pub(crate) struct Pass {
    gate: Arc<ClientGate>,
    ip: IpAddr,
}

impl ClientGate {
    /// Counts a request of `ip`, or refuses it when the client is at `max`.
    fn enter(self: &Arc<Self>, ip: IpAddr, max: u32) -> Result<Pass, ApiError> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        // Past the tracking bound, unknown addresses share one allowance: a flood of
        // addresses cannot grow the table.
        let ip = if in_flight.len() >= CLIENTS_TRACKED_MAX && !in_flight.contains_key(&ip) {
            IpAddr::V6(Ipv6Addr::UNSPECIFIED)
        } else {
            ip
        };
        let count = in_flight.entry(ip).or_insert(0);
        if *count >= max {
            return Err(ApiError::TooManyRequests(format!(
                "this client already has {max} requests in flight (limits.client_in_flight_max); \
                 wait for answers, or ask for more ids per request with count"
            )));
        }
        *count += 1;
        Ok(Pass { gate: Arc::clone(self), ip })
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        let mut in_flight = self.gate.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = in_flight.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.ip);
            }
        }
    }
}

/// The client's address, as the connection gave it (see [`LimitedListener`]).
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

impl Connected<IncomingStream<'_, LimitedListener>> for ClientAddr {
    fn connect_info(stream: IncomingStream<'_, LimitedListener>) -> ClientAddr {
        ClientAddr(*stream.remote_addr())
    }
}

/// Connections open per client address, each counted from accept to close. The table holds
/// only addresses with an open connection, so it is bounded by `limits.connections_max`.
#[derive(Debug, Default)]
struct ClientConnections {
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection of a client address; uncounted when dropped (the connection closed).
struct ClientSlot {
    clients: Arc<ClientConnections>,
    ip: IpAddr,
}

impl ClientConnections {
    /// Counts a connection of `ip`, or `None` when the address already holds `max`.
    fn enter(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<ClientSlot> {
        // An IPv4 client of a dual-stack listener arrives as ::ffff:a.b.c.d: one address.
        let ip = ip.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(ip).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(ClientSlot { clients: Arc::clone(self), ip })
    }

    /// Connections `ip` holds open.
    #[cfg(test)]
    fn count(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&ip.to_canonical()).copied().unwrap_or(0)
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        let mut open = self.clients.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// Counts a request against its client: `Err` (429) when the client is at
/// `limits.client_in_flight_max`. The pass uncounts it when dropped. No pass (and no limit)
/// when the router is served without connect info (embedders, some tests).
pub(crate) fn admit(
    clients: &Arc<ClientGate>,
    limits: &HttpLimits,
    request: &Request,
) -> Result<Option<Pass>, ApiError> {
    let Some(ConnectInfo(ClientAddr(addr))) = request.extensions().get::<ConnectInfo<ClientAddr>>()
    else {
        return Ok(None);
    };
    clients.enter(addr.ip(), limits.client_in_flight_max).map(Some)
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

/// A connection with a deadline, which fails with `TimedOut` once it passes, and gives its
/// connection slot back when dropped.
///
/// Between requests the deadline is the idle timeout after the last byte written. Once a
/// request's first byte is read, reads no longer move it: the whole request must arrive,
/// and its answer start, within the idle timeout of that first byte. So a client that
/// trickles its headers a byte at a time (slowloris) is cut off as surely as one that sends
/// nothing; a handler is bounded by the shorter request timeout, so it is never cut off.
pub struct IdleTimeout {
    stream: TcpStream,
    idle: Duration,
    /// Fires at or after the deadline; moved lazily (see [`IdleTimeout::expired`]), so a
    /// read or a write only reads the clock and never touches the timer.
    deadline: Pin<Box<Sleep>>,
    /// When the current clock started: the last answer byte written, or a request's first
    /// byte read. The deadline is `mark + idle`.
    mark: Instant,
    /// A request's first byte was read and no answer byte was written since.
    in_request: bool,
    _slot: OwnedSemaphorePermit,
    _client: ClientSlot,
}

impl IdleTimeout {
    fn new(
        stream: TcpStream,
        idle: Duration,
        slot: OwnedSemaphorePermit,
        client: ClientSlot,
    ) -> IdleTimeout {
        let deadline = Box::pin(tokio::time::sleep(idle));
        let mark = Instant::now();
        IdleTimeout {
            stream,
            idle,
            deadline,
            mark,
            in_request: false,
            _slot: slot,
            _client: client,
        }
    }

    /// A read made progress: the first one of a request starts its clock.
    fn read_progressed(&mut self) {
        if !self.in_request {
            self.in_request = true;
            self.mark = Instant::now();
        }
    }

    /// A write made progress: the answer is flowing, the idle clock starts again.
    fn progressed(&mut self) {
        self.in_request = false;
        self.mark = Instant::now();
    }

    /// Pending, or the timeout error once the deadline passed. The timer was armed for an
    /// earlier mark; when it fires before the current deadline it is moved there and
    /// waited on again (at most once per idle period).
    fn expired<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let due = self.mark + self.idle;
            if Instant::now() >= due {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle longer than limits.idle_timeout_ms",
                )));
            }
            self.deadline.as_mut().reset(due);
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
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.read_progressed();
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
        match Pin::new(&mut this.stream).poll_write(cx, buf) {
            Poll::Ready(result) => {
                this.progressed();
                Poll::Ready(result)
            }
            Poll::Pending => this.expired(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        match Pin::new(&mut this.stream).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                this.progressed();
                Poll::Ready(result)
            }
            Poll::Pending => this.expired(cx),
        }
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

    #[test]
    fn a_client_at_its_limit_is_refused_until_a_request_ends() {
        let gate = Arc::new(ClientGate::default());
        let ip: IpAddr = "10.0.0.1".parse().expect("ip");
        let other: IpAddr = "10.0.0.2".parse().expect("ip");
        let first = gate.enter(ip, 2).expect("first");
        let _second = gate.enter(ip, 2).expect("second");
        assert!(gate.enter(ip, 2).is_err());
        assert!(gate.enter(other, 2).is_ok(), "another client is not affected");
        drop(first);
        assert!(gate.enter(ip, 2).is_ok());
    }
}
