//! [`Client`], its builder and the per-tag handle [`TagIds`].
//!
//! Segment ids come from `idmint::Segments` over a [`RemoteStore`](crate::remote): the
//! per-id path is the engine's (an atomic step on the local buffer, no lock, no await);
//! servers are called once per lease, in the background, before the buffer runs dry.
//! Snowflake ids come from a local cache; sequences and public ids are direct calls.
//!
//! [`Client::close`] stops in the order written once: freeze the buffers (no id after it),
//! give each tag's unused ids back to the servers that leased them, stop the background
//! tasks. Dropping the last handle without closing spawns that close on the runtime, when
//! there still is one: unused ids are given back on drop when possible.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use idmint::segment::{Count, SegmentConfig, TagGenerator};
use idmint::{Segments, Tag};
use idmint_core::limits::{BATCH_COUNT_MAX, TAG_REFRESH_MS_MAX};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::endpoints::{Endpoints, Transport};
use crate::error::ClientError;
use crate::ids::{PublicIds, SequenceIds};
use crate::limits::{
    CALL_ATTEMPTS_MAX, CALL_DEADLINE_MS_MAX, CALL_TIMEOUT_MS_DEFAULT, CALL_TIMEOUT_MS_MAX,
    CALL_TIMEOUT_MS_MIN, ENDPOINTS_MAX, LEASE_DURATION_S_DEFAULT, LEASE_DURATION_S_MAX,
    MIN_LEASE_DEFAULT, STORE_CALL_MARGIN_MS, STREAM_COUNT_MAX, TOKEN_LEN_MAX,
};
use crate::owners::Owners;
use crate::remote::RemoteStore;
use crate::snowflake::SnowflakeCache;
use crate::stream::IdStream;
use crate::wire::{NextIds, NextSequence, NextSnowflake, Ping};

/// A connection to idmint servers that hands out ids from local leases. Cheap to clone:
/// clones share the buffers and the connections.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// Builds a [`Client`]: `Client::builder().endpoint(url)…build().await`.
#[derive(Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    token: Option<String>,
    transport: Transport,
    min_lease: u64,
    lease_duration: Duration,
    timeout: Duration,
}

/// One tag's ids, without parsing the tag or looking it up again: keep it where many ids of
/// one tag are taken.
#[derive(Clone)]
pub struct TagIds {
    generator: Arc<TagGenerator>,
    inner: Arc<Inner>,
}

/// A tag given by name (`&str`, `String`) or already parsed ([`Tag`]).
pub trait AsTag {
    /// The tag, parsed if needed; [`ClientError::BadTag`] for a name idmint does not accept.
    fn as_tag(&self) -> Result<Cow<'_, Tag>, ClientError>;

    /// The name as given, not parsed: [`Client::next_id`] looks a served tag up by it.
    fn as_name(&self) -> &str;
}

impl AsTag for str {
    fn as_tag(&self) -> Result<Cow<'_, Tag>, ClientError> {
        Tag::parse(self)
            .map(Cow::Owned)
            .map_err(|e| ClientError::BadTag { tag: self.to_string(), reason: e.to_string() })
    }

    fn as_name(&self) -> &str {
        self
    }
}

impl AsTag for String {
    fn as_tag(&self) -> Result<Cow<'_, Tag>, ClientError> {
        self.as_str().as_tag()
    }

    fn as_name(&self) -> &str {
        self
    }
}

impl AsTag for Tag {
    fn as_tag(&self) -> Result<Cow<'_, Tag>, ClientError> {
        Ok(Cow::Borrowed(self))
    }

    fn as_name(&self) -> &str {
        self.as_str()
    }
}

impl<T: AsTag + ?Sized> AsTag for &T {
    fn as_tag(&self) -> Result<Cow<'_, Tag>, ClientError> {
        (**self).as_tag()
    }

    fn as_name(&self) -> &str {
        (**self).as_name()
    }
}

struct Inner {
    parts: Parts,
    endpoints: Arc<Endpoints>,
    snowflake: Arc<SnowflakeCache>,
    /// Bound on one call with its retries.
    deadline: Duration,
    runtime: tokio::runtime::Handle,
    closed: AtomicBool,
    /// The strict tags met so far: their ids are asked of the servers one call at a time,
    /// never cached here (a cache would hand ids out after ids other clients got later).
    strict: std::sync::Mutex<std::collections::HashSet<Tag>>,
    /// Which server is each strict tag's owner, as the servers named it.
    owners: Owners,
    /// Held by the close, so a second close waits for the first.
    close_lock: tokio::sync::Mutex<bool>,
}

