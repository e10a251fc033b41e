//! Residue interleaving over N stores: one tag served from several databases at once, so
//! losing one does not stop the tag ([`InterleavedStore`]).
//!
//! Each source hands out *tickets*, block numbers of its own residue (`idmint_core::residue`):
//! a Flicker database's auto-increment (`flicker.rs`), or a segment store's allocation of
//! `N × block` ids, which holds exactly one block of its residue ([`StoreSource`]). A tag's
//! `block` (the ids one round trip yields) is fixed when the tag is created: the residues
//! only stay disjoint while every source cuts the id space the same way, so changing it is
//! refused.
//!
//! Allocation goes round-robin across the sources and skips a source that failed recently
//! (retrying it after a backoff). Each call to a source is bounded by
//! [`SOURCE_CALL_TIMEOUT_MS`], so a source that hangs costs one bounded wait, not the
//! engine's whole store timeout. A lagging source (it was down while the others moved on)
//! would hand out lower blocks than the ones this process already returned: it is raised
//! past them first, so the blocks of one tag leave this store increasing.
//!
//! A ticket once taken is consumed: ids cannot be given back, so a lowering
//! `compare_and_set_max_id` answers `false`; a raising one raises every source.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use idmint_core::residue::{block_ids, block_in_range, ticket_at_or_above};
use idmint_core::{Step, Tag};
use tokio::time::Instant;

use crate::url::INTERLEAVE_SOURCES_MAX;
use crate::{
    Allocation, RangeStore, SegmentStore, StoreError, TagRecord, TagSpec, check_new_max_id,
};

/// Bound on one call to one source; a source that does not answer in time is skipped like
/// one that is down.
pub const SOURCE_CALL_TIMEOUT_MS: u64 = 1_000;
/// How long a source that failed is skipped at first; doubles with every failure in a row.
pub const SOURCE_BACKOFF_MS_MIN: u64 = 250;
/// Longest a failed source is skipped before it is tried again.
pub const SOURCE_BACKOFF_MS_MAX: u64 = 5_000;

/// Read-then-compare-and-set rounds a raise of a segment store makes before giving up.
const RAISE_ROUNDS_MAX: u32 = 16;

const _: () = assert!(SOURCE_BACKOFF_MS_MIN <= SOURCE_BACKOFF_MS_MAX);
// One failing source and a healthy one answer within the engine's default store timeout.
const _: () =
    assert!(2 * SOURCE_CALL_TIMEOUT_MS < idmint_core::limits::STORE_CALL_TIMEOUT_MS_DEFAULT);

/// One of the stores behind an [`InterleavedStore`]: it hands out tickets of its residue.
#[async_trait]
pub(crate) trait TicketSource: Send + Sync + 'static {
    /// The next ticket of `tag` whose blocks hold `block` ids: a block number of this
    /// source's residue, never handed out before by this source. At least 1.
    async fn next_ticket(&self, tag: &Tag, block: u64) -> Result<u64, StoreError>;

    /// Makes every later [`next_ticket`](TicketSource::next_ticket) of `tag` at least
    /// `ticket`. Never lowers anything.
    async fn raise(&self, tag: &Tag, block: u64, ticket: u64) -> Result<(), StoreError>;

    /// The tag as this source holds it: `step` is the tag's block, `max_id` an id at or above
    /// every id this source's tickets reached so far.
    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError>;

    /// Every tag this source holds, as [`get`](TicketSource::get) shows them.
    async fn list(&self) -> Result<Vec<TagRecord>, StoreError>;

    /// Records `spec.tag` with `spec.step` ids per ticket, its first ticket's block at or
    /// above `spec.start`; [`StoreError::TagExists`] when present.
    async fn create(&self, spec: &TagSpec) -> Result<(), StoreError>;

    /// Forgets `tag`; [`StoreError::TagNotFound`] when absent.
    async fn delete(&self, tag: &Tag) -> Result<(), StoreError>;

    /// Checks that the source answers.
    async fn ping(&self) -> Result<(), StoreError>;

    /// The source's residue (mod the set's modulus).
    fn residue(&self) -> u64;

    /// Where the source lives, without a password.
    fn describe(&self) -> String;
}

/// One tag served from N stores by residue: see the module documentation.
pub struct InterleavedStore {
    kind: &'static str,
    modulus: u64,
    sources: Vec<Box<dyn TicketSource>>,
    health: Vec<Mutex<Health>>,
    /// Where the next allocation starts its round.
    next: AtomicUsize,
    tags: Mutex<HashMap<Tag, TagState>>,
}

