//! Strict tags: per-tag ids that increase in real time across every node of a cluster. An id
//! answered before a take was sent is below every id that take answers, whichever nodes
//! answered them.
//!
//! One node at a time owns a strict tag: it holds the tag's lease (slot 0 of the tag's own
//! lease space, [`lease_space`]) through a fence (`fence.rs`). The lease's mark is the tag's ceiling:
//! the owner raises it a window ahead, under its token, before it hands out an id below it,
//! and serves from memory under one lock, in order. A new owner inherits the mark and starts
//! above it. The old owner's gate closes one TTL after it last asked to renew, on its own
//! clock, before the store (counting from later, on its own clock, plus the margin) lets any
//! other node take the slot; a mark raise or renewal the store refuses closes it at once.
//!
//! A node that does not own the tag finds the owner in the lease row (its holder is the
//! owner's peer address) and forwards the take over its [`PeerLink`]; takes waiting for one
//! tag are coalesced into one call for all their ids (one round trip per batch) and answered
//! in arrival order, so a take sent after another was answered joins a later call. A tag no
//! live node holds is taken by the first node that needs it. Ids stay below
//! [`STRICT_ID_MAX`] (2^53 - 1, the largest mark every store keeps exactly).
//!
//! The timestamp oracle is served by the same machinery under an internal name
//! ([`tso_tag`], its own lease space `tso`): its ceiling is a time in milliseconds, its values
//! `physical_ms << 18 | logical` (`idmint_core::tso`) from the node's clock, never below
//! the last one or the inherited ceiling.