/// What the close needs, owned, so a drop can hand it to a task.
#[derive(Clone)]
struct Parts {
    segments: Arc<Segments>,
    store: Arc<RemoteStore>,
    tracker: TaskTracker,
    cancel: CancellationToken,
}

impl Default for ClientBuilder {
    fn default() -> ClientBuilder {
        ClientBuilder {
            endpoints: Vec::new(),
            token: None,
            transport: Transport::Auto,
            min_lease: MIN_LEASE_DEFAULT,
            lease_duration: Duration::from_secs(LEASE_DURATION_S_DEFAULT),
            timeout: Duration::from_millis(CALL_TIMEOUT_MS_DEFAULT),
        }
    }
}

impl ClientBuilder {
    /// Adds a server, `http://host:port`. Servers are tried in the order given, starting
    /// from the last one that answered.
    pub fn endpoint(mut self, url: impl Into<String>) -> ClientBuilder {
        self.endpoints.push(url.into());
        self
    }

    /// Adds several servers.
    pub fn endpoints<I, S>(mut self, urls: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.endpoints.extend(urls.into_iter().map(Into::into));
        self
    }

    /// A bearer token sent with every call (`authorization: Bearer TOKEN`), for tags guarded
    /// by a client token. Never shown in errors, logs or `Debug`.
    pub fn token(mut self, token: impl Into<String>) -> ClientBuilder {
        self.token = Some(token.into());
        self
    }

    /// gRPC, HTTP, or gRPC with HTTP fallback (the default).
    pub fn transport(mut self, transport: Transport) -> ClientBuilder {
        self.transport = transport;
        self
    }

    /// Fewest ids one lease holds (1 to `BATCH_COUNT_MAX`; default [`MIN_LEASE_DEFAULT`]).
    pub fn min_lease(mut self, ids: u64) -> ClientBuilder {
        self.min_lease = ids;
        self
    }

    /// How long one lease should last at the measured rate, in whole seconds (1 s to
    /// [`LEASE_DURATION_S_MAX`]; default [`LEASE_DURATION_S_DEFAULT`]): a lease holds
    /// `rate × duration` ids within `[min_lease, BATCH_COUNT_MAX]`.
    pub fn lease_duration(mut self, duration: Duration) -> ClientBuilder {
        self.lease_duration = duration;
        self
    }