/// When a source may be tried again.
#[derive(Debug, Default, Clone, Copy)]
struct Health {
    failures: u32,
    skip_until: Option<Instant>,
}

/// What this process knows of a tag.
#[derive(Debug, Clone)]
struct TagState {
    block: u64,
    /// Every ticket returned from now on is at least this.
    floor: u64,
    /// The last ticket each source gave this process (0: none yet).
    last: Vec<u64>,
}

impl std::fmt::Debug for InterleavedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterleavedStore").field("store", &self.describe()).finish()
    }
}

impl InterleavedStore {
    /// Interleaves segment stores: the store at position `i` of `stores` owns the blocks
    /// `≡ i (mod stores.len())`. Its rows hold `stores.len() × block` as their step, written
    /// by [`create_tag`](SegmentStore::create_tag) here; the list's order and length must
    /// never change once ids were issued.
    pub fn over_stores(stores: Vec<Arc<dyn SegmentStore>>) -> Result<InterleavedStore, StoreError> {
        let modulus = stores.len() as u64;
        let sources = stores
            .into_iter()
            .enumerate()
            .map(|(residue, store)| {
                Box::new(StoreSource { store, residue: residue as u64, modulus })
                    as Box<dyn TicketSource>
            })
            .collect();
        InterleavedStore::new("interleave", modulus, sources)
    }

    /// A set of sources; the residues must be distinct and below `modulus`.
    pub(crate) fn new(
        kind: &'static str,
        modulus: u64,
        sources: Vec<Box<dyn TicketSource>>,
    ) -> Result<InterleavedStore, StoreError> {
        if sources.is_empty() || sources.len() > INTERLEAVE_SOURCES_MAX {
            return Err(StoreError::InvalidValue(format!(
                "{} stores given; interleave 1 to {INTERLEAVE_SOURCES_MAX}",
                sources.len()
            )));
        }
        let mut residues: Vec<u64> = sources.iter().map(|s| s.residue()).collect();
        residues.sort_unstable();
        residues.dedup();
        if residues.len() != sources.len() || residues.iter().any(|r| *r >= modulus) {
            return Err(StoreError::InvalidValue(format!(
                "the stores' residues {:?} are not distinct values below {modulus}: two of \
                 them would hand out the same ids",
                sources.iter().map(|s| s.residue()).collect::<Vec<_>>()
            )));
        }
        Ok(InterleavedStore {
            kind,
            modulus,
            health: sources.iter().map(|_| Mutex::default()).collect(),
            sources,
            next: AtomicUsize::new(0),
            tags: Mutex::default(),
        })
    }

    fn tags(&self) -> MutexGuard<'_, HashMap<Tag, TagState>> {
        self.tags.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn health(&self, source: usize) -> MutexGuard<'_, Health> {
        self.health[source].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The sources in the order this call tries them: round-robin, or for an allocation the
    /// source whose last ticket for the tag is lowest first (while the counters move in step,
    /// that alternates the sources and keeps each one's next ticket above the last one
    /// served, with no raise); the ones skipped after a failure last (still tried, so that a
    /// set whose sources all failed recovers at once).
    fn round(&self, last: Option<&[u64]>) -> Vec<usize> {
        let n = self.sources.len();
        let first = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let now = Instant::now();
        let mut order: Vec<usize> = (0..n).map(|k| (first + k) % n).collect();
        if let Some(last) = last {
            order.sort_by_key(|i| last.get(*i).copied().unwrap_or(0));
        }
        let (mut up, mut skipped): (Vec<usize>, Vec<usize>) = order
            .into_iter()
            .partition(|i| self.health(*i).skip_until.is_none_or(|until| until <= now));
        up.append(&mut skipped);
        up
    }

    fn succeeded(&self, source: usize) {
        *self.health(source) = Health::default();
    }

    fn failed(&self, source: usize, error: &StoreError) {
        let mut health = self.health(source);
        let backoff = SOURCE_BACKOFF_MS_MIN
            .saturating_mul(1 << health.failures.min(16))
            .min(SOURCE_BACKOFF_MS_MAX);
        health.failures = health.failures.saturating_add(1);
        health.skip_until = Some(Instant::now() + Duration::from_millis(backoff));
        if health.failures == 1 {
            tracing::warn!(source = %self.sources[source].describe(), %error, backoff_ms = backoff, "store skipped; the others serve meanwhile");
        }
    }

