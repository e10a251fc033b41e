//! [`RemoteStore`]: idmint servers seen as a segment store, so the proven engine
//! (`idmint::Segments`: double buffer, single-flight refill, pacing, bounded waits, freeze and
//! give-back) serves ids in the client's process.
//!
//! - `allocate(tag, step)` is one lease: NextRange with `count = min(max(step, min_lease),
//!   batch limit)`. When a server answers several ranges, the first is the allocation and the
//!   others wait (at most [`QUEUED_LEASES_MAX`] per tag) for the next allocations, without a
//!   call.
//! - Across servers a tag's ranges are unique but not ordered: after a failover the new
//!   server may lease ranges below ids this client already served, which the engine's buffer
//!   would refuse. So the store keeps per tag the highest lease end it returned (the *mark*)
//!   and skips leases wholly below it (wasted, never served), asking again with the largest
//!   count to pass them fast, at most [`ALLOCATE_ROUNDS_MAX`] rounds. Ranges from one store
//!   are disjoint, so a lease lies wholly below or wholly above the mark; each client's ids
//!   stay increasing per tag across failovers.
//! - `compare_and_set_max_id(tag, expected, new)` with `new < expected` is the engine's
//!   give-back at close: ReturnRange for `[new, expected)` with the leases covering it, sent
//!   to the server that leased them (the recent leases of each tag are remembered with their
//!   server, at most [`RECENT_LEASES_MAX`]). `Ok(true)` only when every id was taken back.
//!   With `new > expected` (the engine jumping past a regression) it answers `Ok(true)`
//!   without a call: the mark already keeps leases above what was served.
//! - The admin calls are refused (use the server's admin API); `get_tag` answers `None`;
//!   `list_tags` answers the tags this client serves, so the engine's refresh keeps them.
//!
//! A caller error (formatted tag, no token, …) reaches the engine as `TagNotFound`, which
//! stops its refill retries for the tag; the typed error is kept here, and the client
//! reports it ([`RemoteStore::caller_error`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use idmint_core::limits::{BATCH_COUNT_MAX, TAG_COUNT_MAX};
use idmint_core::{IdRange, Step, Tag};
use idmint_store::{Allocation, RangeStore, StoreError, TagRecord};
use tokio::time::Instant;

use crate::endpoints::Endpoints;
use crate::error::ClientError;
use crate::limits::{ALLOCATE_ROUNDS_MAX, QUEUED_LEASES_MAX, RECENT_LEASES_MAX};
use crate::wire::{NextRange, Ping, ReturnRange, WireLease};

/// idmint servers as a segment store: see the module documentation.
pub(crate) struct RemoteStore {
    endpoints: Arc<Endpoints>,
    /// The engine's tag step: no lease asks for fewer ids.
    min_lease: u64,
    /// Bound on one store call with its retries.
    deadline: Duration,
    /// The largest count the servers accept (learnt from `bad_count` answers).
    count_max: AtomicU64,
    /// Set by the close: no more leases.
    closing: AtomicBool,
    tags: Mutex<HashMap<Tag, TagLeases>>,
}

/// What the client knows of one tag's leases.
#[derive(Debug, Default)]
struct TagLeases {
    /// The highest lease end returned to the engine: leases below it are never returned.
    mark: u64,
    /// Leases answered but not yet returned, increasing.
    queued: VecDeque<Held>,
    /// Leases returned to the engine, increasing, the newest last.
    recent: VecDeque<Held>,
    /// The last caller error a lease request of this tag met, cleared by a lease.
    caller_error: Option<ClientError>,
    /// Whether skipping leases below the mark was logged since the last lease.
    skip_logged: bool,
}

/// What became of the leases a server answered.
enum Accepted {
    /// The first lease above the mark, for the engine.
    Range(IdRange),
    /// Every lease lay below the mark: skipped.
    AllBelow,
    /// The tag is new and the client already tracks `TAG_COUNT_MAX` tags.
    Full,
}

/// A lease and the server that gave it.
#[derive(Debug, Clone, Copy)]
struct Held {
    lease: WireLease,
    endpoint: usize,
}