    /// Bound on one call to one server ([`CALL_TIMEOUT_MS_MIN`] to [`CALL_TIMEOUT_MS_MAX`]
    /// ms; default [`CALL_TIMEOUT_MS_DEFAULT`]). One call with its failover attempts is
    /// bounded by [`CALL_ATTEMPTS_MAX`] times it, at most [`CALL_DEADLINE_MS_MAX`].
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// Checks the settings and starts the client (inside a tokio runtime). Connects lazily:
    /// a server that is down now is tried when ids are first needed.
    pub async fn build(self) -> Result<Client, ClientError> {
        let urls = self.checked_urls()?;
        let token = self.checked_token()?;
        if !(1..=BATCH_COUNT_MAX).contains(&self.min_lease) {
            return Err(bad_config(
                "min_lease",
                format!("{} ids is out of range; use 1 to {BATCH_COUNT_MAX}", self.min_lease),
            ));
        }
        let lease_s = self.lease_duration.as_secs();
        if self.lease_duration.subsec_nanos() != 0 || !(1..=LEASE_DURATION_S_MAX).contains(&lease_s)
        {
            return Err(bad_config(
                "lease_duration",
                format!(
                    "{:?} is out of range; use whole seconds from 1 to {LEASE_DURATION_S_MAX}",
                    self.lease_duration
                ),
            ));
        }
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        if !(CALL_TIMEOUT_MS_MIN..=CALL_TIMEOUT_MS_MAX).contains(&timeout_ms) {
            return Err(bad_config(
                "timeout",
                format!(
                    "{timeout_ms} ms is out of range; use {CALL_TIMEOUT_MS_MIN} to {CALL_TIMEOUT_MS_MAX} ms"
                ),
            ));
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| bad_config("build", "call it inside a tokio runtime".to_string()))?;
        let deadline_ms = (timeout_ms * u64::from(CALL_ATTEMPTS_MAX)).min(CALL_DEADLINE_MS_MAX);
        let deadline = Duration::from_millis(deadline_ms);
        let endpoints = Arc::new(Endpoints::new(urls, self.transport, self.timeout, token)?);
        let store = Arc::new(RemoteStore::new(Arc::clone(&endpoints), self.min_lease, deadline));
        let engine_bound_ms = deadline_ms + STORE_CALL_MARGIN_MS;
        let config = SegmentConfig::default()
            .with_segment_duration_s(lease_s)
            .and_then(|c| c.with_refill_wait_ms(engine_bound_ms))
            .and_then(|c| c.with_store_call_timeout_ms(engine_bound_ms))
            // The store answers the tags this client serves; the refresh has nothing to learn.
            .and_then(|c| c.with_tag_refresh_ms(TAG_REFRESH_MS_MAX))
            // The servers bound their store's lookups of unknown names; the client asks them
            // again at once, so a tag created a moment ago is served on its next request.
            .map(SegmentConfig::with_unknown_tags_unbounded)
            .map_err(|e| bad_config("build", e.to_string()))?;
        let segments = Segments::start_ranges(Arc::clone(&store) as _, config)
            .map_err(|e| bad_config("build", e.to_string()))?;
        tracing::debug!(servers = %endpoints.describe(), min_lease = self.min_lease, lease_s, timeout_ms, "idmint client started");
        let parts = Parts {
            segments,
            store,
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
        };
        let owners = Owners::new(endpoints.len());
        Ok(Client {
            inner: Arc::new(Inner {
                parts,
                endpoints,
                snowflake: Arc::new(SnowflakeCache::new()),
                deadline,
                runtime,
                closed: AtomicBool::new(false),
                strict: std::sync::Mutex::default(),
                owners,
                close_lock: tokio::sync::Mutex::new(false),
            }),
        })
    }

    fn checked_urls(&self) -> Result<Vec<String>, ClientError> {
        if self.endpoints.is_empty() {
            return Err(ClientError::NoEndpoints);
        }
        if self.endpoints.len() > ENDPOINTS_MAX {
            return Err(bad_config(
                "endpoint",
                format!("{} servers given; give at most {ENDPOINTS_MAX}", self.endpoints.len()),
            ));
        }
        self.endpoints.iter().map(|url| checked_url(url)).collect()
    }

    fn checked_token(&self) -> Result<Option<String>, ClientError> {
        let Some(token) = &self.token else { return Ok(None) };
        let visible = token.bytes().all(|b| b.is_ascii_graphic());
        if token.is_empty() || token.len() > TOKEN_LEN_MAX || !visible {
            // The token itself is never shown.
            return Err(bad_config(
                "token",
                format!("a token is 1 to {TOKEN_LEN_MAX} visible ASCII characters, no spaces"),
            ));
        }
        Ok(Some(token.clone()))
    }
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("endpoints", &self.endpoints)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .field("transport", &self.transport)
            .field("min_lease", &self.min_lease)
            .field("lease_duration", &self.lease_duration)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Client {
    /// A builder with the defaults.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// A client of `endpoints` with the defaults (no token, gRPC with HTTP fallback).
    pub async fn connect<I, S>(endpoints: I) -> Result<Client, ClientError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::builder().endpoints(endpoints).build().await
    }

    /// The next id of `tag`, from the local buffer; waits (bounded) only when it is empty.
    /// Ids of one tag from one client increase, across server failovers too.
    ///
    /// A tag the client already serves is found by its name, not parsed (no allocation); the
    /// first call for a tag parses it.
    pub async fn next_id(&self, tag: impl AsTag) -> Result<u64, ClientError> {
        let name = tag.as_name();
        // The fast path first, outside the library's future (as `TagIds::next_id`).
        if let Some(id) = self.inner.parts.segments.try_next_id_by_name(name) {
            return Ok(id);
        }
        Box::pin(self.next_id_waiting(name)).await
    }

