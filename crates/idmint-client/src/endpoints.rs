//! The servers a client talks to, and the failover between them.
//!
//! A call ([`Endpoints::call`]) tries the servers in order, starting from the last one that
//! answered; one that fails (unreachable, timed out, UNAVAILABLE, shutting down) is marked
//! down with an exponential backoff and tried last until it passes. Every attempt is bounded
//! by the per-call timeout, every call by [`CALL_ATTEMPTS_MAX`] attempts and a deadline. An
//! error that is the caller's (unknown tag, bad count, no token) ends the call at once.
//!
//! Each server is spoken to over gRPC (a lazily connected tonic channel, h2c) or HTTP (the
//! `/v1` JSON routes): [`Transport::Auto`] starts with gRPC and moves a server to HTTP for
//! good when its gRPC fails at protocol level (UNIMPLEMENTED, an HTTP/1-only proxy). What a
//! call sends is an [`Op`] (`wire.rs`), which knows both encodings. This file must not know
//! any message; `wire.rs` does.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use idmint_proto::v1::id_mint_client::IdMintClient;
use tokio::time::Instant;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use crate::error::{ClientError, Failure};
use crate::limits::{
    CALL_ATTEMPTS_MAX, DOWN_BACKOFF_MS_MAX, DOWN_BACKOFF_MS_MIN, GRPC_MESSAGE_BYTES_MAX,
};

/// How the client speaks to servers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Transport {
    /// gRPC, falling back to HTTP for a server whose gRPC fails at protocol level
    /// (UNIMPLEMENTED, an h2 protocol error such as an HTTP/1-only proxy in front of it).
    #[default]
    Auto,
    /// gRPC only.
    Grpc,
    /// The HTTP JSON routes only (`/v1/segment/{tag}/ranges`, …).
    Http,
}

/// Over which encoding one attempt goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    Grpc,
    Http,
}

/// One request the client can send to a server, in both encodings.
pub(crate) trait Op: Sync {
    /// What the call answers.
    type Output: Send;

    /// The call over gRPC.
    fn grpc(
        &self,
        client: IdMintClient<Channel>,
        auth: Option<MetadataValue<Ascii>>,
    ) -> impl Future<Output = Result<Self::Output, Failure>> + Send;

    /// The call over HTTP.
    fn http(&self, http: Http<'_>) -> impl Future<Output = Result<Self::Output, Failure>> + Send;
}

/// What an HTTP attempt needs: the shared client, the server's base URL, the token.
#[derive(Clone, Copy)]
pub(crate) struct Http<'a> {
    pub(crate) client: &'a reqwest::Client,
    pub(crate) base: &'a str,
    pub(crate) token: Option<&'a str>,
}

/// The servers, their health and the shared connections.
pub(crate) struct Endpoints {
    list: Vec<Endpoint>,
    /// The server that answered last: the next call starts there.
    preferred: AtomicUsize,
    transport: Transport,
    timeout: Duration,
    http: reqwest::Client,
    token: Option<String>,
    grpc_auth: Option<MetadataValue<Ascii>>,
}

/// One server.
struct Endpoint {
    url: String,
    grpc: IdMintClient<Channel>,
    health: Mutex<Health>,
    /// Auto only: gRPC failed here at protocol level and HTTP answered; HTTP from now on.
    http_only: AtomicBool,
    /// gRPC answered here once: a later failure without an answer is the server's, not the
    /// protocol's.
    grpc_answered: AtomicBool,
}

/// When a server that failed may have its place back.
#[derive(Debug, Default, Clone, Copy)]
struct Health {
    failures: u32,
    down_until: Option<Instant>,
}