    /// One call to one source, bounded by [`SOURCE_CALL_TIMEOUT_MS`].
    async fn call<T>(
        &self,
        source: usize,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(Duration::from_millis(SOURCE_CALL_TIMEOUT_MS), call).await {
            Ok(result) => result,
            Err(_elapsed) => Err(StoreError::Unavailable(format!(
                "{} did not answer within {SOURCE_CALL_TIMEOUT_MS} ms",
                self.sources[source].describe()
            ))),
        }
    }

    /// The tag's block and floor, read from the first source that holds the tag when this
    /// process has not seen it yet.
    async fn state(&self, tag: &Tag) -> Result<TagState, StoreError> {
        if let Some(state) = self.tags().get(tag) {
            return Ok(state.clone());
        }
        let record =
            self.get_tag(tag).await?.ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
        let state = TagState { block: record.step, floor: 1, last: vec![0; self.sources.len()] };
        Ok(self.tags().entry(tag.clone()).or_insert(state).clone())
    }

    /// Records that `source` (if any) served `ticket`, and that no later ticket may be below
    /// `floor`.
    fn served(&self, tag: &Tag, source: Option<(usize, u64)>, floor: u64) {
        if let Some(state) = self.tags().get_mut(tag) {
            state.floor = state.floor.max(floor);
            if let Some((source, ticket)) = source {
                state.last[source] = state.last[source].max(ticket);
            }
        }
    }

    /// A ticket from `source` at or above the tag's floor, raising the source first if it
    /// lags.
    async fn ticket_from(&self, source: usize, tag: &Tag, block: u64) -> Result<u64, StoreError> {
        let ticket = self.call(source, self.sources[source].next_ticket(tag, block)).await?;
        let floor = self.state(tag).await?.floor;
        if ticket >= floor {
            return Ok(ticket);
        }
        tracing::info!(tag = %tag, source = %self.sources[source].describe(), ticket, floor, "store lags the others; raising it past the blocks already served");
        self.call(source, self.sources[source].raise(tag, block, floor)).await?;
        let ticket = self.call(source, self.sources[source].next_ticket(tag, block)).await?;
        if ticket >= floor {
            Ok(ticket)
        } else {
            Err(StoreError::Unavailable(format!(
                "{} still hands out ticket {ticket} after being raised to {floor}",
                self.sources[source].describe()
            )))
        }
    }

    /// Runs `call` on every source, in [`round`](Self::round) order, each bounded; a source
    /// that is unavailable is marked as failed. Returns each source's answer.
    async fn on_each<'a, T, F, Fut>(&'a self, call: F) -> Vec<Result<T, StoreError>>
    where
        F: Fn(&'a dyn TicketSource) -> Fut,
        Fut: Future<Output = Result<T, StoreError>> + 'a,
    {
        let mut answers = Vec::with_capacity(self.sources.len());
        for source in self.round(None) {
            let answer = self.call(source, call(self.sources[source].as_ref())).await;
            match &answer {
                Ok(_) => self.succeeded(source),
                Err(error @ StoreError::Unavailable(_)) => self.failed(source, error),
                Err(_) => {}
            }
            answers.push(answer);
        }
        answers
    }
}

/// The answers that succeeded, and the last failure.
fn split<T>(answers: Vec<Result<T, StoreError>>) -> (Vec<T>, Option<StoreError>) {
    let mut good = Vec::new();
    let mut failure = None;
    for answer in answers {
        match answer {
            Ok(value) => good.push(value),
            Err(error) => failure = Some(error),
        }
    }
    (good, failure)
}

#[async_trait]
impl RangeStore for InterleavedStore {
    /// Tickets and blocks are consumed when taken: a shutdown gives nothing back.
    fn gives_back(&self) -> bool {
        false
    }