impl RemoteStore {
    pub(crate) fn new(
        endpoints: Arc<Endpoints>,
        min_lease: u64,
        deadline: Duration,
    ) -> RemoteStore {
        RemoteStore {
            endpoints,
            min_lease,
            deadline,
            count_max: AtomicU64::new(BATCH_COUNT_MAX),
            closing: AtomicBool::new(false),
            tags: Mutex::default(),
        }
    }

    /// Records that the client serves `tag`, so the engine's refresh keeps it.
    pub(crate) fn serve(&self, tag: &Tag) {
        let mut tags = self.tags();
        if tags.len() < TAG_COUNT_MAX {
            tags.entry(tag.clone()).or_default();
        }
    }

    /// The caller error the last lease request of `tag` met, if any: what the engine's
    /// "unknown tag" stands for.
    pub(crate) fn caller_error(&self, tag: &Tag) -> Option<ClientError> {
        self.tags().get(tag).and_then(|t| t.caller_error.clone())
    }

    /// Refuses every later allocation: the client is closing.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::Release);
    }

    /// Gives back every queued lease of every tag (after the engine's own give-back, for
    /// tags whose buffer had nothing left to give).
    pub(crate) async fn return_all_queued(&self) {
        let tags: Vec<Tag> = self
            .tags()
            .iter()
            .filter(|(_, t)| !t.queued.is_empty())
            .map(|(k, _)| k.clone())
            .collect();
        for tag in tags {
            self.return_queued(&tag).await;
        }
    }

    /// Hands out a queued lease of `tag` above the mark, if there is one.
    fn pop_queued(&self, tag: &Tag) -> Option<IdRange> {
        let mut tags = self.tags();
        let state = tags.get_mut(tag)?;
        while let Some(held) = state.queued.pop_front() {
            if held.lease.end > state.mark {
                return Some(state.hand_out(held));
            }
        }
        None
    }

    /// Takes the leases a server answered: skips those below the mark, hands out the first
    /// of the others and queues the rest.
    fn accept(&self, tag: &Tag, leases: Vec<WireLease>, endpoint: usize) -> Accepted {
        let mut tags = self.tags();
        if !tags.contains_key(tag) && tags.len() >= TAG_COUNT_MAX {
            // Make room: tags that only hold a caller error (never served) go first.
            tags.retain(|_, t| t.mark > 0 || !t.queued.is_empty());
            if tags.len() >= TAG_COUNT_MAX {
                // Refused rather than served without a mark.
                return Accepted::Full;
            }
        }
        let state = tags.entry(tag.clone()).or_default();
        let (below, above): (Vec<WireLease>, Vec<WireLease>) =
            leases.into_iter().partition(|l| l.end <= state.mark);
        if !below.is_empty() && !state.skip_logged {
            state.skip_logged = true;
            tracing::info!(
                %tag, mark = state.mark, first = below[0].start, skipped = below.len(),
                "a server leased ids below those this client already served (after a failover); \
                 skipping them so the client's ids keep increasing"
            );
        }
        let mut above = above.into_iter();
        let Some(first) = above.next() else { return Accepted::AllBelow };
        for lease in above {
            if state.queued.len() < QUEUED_LEASES_MAX {
                state.queued.push_back(Held { lease, endpoint });
            } else {
                tracing::debug!(%tag, start = lease.start, end = lease.end, "lease queue full; range dropped");
            }
        }
        state.caller_error = None;
        state.skip_logged = false;
        Accepted::Range(state.hand_out(Held { lease: first, endpoint }))
    }

    /// Records a failed lease request; the error the engine sees.
    fn failed(&self, tag: &Tag, error: ClientError) -> StoreError {
        let mut tags = self.tags();
        match error {
            ClientError::Unavailable { reason } => StoreError::Unavailable(reason),
            ClientError::ShuttingDown => StoreError::Unavailable(error.to_string()),
            ClientError::UnknownTag { .. } => {
                // Nothing to remember of a tag that is not there, unless ids are held.
                if tags.get(tag).is_some_and(|t| t.recent.is_empty() && t.queued.is_empty()) {
                    tags.remove(tag);
                } else if let Some(state) = tags.get_mut(tag) {
                    state.caller_error = Some(error);
                }
                StoreError::TagNotFound(tag.clone())
            }
            caller => {
                if let Some(state) = tags.get_mut(tag) {
                    state.caller_error = Some(caller);
                } else if tags.len() < TAG_COUNT_MAX {
                    tags.insert(
                        tag.clone(),
                        TagLeases { caller_error: Some(caller), ..TagLeases::default() },
                    );
                }
                StoreError::TagNotFound(tag.clone())
            }
        }
    }

    /// Gives `tag`'s queued leases back, highest first, each to its server.
    async fn return_queued(&self, tag: &Tag) {
        let queued: Vec<Held> = match self.tags().get_mut(tag) {
            Some(state) => state.queued.drain(..).collect(),
            None => return,
        };
        let deadline = Instant::now() + self.deadline;
        for held in queued.iter().rev() {
            let op = ReturnRange {
                tag: tag.as_str(),
                start: held.lease.start,
                end: held.lease.end,
                leases: std::slice::from_ref(&held.lease),
            };
            match self.endpoints.call_at(held.endpoint, &op, deadline).await {
                Ok(returned) => {
                    tracing::debug!(%tag, start = op.start, end = op.end, returned, "queued lease given back")
                }
                Err(error) => tracing::debug!(%tag, %error, "queued lease not given back"),
            }
        }
    }

    /// Gives `[new, expected)` back to the servers that leased it. Whether every id was
    /// taken back.
    async fn give_back(&self, tag: &Tag, new: u64, expected: u64) -> bool {
        // Queued leases lie above the tail: a server takes back only the last ids it handed
        // out, so they go first.
        self.return_queued(tag).await;
        let Some(groups) = self.covering(tag, new, expected) else {
            tracing::debug!(%tag, new, expected, "give-back not covered by the leases remembered");
            return false;
        };
        let deadline = Instant::now() + self.deadline;
        let mut returned = 0;
        // Highest first, each group to the server that leased it.
        for (endpoint, leases) in groups.iter().rev() {
            let start = leases[0].start.max(new);
            let end = leases[leases.len() - 1].end.min(expected);
            let op = ReturnRange { tag: tag.as_str(), start, end, leases };
            match self.endpoints.call_at(*endpoint, &op, deadline).await {
                Ok(n) => returned += n,
                Err(error) => {
                    tracing::info!(%tag, server = self.endpoints.url(*endpoint), %error, ids = end - start, "unused ids not given back");
                }
            }
        }
        returned == expected - new
    }

    /// The remembered leases covering `[new, expected)`, contiguous, as runs of one server
    /// each, increasing; removed from memory (a give-back is never sent twice).
    fn covering(&self, tag: &Tag, new: u64, expected: u64) -> Option<Vec<(usize, Vec<WireLease>)>> {
        let mut tags = self.tags();
        let recent = &mut tags.get_mut(tag)?.recent;
        let top = recent.iter().rposition(|h| h.lease.end == expected)?;
        let mut bottom = top;
        while recent[bottom].lease.start > new {
            let below = bottom.checked_sub(1)?;
            if recent[below].lease.end != recent[bottom].lease.start {
                return None;
            }
            bottom = below;
        }
        let mut groups: Vec<(usize, Vec<WireLease>)> = Vec::new();
        for held in recent.drain(bottom..=top) {
            match groups.last_mut() {
                Some((endpoint, leases)) if *endpoint == held.endpoint => leases.push(held.lease),
                _ => groups.push((held.endpoint, vec![held.lease])),
            }
        }
        Some(groups)
    }

    fn tags(&self) -> MutexGuard<'_, HashMap<Tag, TagLeases>> {
        // Every update below keeps the map consistent at each step.
        self.tags.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl TagLeases {
    /// Returns `held` to the engine: raises the mark, remembers the lease. A lease that
    /// straddles the mark (impossible from one store) is cut to the ids above it.
    fn hand_out(&mut self, held: Held) -> IdRange {
        let start = held.lease.start.max(self.mark);
        if start > held.lease.start {
            tracing::error!(
                start = held.lease.start,
                end = held.lease.end,
                mark = self.mark,
                "a lease overlaps ids already served; serving only the ids above them"
            );
        }
        self.mark = held.lease.end;
        if self.recent.len() == RECENT_LEASES_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back(held);
        // Cannot fail: start < end (checked when the answer arrived, and end > mark).
        IdRange::new(start, held.lease.end)
            .unwrap_or_else(|| unreachable_range(start, held.lease.end))
    }
}