impl Endpoints {
    /// Checked URLs (`http://host:port`, no path), a token already checked as visible ASCII.
    /// Must run inside a tokio runtime (the gRPC channels connect lazily on it).
    pub(crate) fn new(
        urls: Vec<String>,
        transport: Transport,
        timeout: Duration,
        token: Option<String>,
    ) -> Result<Endpoints, ClientError> {
        let grpc_auth = match &token {
            Some(token) => {
                Some(format!("Bearer {token}").parse().map_err(|_| ClientError::BadConfig {
                    field: "token",
                    reason: "a token is visible ASCII without spaces".to_string(),
                })?)
            }
            None => None,
        };
        let http = reqwest::Client::builder()
            .connect_timeout(timeout)
            .timeout(timeout)
            .tcp_nodelay(true)
            .build()
            .map_err(|e| ClientError::BadConfig {
                field: "transport",
                reason: format!("the HTTP client could not be set up: {e}"),
            })?;
        let list = urls
            .into_iter()
            .map(|url| {
                let channel = tonic::transport::Endpoint::from_shared(url.clone())
                    .map_err(|e| ClientError::BadEndpoint {
                        url: url.clone(),
                        reason: e.to_string(),
                    })?
                    .connect_timeout(timeout)
                    .tcp_nodelay(true)
                    .connect_lazy();
                let grpc =
                    IdMintClient::new(channel).max_decoding_message_size(GRPC_MESSAGE_BYTES_MAX);
                Ok(Endpoint {
                    url,
                    grpc,
                    health: Mutex::default(),
                    http_only: AtomicBool::new(false),
                    grpc_answered: AtomicBool::new(false),
                })
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        Ok(Endpoints {
            list,
            preferred: AtomicUsize::new(0),
            transport,
            timeout,
            http,
            token,
            grpc_auth,
        })
    }

    /// The servers' URLs and the transport, for logs.
    pub(crate) fn describe(&self) -> String {
        let urls: Vec<&str> = self.list.iter().map(|e| e.url.as_str()).collect();
        format!("idmint servers {} ({:?})", urls.join(", "), self.transport)
    }

    /// The servers' URLs.
    pub(crate) fn urls(&self) -> Vec<String> {
        self.list.iter().map(|e| e.url.clone()).collect()
    }

    /// The URL of server `index`.
    pub(crate) fn url(&self, index: usize) -> &str {
        &self.list[index].url
    }

    /// Sends `op` to the servers in failover order until one answers, the caller is at
    /// fault, [`CALL_ATTEMPTS_MAX`] attempts were made, or `deadline` passes. Returns the
    /// answer and the index of the server that gave it.
    pub(crate) async fn call<O: Op>(
        &self,
        op: &O,
        deadline: Instant,
    ) -> Result<(O::Output, usize), ClientError> {
        let mut attempts = 0;
        let mut failures: Vec<String> = Vec::new();
        for index in self.order() {
            match self.try_endpoint(index, op, deadline, &mut attempts).await {
                Ok(output) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok((output, index));
                }
                Err(Failure::Caller(error)) => return Err(error),
                Err(Failure::Retry { reason, .. } | Failure::Protocol(reason)) => {
                    failures.push(format!("{}: {reason}", self.list[index].url));
                }
            }
            if attempts >= CALL_ATTEMPTS_MAX || Instant::now() >= deadline {
                break;
            }
        }
        let failures =
            if failures.is_empty() { "out of time".to_string() } else { failures.join("; ") };
        Err(ClientError::Unavailable {
            reason: format!(
                "no server answered ({attempts} attempt(s): {failures}); is `idmint serve` \
                 running there?"
            ),
        })
    }

    /// Sends `op` to server `index` only (a give-back goes to the server that leased).
    pub(crate) async fn call_at<O: Op>(
        &self,
        index: usize,
        op: &O,
        deadline: Instant,
    ) -> Result<O::Output, ClientError> {
        let mut attempts = 0;
        match self.try_endpoint(index, op, deadline, &mut attempts).await {
            Ok(output) => Ok(output),
            Err(Failure::Caller(error)) => Err(error),
            Err(Failure::Retry { reason, .. } | Failure::Protocol(reason)) => {
                Err(ClientError::Unavailable { reason: format!("{}: {reason}", self.url(index)) })
            }
        }
    }

    /// One server: gRPC or HTTP as its transport says, and for Auto the HTTP fallback after a
    /// protocol failure. Marks the server up or down by the outcome.
    async fn try_endpoint<O: Op>(
        &self,
        index: usize,
        op: &O,
        deadline: Instant,
        attempts: &mut u32,
    ) -> Result<O::Output, Failure> {
        let endpoint = &self.list[index];
        // Auto: after a protocol failure over gRPC, the same server is asked over HTTP.
        let mut fallback = false;
        loop {
            let now = Instant::now();
            if *attempts >= CALL_ATTEMPTS_MAX || now >= deadline {
                return Err(Failure::Retry { reason: "out of time".to_string(), down: false });
            }
            *attempts += 1;
            let via = if fallback { Via::Http } else { self.via(endpoint) };
            let limit = self.timeout.min(deadline.saturating_duration_since(now));
            let attempt = async {
                match via {
                    Via::Grpc => op.grpc(endpoint.grpc.clone(), self.grpc_auth.clone()).await,
                    Via::Http => {
                        let http = Http {
                            client: &self.http,
                            base: &endpoint.url,
                            token: self.token.as_deref(),
                        };
                        op.http(http).await
                    }
                }
            };
            let outcome = match tokio::time::timeout(limit, attempt).await {
                Ok(outcome) => outcome,
                Err(_elapsed) => {
                    Err(Failure::down(format!("no answer within {} ms", limit.as_millis())))
                }
            };
            let answered = matches!(outcome, Ok(_) | Err(Failure::Caller(_)));
            if answered {
                // The server answered: it is up, and it speaks what was used.
                self.succeeded(index);
                match via {
                    Via::Grpc => endpoint.grpc_answered.store(true, Ordering::Release),
                    Via::Http if fallback && !endpoint.http_only.swap(true, Ordering::AcqRel) => {
                        tracing::info!(server = %endpoint.url, "no gRPC there, but HTTP answers; using its HTTP routes from now on");
                    }
                    Via::Http => {}
                }
                return outcome;
            }
            match outcome {
                Err(Failure::Protocol(reason))
                    if via == Via::Grpc
                        && self.transport == Transport::Auto
                        && !endpoint.grpc_answered.load(Ordering::Acquire) =>
                {
                    tracing::debug!(server = %endpoint.url, %reason, "gRPC failed without an answer; trying HTTP there");
                    fallback = true;
                }
                Err(Failure::Retry { reason, down: false }) => {
                    return Err(Failure::Retry { reason, down: false });
                }
                Err(Failure::Retry { reason, .. } | Failure::Protocol(reason)) => {
                    self.failed(index, &reason);
                    return Err(Failure::down(reason));
                }
                // Returned above: the server answered.
                answer @ (Ok(_) | Err(Failure::Caller(_))) => return answer,
            }
        }
    }

    fn via(&self, endpoint: &Endpoint) -> Via {
        match self.transport {
            Transport::Http => Via::Http,
            Transport::Grpc => Via::Grpc,
            Transport::Auto if endpoint.http_only.load(Ordering::Acquire) => Via::Http,
            Transport::Auto => Via::Grpc,
        }
    }

    /// The servers in the order a call tries them: from the preferred one round the list,
    /// the ones marked down last (soonest back first; still tried, so a client whose servers
    /// all failed recovers at once).
    /// Whether server `index` is not marked down now.
    pub(crate) fn is_up(&self, index: usize) -> bool {
        self.health(index).down_until.is_none_or(|until| until <= Instant::now())
    }

    /// How many servers there are.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    fn order(&self) -> Vec<usize> {
        let n = self.list.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let now = Instant::now();
        let (mut up, mut down): (Vec<usize>, Vec<usize>) = (0..n)
            .map(|k| (first + k) % n)
            .partition(|i| self.health(*i).down_until.is_none_or(|until| until <= now));
        down.sort_by_key(|i| self.health(*i).down_until);
        up.append(&mut down);
        up
    }