    async fn allocate(&self, tag: &Tag, _step: Option<Step>) -> Result<Allocation, StoreError> {
        let state = self.state(tag).await?;
        let block = state.block;
        let mut failure = None;
        for source in self.round(Some(&state.last)) {
            match self.ticket_from(source, tag, block).await {
                Ok(ticket) => {
                    self.succeeded(source);
                    let range = block_ids(ticket, block).ok_or_else(|| StoreError::Exhausted {
                        tag: tag.clone(),
                        max_id: ticket.saturating_mul(block),
                        step: block,
                    })?;
                    self.served(tag, Some((source, ticket)), ticket + 1);
                    return Ok(Allocation { range, tag_step: block });
                }
                // This source is down or lost the tag: the next one serves.
                Err(error @ (StoreError::Unavailable(_) | StoreError::TagNotFound(_))) => {
                    if matches!(error, StoreError::Unavailable(_)) {
                        self.failed(source, &error);
                    }
                    failure = Some(error);
                }
                // A row or a setting that is wrong: serving around it would hide it.
                Err(error) => return Err(error),
            }
        }
        Err(failure.unwrap_or_else(|| StoreError::TagNotFound(tag.clone())))
    }

    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        check_new_max_id(new)?;
        if new <= expected {
            // Tickets are consumed when taken: nothing can be given back.
            return Ok(false);
        }
        let block = self.state(tag).await?.block;
        let ticket = ticket_at_or_above(new, block);
        self.served(tag, None, ticket);
        let (raised, failure) =
            split(self.on_each(|source| source.raise(tag, block, ticket)).await);
        match (raised.is_empty(), failure) {
            (false, _) => Ok(true),
            (true, Some(error)) => Err(error),
            (true, None) => Ok(false),
        }
    }

    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        let (records, failure) = split(self.on_each(|source| source.get(tag)).await);
        if records.is_empty() {
            return Err(failure.unwrap_or_else(|| StoreError::TagNotFound(tag.clone())));
        }
        merge(tag, records.into_iter().flatten())
    }

    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        let (lists, failure) = split(self.on_each(|source| source.list()).await);
        if lists.is_empty() {
            return Err(failure.unwrap_or_else(|| StoreError::Unavailable("no store".into())));
        }
        let mut by_tag: BTreeMap<Tag, Vec<TagRecord>> = BTreeMap::new();
        for record in lists.into_iter().flatten() {
            by_tag.entry(record.tag.clone()).or_default().push(record);
        }
        by_tag.into_iter().filter_map(|(tag, records)| merge(&tag, records).transpose()).collect()
    }

    /// Each source's own store keeps, and enforces, the tombstones of its rows (Flicker's
    /// ticket counter never goes back and needs none); the set as a whole reports none.
    async fn tombstone(&self, _tag: &Tag) -> Result<Option<u64>, StoreError> {
        Ok(None)
    }

    async fn ping(&self) -> Result<(), StoreError> {
        // Serving needs one source: the store is up while any answers.
        let mut failure = None;
        for source in self.round(None) {
            match self.call(source, self.sources[source].ping()).await {
                Ok(()) => return Ok(()),
                Err(error) => failure = Some(error),
            }
        }
        Err(failure.unwrap_or_else(|| StoreError::Unavailable("no store".into())))
    }

    fn describe(&self) -> String {
        let sources: Vec<String> = self.sources.iter().map(|s| s.describe()).collect();
        format!("{}[{} mod {}]({})", self.kind, self.sources.len(), self.modulus, sources.join(" "))
    }
}

#[async_trait]
impl SegmentStore for InterleavedStore {
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError> {
        let answers = self.on_each(|source| source.create(spec)).await;
        let stores = answers.len();
        let mut created = 0;
        let mut existed = 0;
        let mut failure = None;
        for answer in answers {
            match answer {
                Ok(()) => created += 1,
                Err(StoreError::TagExists(_)) => existed += 1,
                Err(error) => failure = Some(error),
            }
        }
        if existed == stores {
            return Err(StoreError::TagExists(spec.tag.clone()));
        }
        // Sources that already held the tag: a retry of a creation some sources missed, if
        // they hold it with the same block.
        let record = self.get_tag(&spec.tag).await?;
        if record.as_ref().is_some_and(|r| r.step != spec.step.get()) {
            return Err(StoreError::TagExists(spec.tag.clone()));
        }
        if let Some(error) = failure {
            return Err(StoreError::Unavailable(format!(
                "tag {} is recorded in {} of {stores} stores ({error}); run the same create \
                 again once they all answer",
                spec.tag,
                created + existed
            )));
        }
        record.ok_or_else(|| StoreError::TagNotFound(spec.tag.clone()))
    }