mod forward;
mod members;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use idmint_core::{Count, IdRange, Tag, tso};
use idmint_store::{
    Lease, LeaseRequest, LeaseStore, POLICY_NAME, POLICY_STRICT, StoreError, TagMetaStore,
    TagRecord, WORKER_TIME_MS_MAX, WorkerSpace,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::fence::Fence;
use crate::peer::{FenceToken, Peer, PeerLink};
use crate::segment::Error;
use forward::Forwards;
use members::Members;

pub use members::{MEMBERS_MAX, MEMBERS_SPACE};

/// The token a forwarded take carries to a tag's home when no node holds the tag: take the
/// lease if it is free, then serve (lease tokens come from the store's clock, never 0).
pub const CLAIM_TOKEN: FenceToken = 0;

/// The largest id of a strict tag: the largest mark every store keeps exactly.
pub const STRICT_ID_MAX: u64 = WORKER_TIME_MS_MAX;
/// The fewest ids a ceiling raise reserves ahead.
pub const WINDOW_MIN: u64 = 1_000;
/// The most ids a ceiling raise reserves ahead (what a failover may skip).
pub const WINDOW_MAX: u64 = 10_000_000;
/// How long a window should last at the tag's measured rate, in milliseconds.
pub const WINDOW_TARGET_MS: u64 = 10_000;
/// The tag-metadata name of a strict tag's ceiling, recorded beside the lease's mark at every
/// raise: a lease row deleted later leaves it, so a new owner still starts above it, and a
/// plain tag created again under a deleted strict tag's name starts above it.
pub const CEILING_META_NAME: &str = "ceiling";
/// How long a take waits before it looks for a tag's owner again, while the last owner's
/// lease runs out.
pub const ROUTE_RETRY_MS: u64 = 25;
/// Default lease TTL of a strict tag, in milliseconds.
pub const LEASE_TTL_MS_DEFAULT: u64 = 3_000;
/// Default margin the store waits past a lease's expiry before another node takes it.
pub const LEASE_MARGIN_MS_DEFAULT: u64 = 1_000;
/// How far ahead of its clock the oracle's owner reserves time (PD's 3 s): what a failover
/// may move the oracle ahead of the clock.
pub const TSO_WINDOW_MS: u64 = 3_000;

/// The internal name the timestamp oracle is served under: in idmint's reserved namespace,
/// so no user's tag (strict or not) can share its lease, ceiling or forwards.
pub fn tso_tag() -> Tag {
    let name = Tag::parse("tso").expect("a valid name");
    Tag::internal(&name).expect("a valid internal name")
}

/// How strict tags are served.
#[derive(Debug, Clone)]
pub struct StrictConfig {
    /// This node as its peers reach it (its gRPC API), recorded as the holder of the leases
    /// it takes, so other nodes forward to it.
    pub peer: Peer,
    /// The lease's time to live, in milliseconds; renewed every third of it.
    pub lease_ttl_ms: u64,
    /// How long past a lease's expiry the store waits before another node may take it.
    pub lease_margin_ms: u64,
    /// The most ids one forwarded call asks for: at most every node's batch limit.
    pub forward_batch_max: u64,
    /// **Unsafe**, for the chaos suite's control only: an owner that can no longer prove its
    /// lease keeps serving from the window it raised (never above its ceiling, so no id
    /// repeats), which breaks real-time order once another node owns the tag. Off by default.
    pub unsafe_ignore_lease_loss: bool,
    /// The witness every ceiling raise is raised in too, and a new owner starts above.
    pub witness: Option<crate::witness::Witness>,
}

impl StrictConfig {
    /// The defaults, for a node reached at `peer`.
    pub fn new(peer: Peer) -> StrictConfig {
        StrictConfig {
            peer,
            lease_ttl_ms: LEASE_TTL_MS_DEFAULT,
            lease_margin_ms: LEASE_MARGIN_MS_DEFAULT,
            forward_batch_max: forward::FORWARD_BATCH_MAX,
            unsafe_ignore_lease_loss: false,
            witness: None,
        }
    }
}

/// The lease space of a strict tag: `strict:` and the tag's 128-bit SipHash-1-3 (fixed key)
/// in hex, since a space name is at most 64 characters of `[A-Za-z0-9_.:-]` and a tag any
/// text. Two tags that collided would share one lease and ceiling: never an id twice, only
/// one of them served at a time.
pub fn lease_space(tag: &Tag) -> WorkerSpace {
    use std::hash::Hasher;
    if *tag == tso_tag() {
        return WorkerSpace::parse("tso").expect("a valid space name");
    }
    let mut hasher = siphasher::sip128::SipHasher13::new_with_keys(0, 0);
    hasher.write(tag.as_str().as_bytes());
    let hash = siphasher::sip128::Hasher128::finish128(&hasher).as_u128();
    WorkerSpace::parse(&format!("strict:{hash:032x}")).expect("a valid space name")
}

/// The strict-tag engine of one node: the tags it owns and its forwards to the others.
pub struct StrictTags {
    store: Arc<dyn LeaseStore>,
    /// Where tags' policies are recorded: an owner checks its tags are still strict.
    meta: Arc<dyn TagMetaStore>,
    clock: Arc<dyn Clock>,
    /// The node's clock: the oracle's physical part.
    wall: Arc<dyn Clock>,
    config: StrictConfig,
    owned: Mutex<HashMap<Tag, Arc<Owned>>>,
    /// The owner and lease token each tag's takes were last forwarded to: kept while the
    /// owner serves them (the token makes a stale entry harmless: the old owner refuses), and
    /// dropped at the first forward that does not answer, so a busy forwarding node reads
    /// the lease row once per owner, not once per take.
    routes: Mutex<HashMap<Tag, (Peer, FenceToken)>>,
    /// One acquisition at a time: two takes of an unowned tag acquire it once.
    acquiring: tokio::sync::Mutex<()>,
    forwards: Forwards,
    /// The live nodes, and which of them each tag belongs to.
    members: Arc<Members>,
    /// Wakes the membership task when this node joins.
    joined: Arc<tokio::sync::Notify>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

/// A tag this node owns.
struct Owned {
    tag: Tag,
    /// When this node took the lease, on the engine's monotonic clock.
    since_ms: u64,
    fence: Fence<Window>,
    /// One ceiling raise at a time.
    raising: tokio::sync::Mutex<()>,
}

/// What the owner hands out: ids from `next` up to `ceiling`, the mark the store holds; for
/// the oracle (`time`), timestamps from `next` whose physical part is at most `ceiling`, a
/// time in milliseconds.
#[derive(Debug, Clone, Copy)]
struct Window {
    time: bool,
    next: u64,
    ceiling: u64,
    /// When the ceiling was last raised, and `next` then: the tag's measured rate.
    raised_ms: u64,
    raised_next: u64,
    /// Set when the lease is lost or given up: nothing is handed out after.
    stopped: bool,
}

/// Milliseconds on the monotonic clock (from 1 at the engine's start): the owner's gate and
/// the window's pacing never move with the wall clock, so a clock stepped back cannot keep
/// an old owner's gate open past its lease.
#[derive(Debug)]
struct Monotonic(std::time::Instant);

impl Clock for Monotonic {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX).saturating_add(1)
    }
}

/// Bounds a store call of the engine: a store that does not answer is unavailable, and a
/// take waiting on it ends.
async fn bounded<T>(
    call: impl std::future::Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    let limit = Duration::from_millis(idmint_core::limits::STORE_CALL_TIMEOUT_MS_DEFAULT);
    tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
        let ms = limit.as_millis();
        Err(StoreError::Unavailable(format!("the store did not answer within {ms} ms")))
    })
}

/// The ceiling recorded for `tag` in the tag metadata (0 without one).
async fn recorded_ceiling(meta: &dyn TagMetaStore, tag: &Tag) -> Result<u64, StoreError> {
    let value = bounded(meta.meta(tag, CEILING_META_NAME)).await?;
    Ok(value.and_then(|v| v.parse().ok()).unwrap_or(0))
}