    /// [`Client::next_id`] when the take by name found nothing: the name parsed, then the
    /// library's waiting path.
    async fn next_id_waiting(&self, name: &str) -> Result<u64, ClientError> {
        let tag = name.as_tag()?;
        if !self.inner.is_strict(&tag) {
            match self.inner.parts.segments.next_id(&tag).await.map_err(|e| self.inner.error(e)) {
                Err(error) if is_strict_refusal(&error) => self.inner.learn_strict(&tag),
                answer => return answer,
            }
        }
        let ids = self.strict_ids(&tag, 1).await?;
        ids.first()
            .copied()
            .ok_or_else(|| ClientError::Unavailable { reason: "a server answered no id".into() })
    }

    /// `count` ids of `tag` (1 to `BATCH_COUNT_MAX`), increasing. A strict tag's come from
    /// the servers in one call (its ids are never cached here), from its owner once a
    /// server's answer named which of the client's servers that is.
    pub async fn next_ids(&self, tag: impl AsTag, count: u64) -> Result<Vec<u64>, ClientError> {
        let tag = tag.as_tag()?;
        if !self.inner.is_strict(&tag) {
            match self.tag(tag.as_ref())?.next_ids(count).await {
                Err(error) if is_strict_refusal(&error) => self.inner.learn_strict(&tag),
                answer => return answer,
            }
        }
        self.strict_ids(&tag, count).await
    }

    /// `count` ids of the strict tag `tag`, from its owner when a server named which of
    /// them that is (`owners.rs`), else from any server (which forwards to the owner).
    async fn strict_ids(&self, tag: &Tag, count: u64) -> Result<Vec<u64>, ClientError> {
        self.inner.check_open()?;
        let count = checked_count(count)?;
        let (inner, op) = (&self.inner, NextIds { tag: tag.as_str(), count });
        let deadline = Instant::now() + inner.deadline;
        let up = |index| inner.endpoints.is_up(index);
        let asked = match inner.owners.route(tag, up) {
            Some(index) => match inner.endpoints.call_at(index, &op, deadline).await {
                Ok(answer) => Some((answer, index)),
                // Only the owner's ask failed: the tag goes the failover way, this take too
                // (a take is lost at worst, never repeated; every node answers in order).
                Err(ClientError::Unavailable { .. }) => {
                    inner.owners.forget(tag);
                    None
                }
                Err(error) => return Err(error),
            },
            None => None,
        };
        let ((ids, named), index) = match asked {
            Some(asked) => asked,
            None => inner.endpoints.call(&op, deadline).await?,
        };
        inner.owners.learn(tag, index, &named, up);
        match ids {
            PublicIds::Numbers(ids) => Ok(ids),
            PublicIds::Texts(_) => Err(ClientError::Unavailable {
                reason: "a server answered texts for a strict tag".into(),
            }),
        }
    }