#[cold]
fn unreachable_range(start: u64, end: u64) -> IdRange {
    panic!("lease [{start}, {end}) is empty after the mark check; refusing to continue")
}

#[async_trait]
impl RangeStore for RemoteStore {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        if self.closing.load(Ordering::Acquire) {
            return Err(StoreError::Unavailable("the client is closing".to_string()));
        }
        let tag_step = self.min_lease;
        if let Some(range) = self.pop_queued(tag) {
            return Ok(Allocation { range, tag_step });
        }
        let deadline = Instant::now() + self.deadline;
        let wanted = step.map_or(self.min_lease, Step::get).max(self.min_lease);
        let mut count = wanted.min(self.count_max.load(Ordering::Relaxed));
        for _ in 0..ALLOCATE_ROUNDS_MAX {
            let op = NextRange { tag: tag.as_str(), count };
            match self.endpoints.call(&op, deadline).await {
                Ok((leases, endpoint)) => match self.accept(tag, leases, endpoint) {
                    Accepted::Range(range) => return Ok(Allocation { range, tag_step }),
                    // All below the mark: pass them fast.
                    Accepted::AllBelow => count = self.count_max.load(Ordering::Relaxed),
                    Accepted::Full => {
                        return Err(StoreError::Unavailable(format!(
                            "this client already serves {TAG_COUNT_MAX} tags, the most it serves"
                        )));
                    }
                },
                Err(ClientError::InvalidArgument { code, .. })
                    if code == "bad_count" && count > 1 =>
                {
                    // A server with a lower batch limit: learn it, ask for less.
                    count = (count / 4).max(1);
                    self.count_max.fetch_min(count, Ordering::Relaxed);
                    tracing::info!(count, "a server refused the lease size; asking for fewer ids");
                }
                Err(error) => return Err(self.failed(tag, error)),
            }
        }
        Err(StoreError::Unavailable(format!(
            "{ALLOCATE_ROUNDS_MAX} lease requests for tag {tag} in a row answered ranges below \
             the ids this client already served (a failover to a server that holds older \
             ranges); retrying"
        )))
    }

    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        if new >= expected {
            // The engine jumping past a regression: the mark already keeps later leases above
            // every id served.
            return Ok(true);
        }
        Ok(self.give_back(tag, new, expected).await)
    }

    async fn get_tag(&self, _tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        Ok(None)
    }

    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        let tags = self.tags();
        let mut records: Vec<TagRecord> = tags
            .iter()
            .map(|(tag, t)| TagRecord {
                tag: tag.clone(),
                max_id: t.mark,
                step: self.min_lease,
                description: String::new(),
                update_time_s: 0,
            })
            .collect();
        records.sort_by(|a, b| a.tag.cmp(&b.tag));
        Ok(records)
    }

    async fn tombstone(&self, _tag: &Tag) -> Result<Option<u64>, StoreError> {
        // Tombstones live in the servers' store; the client deletes and creates nothing.
        Ok(None)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        let deadline = Instant::now() + self.deadline;
        match self.endpoints.call(&Ping, deadline).await {
            Ok(((), _)) => Ok(()),
            Err(error) => Err(StoreError::Unavailable(error.to_string())),
        }
    }

    fn describe(&self) -> String {
        self.endpoints.describe()
    }
}