/// Raises the ceiling recorded for `tag` to `ceiling` (never lowers it).
async fn record_ceiling(
    meta: &dyn TagMetaStore,
    tag: &Tag,
    ceiling: u64,
) -> Result<(), StoreError> {
    loop {
        let current = bounded(meta.meta(tag, CEILING_META_NAME)).await?;
        let parsed = current.as_deref().and_then(|v| v.parse::<u64>().ok());
        if parsed.is_some_and(|c| c >= ceiling) {
            return Ok(());
        }
        let new = ceiling.to_string();
        let set = meta.compare_and_set_meta(tag, CEILING_META_NAME, current.as_deref(), &new);
        if bounded(set).await? {
            return Ok(());
        }
    }
}

/// Who owns a strict tag, as [`StrictTags::owner`] knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This node.
    This,
    /// Another node.
    Other(Peer),
}

/// Whether this node holds a tag's lease.
enum Held {
    Serving(Arc<Owned>),
    Renewing,
    No,
}

/// Where a take of a strict tag goes.
enum Route {
    Here(Arc<Owned>),
    /// The owner and the token of the lease row it holds.
    Peer(Peer, FenceToken),
}

impl StrictTags {
    /// The engine of a node holding strict tags' leases in `store` and their policies in
    /// `meta`, reaching its peers by
    /// `peers` (none: it serves only the tags it can own).
    /// `wall` is the node's clock, the oracle's physical part.
    pub fn new(
        (store, meta): (Arc<dyn LeaseStore>, Arc<dyn TagMetaStore>),
        config: StrictConfig,
        peers: Option<Arc<dyn PeerLink>>,
        wall: Arc<dyn Clock>,
    ) -> Arc<StrictTags> {
        let members = Members::new(
            Arc::clone(&store),
            config.peer.grpc_url.clone(),
            config.lease_ttl_ms,
            config.lease_margin_ms,
        );
        let engine = Arc::new(StrictTags {
            store,
            meta,
            clock: Arc::new(Monotonic(std::time::Instant::now())),
            wall,
            owned: Mutex::new(HashMap::new()),
            routes: Mutex::new(HashMap::new()),
            acquiring: tokio::sync::Mutex::new(()),
            forwards: Forwards::new(peers, config.forward_batch_max),
            members: Arc::new(members),
            joined: Arc::new(tokio::sync::Notify::new()),
            config,
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        engine.spawn_membership();
        engine
    }

    /// Keeps this node's membership and its view of the others fresh: every third of a
    /// lease TTL, until the engine stops.
    fn spawn_membership(&self) {
        let period = Duration::from_millis((self.config.lease_ttl_ms / 3).max(1));
        let (members, clock, cancel) =
            (Arc::clone(&self.members), Arc::clone(&self.clock), self.cancel.clone());
        let joined = Arc::clone(&self.joined);
        self.tasks.spawn(async move {
            loop {
                let refresh = members.refresh(&*clock);
                let limit =
                    Duration::from_millis(idmint_core::limits::STORE_CALL_TIMEOUT_MS_DEFAULT);
                let _ = tokio::time::timeout(limit, refresh).await;
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(period) => {}
                    () = joined.notified() => {}
                }
            }
        });
    }

    /// Joins the members at this node's first strict take: its view is read before the
    /// take places the tag.
    async fn join(&self) {
        if !self.members.join() {
            let limit = Duration::from_millis(idmint_core::limits::STORE_CALL_TIMEOUT_MS_DEFAULT);
            let _ = tokio::time::timeout(limit, self.members.refresh(&*self.clock)).await;
            self.joined.notify_one();
        }
    }

    /// `count` ids of the strict tag `tag`, greater than every id of it answered before this
    /// call, on any node.
    pub async fn next_ids(self: &Arc<Self>, tag: &Tag, count: Count) -> Result<IdRange, Error> {
        if self.cancel.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        // An owner that does not answer (dead, or its lease restored from a backup) is
        // routed around once its lease ends: a take waits up to one TTL and margin for that.
        let wait_ms = self.config.lease_ttl_ms + self.config.lease_margin_ms;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
        loop {
            let answer = match self.route(tag, false).await? {
                Route::Here(owned) => return self.take_here(&owned, count).await,
                Route::Peer(peer, fence) => {
                    let answer = self.forwards.take(&peer, tag, count, fence).await;
                    if answer.is_err() {
                        self.routes.lock().unwrap_or_else(PoisonError::into_inner).remove(tag);
                    }
                    answer
                }
            };
            match answer {
                Err(Error::Unavailable { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(ROUTE_RETRY_MS)).await;
                }
                answer => return answer,
            }
        }
    }

    /// `count` (1 to [`tso::BATCH_MAX`]) timestamps of the oracle, consecutive and in one
    /// millisecond, greater than every timestamp answered before this call, on any node.
    pub async fn timestamps(self: &Arc<Self>, count: Count) -> Result<IdRange, Error> {
        self.next_ids(&tso_tag(), count).await
    }

    /// `count` ids of `tag` taken here for a peer that found this node holding the tag's
    /// lease under `fence` (the row's token): served only while this node still holds that
    /// very lease and its gate is open, else refused as unavailable (the peer looks for the
    /// owner again). Never forwarded on: a forwarded take makes one hop.
    pub async fn next_ids_held(
        self: &Arc<Self>,
        tag: &Tag,
        count: Count,
        fence: FenceToken,
    ) -> Result<IdRange, Error> {
        let refused = |reason: String| Error::Unavailable { tag: tag.clone(), reason };
        self.join().await;
        if fence == CLAIM_TOKEN {
            // Sent here as the tag's home: take the lease if it is free (one attempt; the
            // sender tries again), else refuse.
            if self.cancel.is_cancelled() {
                return Err(Error::ShuttingDown);
            }
            return match self.try_route(tag, true).await? {
                Ok(Route::Here(owned)) => self.take_here(&owned, count).await,
                Ok(Route::Peer(peer, _)) => {
                    Err(refused(format!("the tag is held by {}: ask it", peer.grpc_url)))
                }
                Err(reason) => Err(refused(reason)),
            };
        }
        let Held::Serving(owned) = self.owned_now(tag) else {
            return Err(refused(format!(
                "this node ({}) does not hold the tag's lease: ask its owner",
                self.config.peer.grpc_url
            )));
        };
        let token = owned.fence.lock().lease.as_ref().map(|lease| lease.token);
        if token != Some(fence) {
            return Err(refused(format!(
                "this node holds the tag's lease under token {token:?}, not {fence}: the lease \
                 was taken over since; ask its owner"
            )));
        }
        self.take_here(&owned, count).await
    }

    /// Owns the strict tag `tag` now (a tag just created here), its first id at least
    /// `first`: the ceiling is raised to `first - 1` when it is below. Refused when another
    /// node owns it and `first` is given.
    pub async fn claim(self: &Arc<Self>, tag: &Tag, first: Option<u64>) -> Result<(), Error> {
        let owned = match self.route(tag, true).await? {
            Route::Here(owned) => owned,
            Route::Peer(peer, _) if first.is_some() => {
                return Err(Error::Unavailable {
                    tag: tag.clone(),
                    reason: format!(
                        "the tag is owned by {}; create it without a start",
                        peer.grpc_url
                    ),
                });
            }
            Route::Peer(..) => return Ok(()),
        };
        let Some(first) = first else { return Ok(()) };
        let floor = first.saturating_sub(1);
        let (lease, below) = {
            let state = owned.fence.lock();
            (state.lease.clone(), state.holder.ceiling < floor)
        };
        let (Some(lease), true) = (lease, below) else { return Ok(()) };
        let unavailable =
            |e: StoreError| Error::Unavailable { tag: tag.clone(), reason: e.to_string() };
        owned
            .fence
            .raise(&lease, floor, |window| window.stopped = true)
            .await
            .map_err(unavailable)?;
        let mut state = owned.fence.lock();
        let window = &mut state.holder;
        if window.ceiling < floor {
            (window.ceiling, window.next, window.raised_next) = (floor, first, first);
        }
        Ok(())
    }

    /// Stops owning `tag` (deleted): its lease is given back, its mark stays, so a tag
    /// created again under the name starts above every id it had.
    pub async fn release(&self, tag: &Tag) {
        let owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner).remove(tag);
        if let Some(owned) = owned {
            owned.give_up("the tag was deleted").await;
        }
    }