    async fn set_step(&self, tag: &Tag, _step: Step) -> Result<TagRecord, StoreError> {
        Err(StoreError::InvalidValue(format!(
            "the step of {} tag {tag} is fixed: its ids are ticket × step, and a new step would \
             map later tickets onto ids already issued; create a new tag instead",
            self.kind
        )))
    }

    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError> {
        let answers = self.on_each(|source| source.delete(tag)).await;
        let tried = answers.len();
        let (deleted, failure) = split(answers);
        self.tags().remove(tag);
        match failure {
            None => Ok(()),
            Some(StoreError::TagNotFound(_)) if !deleted.is_empty() => Ok(()),
            Some(error @ StoreError::TagNotFound(_)) => Err(error),
            Some(error) => Err(StoreError::Unavailable(format!(
                "tag {tag} was deleted from {} of {tried} stores ({error}); run the same delete \
                 again once they all answer",
                deleted.len()
            ))),
        }
    }
}

/// One tag's records from several sources as one: the highest `max_id`, refused when the
/// sources disagree on the block.
fn merge(
    tag: &Tag,
    records: impl IntoIterator<Item = TagRecord>,
) -> Result<Option<TagRecord>, StoreError> {
    let mut merged: Option<TagRecord> = None;
    for record in records {
        match &mut merged {
            None => merged = Some(record),
            Some(m) if m.step != record.step => {
                return Err(StoreError::Corrupt {
                    tag: tag.to_string(),
                    reason: format!(
                        "the interleaved stores disagree on its step ({} and {}); its ids would \
                         collide",
                        m.step, record.step
                    ),
                });
            }
            Some(m) => {
                m.max_id = m.max_id.max(record.max_id);
                m.update_time_s = m.update_time_s.max(record.update_time_s);
            }
        }
    }
    Ok(merged)
}

/// A segment store as a ticket source: an allocation of `modulus × block` ids holds exactly
/// one block of the store's residue.
struct StoreSource {
    store: Arc<dyn SegmentStore>,
    residue: u64,
    modulus: u64,
}

impl StoreSource {
    /// The row step that stands for `block`.
    fn row_step(&self, tag: &Tag, block: u64) -> Result<Step, StoreError> {
        block.checked_mul(self.modulus).and_then(|s| Step::new(s).ok()).ok_or_else(|| {
            StoreError::InvalidValue(format!(
                "tag {tag}: step {block} × {} stores is above the largest step {}",
                self.modulus,
                idmint_core::limits::STEP_MAX
            ))
        })
    }

    /// A row as the interleaved tag it holds.
    fn as_block(&self, mut record: TagRecord) -> Result<TagRecord, StoreError> {
        if !record.step.is_multiple_of(self.modulus) {
            return Err(StoreError::Corrupt {
                tag: record.tag.to_string(),
                reason: format!(
                    "its step {} in {} is not a multiple of the {} interleaved stores; was it \
                     changed outside idmint?",
                    record.step,
                    self.store.describe(),
                    self.modulus
                ),
            });
        }
        record.step /= self.modulus;
        Ok(record)
    }
}

#[async_trait]
impl TicketSource for StoreSource {
    async fn next_ticket(&self, tag: &Tag, block: u64) -> Result<u64, StoreError> {
        let step = self.row_step(tag, block)?;
        let allocation = self.store.allocate(tag, Some(step)).await?;
        if allocation.tag_step != step.get() {
            return Err(StoreError::Corrupt {
                tag: tag.to_string(),
                reason: format!(
                    "its step in {} is {}, not {} × {} stores: was it changed outside idmint? \
                     The interleaved ids would collide",
                    self.store.describe(),
                    allocation.tag_step,
                    block,
                    self.modulus
                ),
            });
        }
        block_in_range(allocation.range, block, self.residue, self.modulus).ok_or_else(|| {
            StoreError::Corrupt {
                tag: tag.to_string(),
                reason: format!(
                    "allocation {}..{} holds no block of residue {}",
                    allocation.range.start(),
                    allocation.range.end(),
                    self.residue
                ),
            }
        })
    }

    async fn raise(&self, tag: &Tag, block: u64, ticket: u64) -> Result<(), StoreError> {
        let target = ticket.saturating_mul(block);
        check_new_max_id(target)?;
        for _ in 0..RAISE_ROUNDS_MAX {
            let row = self
                .store
                .get_tag(tag)
                .await?
                .ok_or_else(|| StoreError::TagNotFound(tag.clone()))?;
            if row.max_id >= target
                || self.store.compare_and_set_max_id(tag, row.max_id, target).await?
            {
                return Ok(());
            }
        }
        Err(StoreError::Unavailable(format!(
            "tag {tag} in {}: other nodes kept allocating while it was raised; retry",
            self.store.describe()
        )))
    }