    /// A handle on `tag`'s ids: no parsing or lookup per id, and a synchronous
    /// [`TagIds::try_next_id`].
    pub fn tag(&self, tag: impl AsTag) -> Result<TagIds, ClientError> {
        let tag = tag.as_tag()?;
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(ClientError::ShuttingDown);
        }
        self.inner.parts.store.serve(&tag);
        let generator =
            self.inner.parts.segments.generator(&tag).map_err(|e| self.inner.error(e))?;
        Ok(TagIds { generator, inner: Arc::clone(&self.inner) })
    }

    /// The next snowflake id, from a local batch fetched ahead (NextSnowflakeIds); waits
    /// (bounded) only when the cache is empty. Increasing within one server's batches.
    pub async fn next_snowflake_id(&self) -> Result<u64, ClientError> {
        self.inner.check_open()?;
        let cache = &self.inner.snowflake;
        let (id, prefetch) = cache.take();
        if prefetch {
            let (cache, endpoints) = (Arc::clone(cache), Arc::clone(&self.inner.endpoints));
            let (deadline, cancel) = (self.inner.deadline, self.inner.parts.cancel.clone());
            self.inner.parts.tracker.spawn_on(
                async move {
                    tokio::select! {
                        () = cache.prefetch(&endpoints, deadline) => {}
                        () = cancel.cancelled() => {}
                    }
                },
                &self.inner.runtime,
            );
        }
        match id {
            Some(id) => Ok(id),
            None => {
                self.inner.snowflake.next_waiting(&self.inner.endpoints, self.inner.deadline).await
            }
        }
    }

    /// `count` snowflake ids (1 to `BATCH_COUNT_MAX`) in one call, increasing.
    pub async fn next_snowflake_ids(&self, count: u64) -> Result<Vec<u64>, ClientError> {
        self.inner.check_open()?;
        let count = checked_count(count)?;
        self.inner.call(&NextSnowflake { count }).await
    }

    /// `count` numbers of the sequence `name` (1 to `BATCH_COUNT_MAX`), in one call, no
    /// cache: a sequence's numbers follow each other across all its users.
    pub async fn next_sequence_ids(
        &self,
        name: &str,
        count: u64,
    ) -> Result<SequenceIds, ClientError> {
        self.inner.check_open()?;
        let name = name.as_tag()?;
        let count = checked_count(count)?;
        self.inner.call(&NextSequence { name: name.as_str(), count }).await
    }

    /// `count` public ids of `tag` (1 to `BATCH_COUNT_MAX`) as the server's format gives
    /// them (numbers, or texts for a templated tag), in one call, no cache: what a tag with a
    /// public format needs.
    pub async fn public_ids(&self, tag: impl AsTag, count: u64) -> Result<PublicIds, ClientError> {
        self.inner.check_open()?;
        let tag = tag.as_tag()?;
        let count = checked_count(count)?;
        Ok(self.inner.call(&NextIds { tag: tag.as_str(), count }).await?.0)
    }

    /// `count` public ids of `tag` (1 to [`STREAM_COUNT_MAX`]) in chunks: one StreamIds call
    /// (over HTTP, batches of `BATCH_COUNT_MAX`). Nothing is sent until the stream is read.
    pub fn stream_ids(&self, tag: impl AsTag, count: u64) -> Result<IdStream, ClientError> {
        self.inner.check_open()?;
        let tag = tag.as_tag()?.into_owned();
        if !(1..=STREAM_COUNT_MAX).contains(&count) {
            return Err(ClientError::InvalidArgument {
                code: "bad_count".to_string(),
                message: format!(
                    "count {count} is out of range; stream 1 to {STREAM_COUNT_MAX} ids"
                ),
            });
        }
        Ok(IdStream::new(Arc::clone(&self.inner.endpoints), tag, count, self.inner.deadline))
    }

    /// Whether a server answers.
    pub async fn ping(&self) -> Result<(), ClientError> {
        self.inner.call(&Ping).await
    }

    /// The servers, as given (normalised).
    pub fn endpoints(&self) -> Vec<String> {
        self.inner.endpoints.urls()
    }

    /// Stops the client: freezes every tag's buffer (later calls fail with
    /// [`ClientError::ShuttingDown`], never with an id), gives the unused ids back to the
    /// servers that leased them (taken back where the server can prove it safe, else
    /// wasted, never repeated), stops the background tasks. Idempotent; clones and handles
    /// are closed too.
    pub async fn close(&self) {
        let mut closed = self.inner.close_lock.lock().await;
        if *closed {
            return;
        }
        self.inner.closed.store(true, Ordering::Release);
        self.inner.parts.clone().close().await;
        *closed = true;
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("servers", &self.inner.endpoints.describe()).finish()
    }
}

impl TagIds {
    /// The tag.
    pub fn tag(&self) -> &Tag {
        self.generator.tag()
    }

    /// The next id if one is in the local buffer now: synchronous and lock-free (loads and
    /// one atomic add), callable from any thread. `None` when the buffer is empty (a lease
    /// is on its way; [`TagIds::next_id`] waits for it) or the client is closed.
    #[inline]
    pub fn try_next_id(&self) -> Option<u64> {
        self.generator.try_next_id()
    }

    /// The next id; waits (bounded) only when the local buffer is empty.
    #[inline]
    pub async fn next_id(&self) -> Result<u64, ClientError> {
        // The fast path first, outside the library's future: that future carries the waiting
        // machinery and its error, and costs a call and a copy per id even when it does not
        // wait (docs/PERFORMANCE.md). The slow path is boxed, so this future stays small.
        if let Some(id) = self.generator.try_next_id() {
            return Ok(id);
        }
        Box::pin(self.next_id_waiting()).await
    }

    /// [`TagIds::next_id`] when the buffer was empty: the library's waiting path.
    async fn next_id_waiting(&self) -> Result<u64, ClientError> {
        self.generator.next_id().await.map_err(|e| self.inner.error(e))
    }