    /// The strict tag `tag` as a row for operators: `max_id` the first id no owner has
    /// reserved (its ceiling, the lease's mark, plus one), `step` 0 (owners reserve windows).
    pub async fn record(&self, tag: &Tag) -> Result<TagRecord, Error> {
        let leases = self.store.list_leases(&lease_space(tag)).await;
        let leases =
            leases.map_err(|e| Error::Unavailable { tag: tag.clone(), reason: e.to_string() })?;
        let mark = leases.iter().map(|lease| lease.mark).max().unwrap_or(0);
        Ok(TagRecord {
            tag: tag.clone(),
            max_id: mark + 1,
            step: 0,
            description: String::new(),
            update_time_s: 0,
        })
    }

    /// Who serves the tag named `name` as far as this node knows: this node while it holds
    /// the tag's lease, else the owner its last forward went to. A hint for clients (the
    /// owner may change at any time; any node still answers in order), never a decision:
    /// `None` when unknown.
    pub fn owner(&self, name: &str) -> Option<Owner> {
        {
            let owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner);
            if owned.get(name).is_some_and(|entry| entry.serving(self.clock.now_ms())) {
                return Some(Owner::This);
            }
        }
        let routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
        let (peer, token) = routes.get(name)?;
        (*token != CLAIM_TOKEN).then(|| Owner::Other(peer.clone()))
    }

    /// This node as its peers reach it.
    pub fn peer(&self) -> &Peer {
        &self.config.peer
    }

    /// The tags this node owns now.
    pub fn owned_tags(&self) -> Vec<Tag> {
        let owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner);
        owned.values().filter(|o| o.serving(self.clock.now_ms())).map(|o| o.tag.clone()).collect()
    }

    /// Stops serving and gives every lease back (the marks stay, so the next owner starts
    /// above them), then waits for the renewal tasks.
    pub async fn shutdown(&self) {
        self.cancel.cancel();
        let owned: Vec<Arc<Owned>> = {
            let mut map = self.owned.lock().unwrap_or_else(PoisonError::into_inner);
            map.drain().map(|(_, owned)| owned).collect()
        };
        for owned in owned {
            owned.give_up("the node is shutting down").await;
        }
        self.members.leave().await;
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Where a take of `tag` goes: here when this node owns it (acquiring it when no live
    /// node does), else the owner.
    async fn route(self: &Arc<Self>, tag: &Tag, claiming: bool) -> Result<Route, Error> {
        self.join().await;
        // A lease given back or expired is taken once the store's margin passed: the take
        // waits that out (the failover gap), up to one TTL and margin more.
        let wait_ms = self.config.lease_ttl_ms + self.config.lease_margin_ms;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
        loop {
            if self.cancel.is_cancelled() {
                return Err(Error::ShuttingDown);
            }
            let reason = match self.try_route(tag, claiming).await? {
                Ok(route) => return Ok(route),
                Err(reason) => reason,
            };
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Unavailable { tag: tag.clone(), reason });
            }
            tokio::time::sleep(Duration::from_millis(ROUTE_RETRY_MS)).await;
        }
    }

    /// One attempt of [`StrictTags::route`]: the route, or why to wait and try again. A tag
    /// no live node holds is taken here when this node is its home, or `claiming` (sent
    /// here as its home), else its home is asked to take it.
    async fn try_route(
        self: &Arc<Self>,
        tag: &Tag,
        claiming: bool,
    ) -> Result<Result<Route, String>, Error> {
        if let Held::Serving(owned) = self.owned_now(tag) {
            return Ok(Ok(Route::Here(owned)));
        }
        if !claiming {
            let known =
                self.routes.lock().unwrap_or_else(PoisonError::into_inner).get(tag).cloned();
            if let Some((peer, fence)) = known {
                return Ok(Ok(Route::Peer(peer, fence)));
            }
        }
        let _one = self.acquiring.lock().await;
        match self.owned_now(tag) {
            Held::Serving(owned) => return Ok(Ok(Route::Here(owned))),
            Held::Renewing => {
                return Ok(Err("this node's lease of the tag is being renewed".to_string()));
            }
            Held::No => {}
        }
        let unavailable = |reason: String| Error::Unavailable { tag: tag.clone(), reason };
        let space = lease_space(tag);
        let store_now =
            bounded(self.store.now_ms()).await.map_err(|e| unavailable(e.to_string()))?;
        let records = bounded(self.store.list_leases(&space))
            .await
            .map_err(|e| unavailable(e.to_string()))?;
        // The store's clock decides whether a holder is live, never this node's.
        if let Some(live) = records.iter().find(|r| r.expires_ms > store_now) {
            if live.holder == self.config.peer.grpc_url {
                return Ok(Err(format!(
                    "an earlier run of this node ({}) still holds the tag's lease; it is served \
                     again once that lease expires",
                    live.holder
                )));
            }
            let peer = Peer { grpc_url: live.holder.clone() };
            let mut routes = self.routes.lock().unwrap_or_else(PoisonError::into_inner);
            routes.insert(tag.clone(), (peer.clone(), live.token));
            return Ok(Ok(Route::Peer(peer, live.token)));
        }
        let home = self.members.home(tag);
        if !claiming && home != self.config.peer.grpc_url && self.members.is_live(&home) {
            return Ok(Ok(Route::Peer(Peer { grpc_url: home }, CLAIM_TOKEN)));
        }
        // Only a tag still recorded strict is taken (it may have been deleted meanwhile); the
        // oracle has no record.
        if *tag != tso_tag() {
            match bounded(self.meta.meta(tag, POLICY_NAME)).await {
                Ok(Some(policy)) if policy == POLICY_STRICT => {}
                Ok(_) => return Err(Error::UnknownTag(tag.clone())),
                Err(error) => return Err(unavailable(error.to_string())),
            }
        }
        let recorded =
            recorded_ceiling(&*self.meta, tag).await.map_err(|e| unavailable(e.to_string()))?;
        // The witness saw every ceiling of every owner, whatever became of this store.
        let mut witnessed = 0;
        if let Some(witness) = &self.config.witness {
            let raised = bounded(witness.raise(tag, 0)).await;
            witnessed = raised.map_err(|e| unavailable(format!("the witness: {e}")))?;
        }
        let floor = recorded.max(witnessed);
        let asked_ms = self.clock.now_ms();
        let request = self.lease_request(space);
        let lease = match bounded(Fence::<Window>::acquire(&*self.store, &request)).await {
            Ok(lease) => lease,
            // Another node took it meanwhile, or the last holder's margin has not passed.
            Err(StoreError::NoWorkerIdInRange { .. } | StoreError::WorkersExhausted { .. }) => {
                return Ok(Err("the tag's last owner's lease has not passed its margin yet, or \
                               another node is taking it over now"
                    .to_string()));
            }
            Err(error) => return Err(unavailable(error.to_string())),
        };
        if witnessed > recorded.max(lease.mark) {
            tracing::warn!(
                %tag, witness_mark = witnessed, store_mark = recorded.max(lease.mark),
                "the store's ceiling of the strict tag is behind the witness's mark (a store \
                 restored from an older backup?): this owner starts above the witness's mark"
            );
        }
        let owned = Arc::new(self.own(tag, lease, asked_ms, floor)?);
        if self.cancel.is_cancelled() {
            owned.give_up("the node is shutting down").await;
            return Err(Error::ShuttingDown);
        }
        self.owned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(tag.clone(), owned.clone());
        self.spawn_renewal(Arc::downgrade(&owned));
        tracing::info!(%tag, holder = %self.config.peer.grpc_url, "strict tag owned here");
        Ok(Ok(Route::Here(owned)))
    }

    /// The tag's lease acquired at `asked_ms` as an owned tag: it serves above the lease's
    /// mark and above `floor`, the ceiling recorded in the tag metadata (a lease row deleted
    /// since keeps that one), raising the mark past both before its first id.
    /// The oracle's ceiling is a time: it starts at the first timestamp above it.
    fn own(&self, tag: &Tag, lease: Lease, asked_ms: u64, floor: u64) -> Result<Owned, Error> {
        let mark = lease.mark;
        let time = *tag == tso_tag();
        let next = match time {
            false => mark.max(floor) + 1,
            true => tso::first_above(mark.max(floor)).ok_or_else(|| {
                let (max_id, step) = (mark.max(floor), 1);
                Error::Store(StoreError::Exhausted { tag: tag.clone(), max_id, step })
            })?,
        };
        let window = Window {
            time,
            next,
            ceiling: mark,
            raised_ms: asked_ms,
            raised_next: next,
            stopped: false,
        };
        let ttl = self.config.lease_ttl_ms;
        let fence = Fence::leased(
            (Arc::clone(&self.store), "strict tag lease"),
            lease,
            (ttl, 0, asked_ms),
            window,
        );
        let since_ms = self.clock.now_ms();
        Ok(Owned { tag: tag.clone(), since_ms, fence, raising: tokio::sync::Mutex::new(()) })
    }

    fn lease_request(&self, space: WorkerSpace) -> LeaseRequest {
        LeaseRequest {
            space,
            min_worker: 0,
            max_worker: 0,
            holder: self.config.peer.grpc_url.clone(),
            ttl_ms: self.config.lease_ttl_ms,
            margin_ms: self.config.lease_margin_ms,
            mark_max: STRICT_ID_MAX,
        }
    }

    /// Whether this node holds `tag`: serving (the gate open), renewing (the gate closed by
    /// time while the lease is still held: its renewal may open it again), or not.
    fn owned_now(&self, tag: &Tag) -> Held {
        let mut owned = self.owned.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = owned.get(tag) else { return Held::No };
        if entry.serving(self.clock.now_ms()) || self.serves_unproven(entry) {
            return Held::Serving(Arc::clone(entry));
        }
        let renewing = {
            let state = entry.fence.lock();
            state.lease.is_some() && !state.holder.stopped
        };
        if renewing {
            return Held::Renewing;
        }
        // Lost or given up: forget it; the next take finds the tag's owner again.
        owned.remove(tag);
        Held::No
    }

    /// Whether `owned` is served although its lease is not proven: only with the unsafe
    /// setting, and only while its window has room below the ceiling.
    fn serves_unproven(&self, owned: &Owned) -> bool {
        let window = owned.fence.lock().holder;
        self.config.unsafe_ignore_lease_loss && window.need_next() <= window.ceiling
    }

    /// Takes `count` ids on this node, raising the ceiling first when they pass it.
    async fn take_here(&self, owned: &Arc<Owned>, count: Count) -> Result<IdRange, Error> {
        let unavailable = |reason: String| Error::Unavailable { tag: owned.tag.clone(), reason };
        loop {
            let now_ms = self.clock.now_ms();
            let need = {
                let mut state = owned.fence.lock();
                let unproven = !owned.fence.open_at(now_ms) || state.holder.stopped;
                if unproven && !self.config.unsafe_ignore_lease_loss {
                    return Err(unavailable(format!(
                        "this node no longer owns the tag: {}",
                        Fence::reason(&state)
                    )));
                }
                let window = &mut state.holder;
                let exhausted = |window: &Window| {
                    let (tag, max_id, step) = (owned.tag.clone(), window.next - 1, count.get());
                    Err(Error::Store(StoreError::Exhausted { tag, max_id, step }))
                };
                let granted = if window.time {
                    let now_ms = self.wall.now_ms();
                    match tso::take(window.next, window.ceiling, now_ms, count.get()) {
                        tso::Take::Granted { first } => Ok(first),
                        tso::Take::Raise { need_ms } => Err(need_ms),
                        tso::Take::Exhausted => return exhausted(window),
                    }
                } else {
                    let last = window.next.checked_add(count.get() - 1);
                    let Some(last) = last.filter(|l| *l <= STRICT_ID_MAX) else {
                        return exhausted(window);
                    };
                    if last <= window.ceiling { Ok(window.next) } else { Err(last) }
                };
                match granted {
                    Ok(first) => {
                        let range = IdRange::new(first, first + count.get()).ok_or_else(|| {
                            unavailable(format!("{first} + {} passes the largest id", count.get()))
                        })?;
                        window.next = range.end();
                        let low = window.low();
                        drop(state);
                        if low {
                            self.raise_soon(owned);
                        }
                        return Ok(range);
                    }
                    Err(need) => need,
                }
            };
            self.raise(owned, need).await.map_err(|e| unavailable(e.to_string()))?;
        }
    }

    /// Raises `owned`'s ceiling in the background (a take that passes it waits for it).
    fn raise_soon(&self, owned: &Arc<Owned>) {
        if owned.raising.try_lock().is_err() {
            return;
        }
        let owned = Arc::clone(owned);
        let (clock, wall) = (Arc::clone(&self.clock), Arc::clone(&self.wall));
        let (meta, witness) = (Arc::clone(&self.meta), self.config.witness.clone());
        self.tasks.spawn(async move {
            let need = owned.fence.lock().holder.need_next();
            let stores = (&*meta, witness.as_ref());
            if let Err(error) = raise_ceiling(&owned, stores, need, (&*clock, &*wall)).await {
                tracing::warn!(tag = %owned.tag, %error, "strict tag's ceiling not raised ahead");
            }
        });
    }

    /// Raises `owned`'s ceiling to at least `need` plus a window.
    async fn raise(&self, owned: &Owned, need: u64) -> Result<(), StoreError> {
        let stores = (&*self.meta, self.config.witness.as_ref());
        raise_ceiling(owned, stores, need, (&*self.clock, &*self.wall)).await
    }

    /// Renews `owned`'s lease every third of its TTL until it is lost, given up or the
    /// engine stops.
    fn spawn_renewal(&self, owned: Weak<Owned>) {
        let period = Duration::from_millis((self.config.lease_ttl_ms / 3).max(1));
        let (cancel, clock) = (self.cancel.clone(), Arc::clone(&self.clock));
        let meta = Arc::clone(&self.meta);
        let (members, me) = (Arc::clone(&self.members), self.config.peer.grpc_url.clone());
        // A tag stays at least two TTLs with an owner before it moves home: views of the
        // members that differ for a moment do not bounce it.
        let settled_ms = self.config.lease_ttl_ms * 2;
        self.tasks.spawn(async move {
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = tokio::time::sleep(period) => {}
                }
                let Some(owned) = owned.upgrade() else { return };
                let home = members.home(&owned.tag);
                if home != me
                    && members.is_live(&home)
                    && clock.now_ms().saturating_sub(owned.since_ms) >= settled_ms
                {
                    tracing::info!(tag = %owned.tag, %home, "strict tag handed over to its home");
                    owned.give_up("the tag moves to its home node").await;
                    return;
                }
                if owned.fence.lock().lease.is_none() {
                    return;
                }
                // A tag deleted on another node is given up here (a store that does not answer
                // leaves it to the renewal, which fails alike).
                let time = owned.fence.lock().holder.time;
                if !time
                    && let Ok(policy) = meta.meta(&owned.tag, POLICY_NAME).await
                    && policy.as_deref() != Some(POLICY_STRICT)
                {
                    owned.give_up("the tag is no longer strict: it was deleted").await;
                    return;
                }
                // No lease to acquire here: a lost tag is found again by the next take.
                let request = |_| unreachable_request();
                let stop = |window: &mut Window| window.stopped = true;
                let renewal = owned.fence.renew(request, &*clock, stop);
                let limit = Duration::from_millis(idmint_core::limits::STORE_CALL_TIMEOUT_MS_DEFAULT);
                let Ok(Some(renewal)) = tokio::time::timeout(limit, renewal).await else {
                    continue;
                };
                let behind = {
                    let mut state = owned.fence.lock();
                    if state.holder.stopped {
                        continue;
                    }
                    let ceiling = state.holder.ceiling;
                    let lease = renewal.lease.clone();
                    owned.fence.install(&mut state, renewal.lease, renewal.until_ms);
                    (lease.mark < ceiling).then_some((lease, ceiling))
                };
                // The row's mark went back under this holding (restored from a backup): put
                // it back before a later owner could inherit it.
                if let Some((lease, ceiling)) = behind {
                    tracing::error!(tag = %owned.tag, mark = lease.mark, ceiling, "strict tag's lease mark went back; raising it again");
                    let raised = owned.fence.raise(&lease, ceiling, |w| w.stopped = true);
                    let _ = bounded(raised).await;
                }
            }
        });
    }
}