    async fn get(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        self.store.get_tag(tag).await?.map(|r| self.as_block(r)).transpose()
    }

    async fn list(&self) -> Result<Vec<TagRecord>, StoreError> {
        self.store.list_tags().await?.into_iter().map(|r| self.as_block(r)).collect()
    }

    async fn create(&self, spec: &TagSpec) -> Result<(), StoreError> {
        // Starting the row at `start` makes its first allocation's block of this residue the
        // first one at or above `start`.
        let row = TagSpec { step: self.row_step(&spec.tag, spec.step.get())?, ..spec.clone() };
        self.store.create_tag(&row).await.map(drop)
    }

    async fn delete(&self, tag: &Tag) -> Result<(), StoreError> {
        self.store.delete_tag(tag).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.store.ping().await
    }

    fn residue(&self) -> u64 {
        self.residue
    }

    fn describe(&self) -> String {
        self.store.describe()
    }
}

/// Opens an interleaved set of segment stores. A store that cannot be opened now is opened
/// on its first use instead (and skipped until then); a set none of whose stores opens is
/// refused.
pub(crate) async fn open_interleaved(
    urls: &[crate::StoreUrl],
    open: Opener,
) -> Result<InterleavedStore, StoreError> {
    let mut stores: Vec<Arc<dyn SegmentStore>> = Vec::with_capacity(urls.len());
    let mut opened = 0;
    let mut failure = None;
    for url in urls {
        if matches!(url, crate::StoreUrl::Interleaved(_) | crate::StoreUrl::Flicker(_)) {
            return Err(StoreError::BadUrl {
                url: url.to_string(),
                reason: "an interleaved set holds plain segment stores only".to_string(),
            });
        }
        let lazy = LazyStore { url: url.clone(), open, store: tokio::sync::OnceCell::new() };
        let timeout = Duration::from_millis(idmint_core::limits::STORE_CALL_TIMEOUT_MS_DEFAULT);
        match tokio::time::timeout(timeout, lazy.store()).await {
            Ok(Ok(_)) => opened += 1,
            Ok(Err(error @ StoreError::Unavailable(_))) => {
                tracing::warn!(store = %url, %error, "interleaved store down at start; the others serve until it answers");
                failure = Some(error);
            }
            Ok(Err(error)) => return Err(error),
            Err(_elapsed) => {
                tracing::warn!(store = %url, "interleaved store did not answer at start; the others serve until it does");
                failure = Some(StoreError::Unavailable(format!("{url} did not answer in time")));
            }
        }
        stores.push(Arc::new(lazy));
    }
    if opened == 0 {
        return Err(failure.unwrap_or_else(|| StoreError::Unavailable("no store".into())));
    }
    InterleavedStore::over_stores(stores)
}

/// A store opened on first use, so an interleaved set starts while one of its databases is
/// down.
struct LazyStore {
    url: crate::StoreUrl,
    open: Opener,
    store: tokio::sync::OnceCell<Arc<dyn SegmentStore>>,
}

/// A member store being opened.
pub(crate) type Opening<'a> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<Arc<dyn SegmentStore>, StoreError>> + Send + 'a>,
>;

/// How a member store is opened: `crate::open`, handed in by `open.rs` (which dispatches
/// interleaved URLs here), so this module does not import its own caller.
pub(crate) type Opener = for<'a> fn(&'a crate::StoreUrl) -> Opening<'a>;

impl LazyStore {
    async fn store(&self) -> Result<&Arc<dyn SegmentStore>, StoreError> {
        self.store.get_or_try_init(|| (self.open)(&self.url)).await
    }
}

#[async_trait]
impl RangeStore for LazyStore {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        self.store().await?.allocate(tag, step).await
    }

    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        self.store().await?.compare_and_set_max_id(tag, expected, new).await
    }

    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        self.store().await?.get_tag(tag).await
    }

    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        self.store().await?.list_tags().await
    }

    async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, StoreError> {
        self.store().await?.tombstone(tag).await
    }

    async fn ping(&self) -> Result<(), StoreError> {
        self.store().await?.ping().await
    }

    fn describe(&self) -> String {
        match self.store.get() {
            Some(store) => store.describe(),
            None => self.url.to_string(),
        }
    }
}

#[async_trait]
impl SegmentStore for LazyStore {
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError> {
        self.store().await?.create_tag(spec).await
    }

    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError> {
        self.store().await?.set_step(tag, step).await
    }

    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError> {
        self.store().await?.delete_tag(tag).await
    }
}