    /// `count` ids (1 to `BATCH_COUNT_MAX`), increasing.
    pub async fn next_ids(&self, count: u64) -> Result<Vec<u64>, ClientError> {
        let count = Count::new(count).map_err(|e| ClientError::InvalidArgument {
            code: "bad_count".to_string(),
            message: e.to_string(),
        })?;
        let ranges = self.generator.next_ids(count).await.map_err(|e| self.inner.error(e))?;
        Ok(ranges.iter().flat_map(|r| r.ids()).collect())
    }
}

impl std::fmt::Debug for TagIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TagIds").field("tag", self.tag()).finish()
    }
}

impl Inner {
    /// A call with failover, bounded by the client's deadline.
    async fn call<O: crate::endpoints::Op>(&self, op: &O) -> Result<O::Output, ClientError> {
        let (output, _server) = self.endpoints.call(op, Instant::now() + self.deadline).await?;
        Ok(output)
    }

    fn check_open(&self) -> Result<(), ClientError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(ClientError::ShuttingDown);
        }
        Ok(())
    }

    /// The engine's error as the client's: an "unknown tag" may stand for the caller error
    /// the store recorded (formatted tag, no token, …).
    fn is_strict(&self, tag: &Tag) -> bool {
        let strict = self.strict.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        !strict.is_empty() && strict.contains(tag)
    }

    fn learn_strict(&self, tag: &Tag) {
        let mut strict = self.strict.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        strict.insert(tag.clone());
    }

    fn error(&self, error: idmint::Error) -> ClientError {
        match error {
            idmint::Error::UnknownTag(tag) => self
                .parts
                .store
                .caller_error(&tag)
                .unwrap_or_else(|| ClientError::UnknownTag { tag: tag.to_string() }),
            idmint::Error::Unavailable { tag, reason } => {
                ClientError::Unavailable { reason: format!("tag {tag}: {reason}") }
            }
            idmint::Error::ShuttingDown => ClientError::ShuttingDown,
            idmint::Error::TooManyTags(max) => ClientError::TooManyTags(max),
            other => ClientError::Unavailable { reason: other.to_string() },
        }
    }
}

impl Parts {
    /// The close, in order: freeze and give back (the engine, which hands each tag's tail to
    /// the store; queued leases of that tag go first), refuse further leases, give back the
    /// leases still queued, stop the snowflake prefetch.
    async fn close(self) {
        self.cancel.cancel();
        self.tracker.close();
        self.segments.shutdown().await;
        self.store.close();
        self.store.return_all_queued().await;
        self.tracker.wait().await;
    }
}

impl Drop for Inner {
    /// The last handle went without [`Client::close`]: the close runs on the runtime, when
    /// there is one (best effort: given back on drop when possible, else wasted, never
    /// repeated).
    fn drop(&mut self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let parts = self.parts.clone();
        // Spawning onto a runtime that has shut down drops the task: nothing is given back.
        drop(self.runtime.spawn(parts.close()));
    }
}

fn checked_url(url: &str) -> Result<String, ClientError> {
    let bad = |reason: &str| ClientError::BadEndpoint {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = url.trim().trim_end_matches('/');
    if trimmed.starts_with("https://") {
        return Err(bad(
            "the client speaks plain http:// (h2c for gRPC); terminate TLS in front of idmint \
             and give its http:// address on the inner network",
        ));
    }
    let Some(authority) = trimmed.strip_prefix("http://") else {
        return Err(bad("give a server as http://host:port"));
    };
    if authority.is_empty() || authority.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad("give a server as http://host:port, without a path, query or user"));
    }
    Ok(trimmed.to_string())
}

fn checked_count(count: u64) -> Result<u64, ClientError> {
    Count::new(count).map(Count::get).map_err(|e| ClientError::InvalidArgument {
        code: "bad_count".to_string(),
        message: e.to_string(),
    })
}

fn bad_config(field: &'static str, reason: String) -> ClientError {
    ClientError::BadConfig { field, reason }
}

/// Whether a server refused ranges of a tag because it is strict.
fn is_strict_refusal(error: &ClientError) -> bool {
    matches!(error, ClientError::Refused { code, .. } if code == "strict_tag")
}