impl Drop for StrictTags {
    /// Dropped without [`StrictTags::shutdown`] (as a crash would end it): the renewals stop,
    /// so the leases run out and other nodes take the tags over.
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The request a renewal never makes: a strict tag's lease is acquired only by a take.
fn unreachable_request() -> LeaseRequest {
    unreachable!("a renewal runs only while a lease is held")
}

/// Raises `owned`'s ceiling to at least `need` plus a window sized from the measured rate
/// (the oracle's: a time, at least the node's clock, plus [`TSO_WINDOW_MS`]), under the
/// lease's token; one raise at a time, and none when another already covered it.
async fn raise_ceiling(
    owned: &Owned,
    (meta, witness): (&dyn TagMetaStore, Option<&crate::witness::Witness>),
    need: u64,
    (clock, wall): (&dyn Clock, &dyn Clock),
) -> Result<(), StoreError> {
    let _one = owned.raising.lock().await;
    let now_ms = clock.now_ms();
    let (lease, target) = {
        let state = owned.fence.lock();
        let window = &state.holder;
        if window.stopped {
            return Err(StoreError::Unavailable("the tag's lease was given up".into()));
        }
        let need = if window.time { need.max(wall.now_ms()) } else { need };
        if need <= window.ceiling && window.ceiling - need >= window.size() / 2 {
            return Ok(());
        }
        let Some(lease) = state.lease.clone() else {
            return Err(StoreError::Unavailable(Fence::reason(&state)));
        };
        let ahead = if window.time { TSO_WINDOW_MS } else { window.next_size(now_ms) };
        let target = need.max(window.ceiling).saturating_add(ahead);
        (lease, target.min(STRICT_ID_MAX))
    };
    bounded(owned.fence.raise(&lease, target, |window| window.stopped = true)).await?;
    // Recorded beside the mark before any id below it is served: a lease row deleted later
    // still leaves it; and in the witness, which a restored store does not take back.
    record_ceiling(meta, &owned.tag, target).await?;
    if let Some(witness) = witness {
        bounded(witness.raise(&owned.tag, target)).await?;
    }
    let mut state = owned.fence.lock();
    let held = state.lease.as_ref().is_some_and(|l| l.fence_token() == lease.fence_token());
    let window = &mut state.holder;
    // Raised under the token still held: the ids up to `target` are this holding's.
    if held && !window.stopped {
        window.ceiling = window.ceiling.max(target);
        window.raised_ms = now_ms;
        window.raised_next = window.next;
    }
    Ok(())
}

impl Owned {
    /// Whether the owner may hand out ids at `now_ms`.
    fn serving(&self, now_ms: u64) -> bool {
        self.fence.open_at(now_ms) && !self.fence.lock().holder.stopped
    }