    fn succeeded(&self, index: usize) {
        let mut health = self.health(index);
        if health.failures > 0 {
            tracing::info!(server = %self.list[index].url, "server answers again");
        }
        *health = Health::default();
    }

    fn failed(&self, index: usize, reason: &str) {
        let mut health = self.health(index);
        let backoff_ms = DOWN_BACKOFF_MS_MIN
            .saturating_mul(1 << health.failures.min(16))
            .min(DOWN_BACKOFF_MS_MAX);
        health.failures = health.failures.saturating_add(1);
        health.down_until = Some(Instant::now() + Duration::from_millis(backoff_ms));
        if health.failures == 1 {
            let (url, next) = (&self.list[index].url, failover_message(self.list.len()));
            // Alone, the backoff orders nothing: the server is not held back by it.
            if self.list.len() > 1 {
                tracing::warn!(server = %url, %reason, backoff_ms, "server failed; {next}");
            } else {
                tracing::warn!(server = %url, %reason, "server failed; {next}");
            }
        }
    }

    fn health(&self, index: usize) -> MutexGuard<'_, Health> {
        // Health is advisory; a poisoned value still orders the servers.
        self.list[index].health.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What calls do after a server failed, said in its log line: with others, they go first
/// for the backoff; alone, it is still the one every call tries (`order` puts a server that
/// failed last, never out), so the next call tries it again.
fn failover_message(servers: usize) -> &'static str {
    if servers > 1 {
        "trying the others first"
    } else {
        "it is the only server: the next call tries it again"
    }
}

/// A gRPC request carrying the token, when there is one.
pub(crate) fn grpc_request<T>(message: T, auth: Option<MetadataValue<Ascii>>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(auth) = auth {
        request.metadata_mut().insert("authorization", auth);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::failover_message;

    #[test]
    fn a_lone_server_that_failed_is_not_said_to_wait_behind_others() {
        assert_eq!(failover_message(1), "it is the only server: the next call tries it again");
        assert_eq!(failover_message(2), "trying the others first");
    }
}