    /// Stops handing out ids and gives the lease back (its mark stays).
    async fn give_up(&self, reason: &str) {
        let lease = {
            let mut state = self.fence.lock();
            state.holder.stopped = true;
            self.fence.close(&mut state, reason)
        };
        if let Some(lease) = lease {
            self.fence.release(lease).await;
        }
    }
}

impl Window {
    /// The ids the last raise reserved ahead (at least [`WINDOW_MIN`]); the oracle's
    /// milliseconds, [`TSO_WINDOW_MS`].
    fn size(&self) -> u64 {
        if self.time {
            return TSO_WINDOW_MS;
        }
        (self.ceiling.saturating_sub(self.raised_next) + 1).max(WINDOW_MIN)
    }

    /// What the next take needs under the ceiling: its first id, or the oracle's millisecond.
    fn need_next(&self) -> u64 {
        if self.time { tso::split(self.next).0 } else { self.next }
    }

    /// Whether less than half a window is left above what was handed out: a raise starts in
    /// the background.
    fn low(&self) -> bool {
        let used = self.need_next().saturating_sub(1);
        self.ceiling.saturating_sub(used) < self.size() / 2
    }

    /// The next window: what the tag took since the last raise, scaled to
    /// [`WINDOW_TARGET_MS`], within [`WINDOW_MIN`]..=[`WINDOW_MAX`].
    fn next_size(&self, now_ms: u64) -> u64 {
        let taken = self.next.saturating_sub(self.raised_next);
        let elapsed = now_ms.saturating_sub(self.raised_ms).max(1);
        let at_rate = taken.saturating_mul(WINDOW_TARGET_MS) / elapsed;
        at_rate.clamp(WINDOW_MIN, WINDOW_MAX)
    }
}
