//! [`Segments`]: every tag of one store, served from per-tag generators.
//!
//! The registry is a copy-on-write map behind an `ArcSwap`: lookups are lock-free, inserts
//! (a tag's first request) and removals (a deleted tag) copy the map, which is bounded by
//! `TAG_COUNT_MAX`. A tag the node has not seen gets an empty generator at once; its first
//! request waits on the generator's single-flight refill, so a tag created a moment ago
//! works on its first request and concurrent first requests share one store call.
//!
//! The per-request path takes by name: [`Segments::next_id_by_name`] looks the registry up
//! by the `&str` the request carries (`Tag: Borrow<str>`), hashed with foldhash under a
//! per-process random seed, and takes from the tag's buffer; it makes a [`Tag`] (parse,
//! allocation) only on a miss or when the buffer is empty. Every name in the registry was a
//! valid, non-internal tag when it was put there, so a hit needs no parse.
//!
//! Requests for names the store does not hold are bounded by [`UnknownTags`] (`unknown.rs`):
//! a one-second negative cache that a local create clears, and a budget of unknown lookups
//! per second.
//!
//! Two background loops run beside the generators: the tag refresh (drops tags deleted from
//! the store) and the rate sampler (once per `RATE_SAMPLE_MS`, feeds each tag's pacing).
//! [`Segments::shutdown`] freezes every generator, lets refills in flight land, stops the
//! loops and gives each tag's unissued ids back to the store.

use std::cell::RefCell;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use idmint_core::limits::{RATE_SAMPLE_MS, TAG_COUNT_MAX, UNKNOWN_TAG_LOOKUPS_PER_S_MAX};
use idmint_core::{BufferSnapshot, Count, IdRange, Step, Tag, TagError, is_internal_name};
use idmint_store::{RangeStore, SegmentStore, StoreError, TagRecord, TagSpec};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::config::SegmentConfig;
use super::error::Error;
use super::generator::{Shared, TagGenerator, TagStatus};
use super::lease::{LeaseKey, RangeLease, TakeBackError};
use super::registry::same_bytes;
use super::take_first::{TakeFirst, Waiting};
use super::unknown::{Admission, UnknownTags};
use crate::marks::LocalMarks;

/// The served tags, looked up by name on every request (`registry.rs`).
type Registry = super::registry::Registry<Arc<TagGenerator>>;

/// Numbers every [`Segments`] of the process (never reused), for [`LAST_REGISTRY`].
static SEGMENTS_NUMBERS: AtomicU64 = AtomicU64::new(1);

/// Numbers every registry of every [`Segments`] of the process, its generation (never
/// reused): a thread's [`LAST_REGISTRY`] is current exactly when its generation is the one
/// the `Segments` holds now, with no need to compare which `Segments` it came from.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The registry this thread last looked a name up in: of which `Segments`, as of which
    /// change (its generation), the snapshot and the entry last found in it. While the
    /// registry does not change, the per-request lookup reads it here instead of taking the
    /// `ArcSwap` guard, whose two locked instructions were most of a take by name
    /// (docs/PERFORMANCE.md). It is checked against the registry's generation on every
    /// lookup, so a change is seen as soon as the `ArcSwap` would show it. A thread keeps the
    /// snapshot (its generators, and through them the store handle) until its next lookup in
    /// any `Segments` or its exit: at most one per thread. The state directory's lock is
    /// given up without waiting for that (`Segments`'s `Drop`).
    static LAST_REGISTRY: RefCell<Option<LastRegistry>> = const { RefCell::new(None) };
}

/// [`LAST_REGISTRY`]'s snapshot, what it is a snapshot of, and the entry last found in it.
struct LastRegistry {
    /// Which `Segments` (only for its `Drop`: the generation says the rest).
    segments: u64,
    generation: u64,
    registry: Arc<Registry>,
    /// The entry this thread last found by name in `registry`. Only ever the entry of a name
    /// that is not internal (`LastRegistry::find_looking_up`), so a lookup that lands on it
    /// needs no check of its own.
    hit: Option<Hit>,
    /// The hit before `hit`, under the same rule: a take whose tag changes between two tags
    /// (a caller serving two hot ones in turn) compares a second name instead of hashing.
    previous: Option<Hit>,
}

/// [`LastRegistry::hit`]: an entry of the snapshot's registry, by its number there. It holds
/// no count on the generator: the snapshot holds the registry, which holds the generator, and
/// a new snapshot starts without a hit. So a take whose tag changes between calls costs the
/// lookup, not two atomic steps on a count shared with every other thread (the clone of the
/// new hit's generator and the drop of the old one's).
struct Hit {
    /// The entry's number in the snapshot's registry ([`Registry::at`]).
    number: usize,
}

impl LastRegistry {
    /// The take by a `Tag`: when it is the very `Tag` of the last hit's generator (the same
    /// allocation, as a clone of the `Tag` the tag was created or first taken with is), found
    /// with one pointer compare; else by its name. Sound: the snapshot holds the generator,
    /// and so its `Tag`, while it is compared.
    #[inline(always)]
    fn take_by_tag(&mut self, tag: &Tag) -> Option<u64> {
        if let Some(hit) = &self.hit
            && let Some(generator) = self.generator_at(hit.number)
            && std::ptr::eq(generator.tag().as_str(), tag.as_str())
        {
            return generator.try_take_one();
        }
        self.take_by_name(tag.as_str())
    }

    /// The take by name: the entry of `name`, if the snapshot holds one, takes one id.
    #[inline(always)]
    fn take_by_name(&mut self, name: &str) -> Option<u64> {
        self.find(name)?.try_take_one()
    }

    /// The generator of entry `number` of the snapshot's registry.
    #[inline(always)]
    fn generator_at(&self, number: usize) -> Option<&Arc<TagGenerator>> {
        self.registry.at(number).map(|(_, generator)| generator)
    }

    /// The generator of `name`: the last hit's when the names are equal (no hash), else the
    /// previous hit's (the two swap), else the registry's lookup, which becomes the hit.
    /// `None` for an internal row's name in any ASCII case (never served, whatever the
    /// registry holds) and any name it does not hold.
    #[inline(always)]
    fn find(&mut self, name: &str) -> Option<&Arc<TagGenerator>> {
        if let Some(hit) = &self.hit
            && let Some(generator) = self.generator_at(hit.number)
            && same_bytes(generator.tag().as_str().as_bytes(), name.as_bytes())
        {
            return self.generator_at(hit.number);
        }
        if let Some(previous) = &self.previous
            && let Some(generator) = self.generator_at(previous.number)
            && same_bytes(generator.tag().as_str().as_bytes(), name.as_bytes())
        {
            std::mem::swap(&mut self.hit, &mut self.previous);
            return self.generator_at(self.hit.as_ref()?.number);
        }
        self.find_looking_up(name)
    }

    /// [`LastRegistry::find`] past the last hit.
    #[inline(never)]
    fn find_looking_up(&mut self, name: &str) -> Option<&Arc<TagGenerator>> {
        // The registry never holds an internal row (`generator` refuses them), so a hit is
        // servable; checked here too, on the name, so a later change to what the registry
        // holds cannot make a request serve one. A hit is only ever set past this check.
        if is_internal_name(name) {
            return None;
        }
        let number = self.registry.find(name)?;
        let (_, generator) = self.registry.at(number)?;
        self.previous = self.hit.replace(Hit { number });
        Some(generator)
    }
}

/// Why [`Segments::next_id_by_name`] did not answer: the name is not a tag, or the segment
/// engine refused (exactly as [`Segments::next_id`] would for the parsed tag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ByNameError {
    /// The name is not a tag: what `Tag::parse` says of it (an internal row's name, in any
    /// ASCII case, is [`TagError::Reserved`]).
    #[error(transparent)]
    BadTag(#[from] TagError),
    /// The engine refused the tag: unknown, unavailable, spent, shutting down, ...
    #[error(transparent)]
    Segment(#[from] Error),
}

/// What [`Segments::create_tag`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTag {
    /// The new row, as stored.
    pub record: TagRecord,
    /// Set when the create was forced below the tombstone of a deleted tag of the same name:
    /// what that risks, for the operator (also logged as a warning).
    pub forced: Option<String>,
}

/// Segment-mode ids for every tag of a store.
pub struct Segments {
    shared: Arc<Shared>,
    registry: ArcSwap<Registry>,
    /// This `Segments`'s number in the process ([`LAST_REGISTRY`]).
    number: u64,
    /// The generation of `registry` (from [`GENERATIONS`], set anew after every change): a
    /// thread's [`LAST_REGISTRY`] of another generation is stale.
    generation: AtomicU64,
    /// Set when the shutdown begins: no generator is made after it.
    closing: AtomicBool,
    /// Proves the ranges this node leases to clients ([`Segments::lease`]).
    lease_key: LeaseKey,
    /// Bounds the store lookups of names the store does not hold (`unknown.rs`).
    unknown: UnknownTags,
}

impl Segments {
    /// Starts serving the tags of `store`, with the tag refresh and the rate sampler running
    /// in the background. With a state directory configured, opens (and locks) its
    /// high-water file first; a damaged or locked file refuses the start with
    /// [`Error::LocalState`]. Must be called inside a tokio runtime.
    pub fn start(
        store: Arc<dyn SegmentStore>,
        config: SegmentConfig,
    ) -> Result<Arc<Segments>, Error> {
        Segments::start_with(Arc::clone(&store) as Arc<dyn RangeStore>, Some(store), config)
    }

    /// Starts serving the tags of a store that holds no tag admin (the idmint client's remote
    /// store): creating a tag, changing its step or deleting it is refused, naming the
    /// server's admin API; everything else is as with [`Segments::start`].
    pub fn start_ranges(
        store: Arc<dyn RangeStore>,
        config: SegmentConfig,
    ) -> Result<Arc<Segments>, Error> {
        Segments::start_with(store, None, config)
    }

    fn start_with(
        store: Arc<dyn RangeStore>,
        admin: Option<Arc<dyn SegmentStore>>,
        config: SegmentConfig,
    ) -> Result<Arc<Segments>, Error> {
        let high_water = match config.state_dir() {
            Some(dir) => Some(Arc::new(LocalMarks::open(dir)?)),
            None => None,
        };
        if let Some(marks) = &high_water {
            tracing::info!(path = %marks.path().display(), "store-regression guard: high-water marks persist here");
        }
        let shared = Arc::new(Shared {
            store,
            admin,
            config,
            high_water,
            runtime: tokio::runtime::Handle::current(),
            tracker: TaskTracker::new(),
            cancel: CancellationToken::new(),
        });
        let segments = Arc::new(Segments {
            shared,
            registry: ArcSwap::default(),
            number: SEGMENTS_NUMBERS.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(GENERATIONS.fetch_add(1, Ordering::Relaxed)),
            closing: AtomicBool::new(false),
            lease_key: LeaseKey::random(),
            unknown: UnknownTags::new(),
        });
        let weak = Arc::downgrade(&segments);
        segments.shared.tracker.spawn(refresh_loop(weak.clone(), segments.shared.clone()));
        segments.shared.tracker.spawn(sample_loop(weak, segments.shared.clone()));
        Ok(segments)
    }

    /// The next id of `tag`. Waits (bounded) only when its buffer is empty or the node does
    /// not serve it yet.
    ///
    /// The future takes on its first poll; only when that finds nothing does it build the
    /// (boxed) waiting future, so a hit is the lookup and the take inlined into the caller's
    /// poll, moving only the id (`take_first.rs`).
    #[inline]
    pub fn next_id<'a>(
        &'a self,
        tag: &'a Tag,
    ) -> impl Future<Output = Result<u64, Error>> + Send + 'a {
        TakeFirst::new(
            || self.try_next_id(tag),
            || -> Waiting<'a, Error> { Box::pin(self.next_id_waiting(tag)) },
        )
    }

    /// The next id of the tag named `name`, the name as a request carries it (a path segment,
    /// already percent-decoded): what the HTTP and gRPC handlers call per request. A name the
    /// node serves is looked up as a `&str` and answered from memory without a `Tag` being
    /// made (no parse, no allocation, no lock). Any other name is parsed first and answered as
    /// [`Segments::next_id`] answers the tag: a name that is not a tag (an internal row's in
    /// any ASCII case included) is [`ByNameError::BadTag`] with `Tag::parse`'s reason; an
    /// unknown tag is [`Error::UnknownTag`], bounded as [`Segments::generator`] says.
    ///
    /// Lazy and small as [`Segments::next_id`]'s future: a hit is the lookup and the take.
    #[inline]
    pub fn next_id_by_name<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Future<Output = Result<u64, ByNameError>> + Send + 'a {
        TakeFirst::new(
            || self.try_next_id_by_name(name),
            || -> Waiting<'a, ByNameError> { Box::pin(self.next_id_by_name_waiting(name)) },
        )
    }

    /// The next id of `tag` if its buffer holds one now, without waiting: the take by its
    /// name ([`Segments::try_next_id_by_name`]), or, when `tag` is the very `Tag` this thread
    /// last found (a clone of the one the tag was created with), by one pointer compare.
    /// `None` when the node does not serve the tag
    /// yet, its buffer is empty (a refill is under way) or it is shutting down:
    /// [`Segments::next_id`] says which, and waits where it can.
    #[inline]
    pub fn try_next_id(&self, tag: &Tag) -> Option<u64> {
        // Inlined into the thread-local access: a call per take otherwise (measured).
        self.with_snapshot(
            #[inline(always)]
            |last| last.take_by_tag(tag),
        )
    }

    /// The next id of the tag named `name` if its buffer holds one now, without waiting: the
    /// lookup in this thread's snapshot of the registry (`LAST_REGISTRY`: no lock, no
    /// read-modify-write but the take's one atomic step) and the take. `None` also for a name
    /// that is not a tag the node serves (it is never parsed here). A name equal to one of the
    /// two this thread last found is not hashed.
    #[inline]
    pub fn try_next_id_by_name(&self, name: &str) -> Option<u64> {
        // As above.
        self.with_snapshot(
            #[inline(always)]
            |last| last.take_by_name(name),
        )
    }

    /// `count` ids of `tag` as increasing ranges.
    pub async fn next_ids(&self, tag: &Tag, count: Count) -> Result<Vec<IdRange>, Error> {
        let generator = self.generator(tag)?;
        let result = generator.next_ids(count).await;
        self.forget_if_unknown(&generator, result.as_ref().err());
        result
    }

    /// `count` ids of `tag` leased to a client as increasing ranges, each with this node's
    /// proof, so the client can give back what it does not use ([`Segments::take_back`]).
    pub async fn lease(&self, tag: &Tag, count: Count) -> Result<Vec<RangeLease>, Error> {
        let ranges = self.next_ids(tag, count).await?;
        Ok(ranges.into_iter().map(|range| self.lease_key.lease(tag, range)).collect())
    }

    /// Takes back the unused ids `[start, end)` of `leases` (this node's, contiguous, covering
    /// them) so they are handed out again. Returns how many ids were taken back: the top of
    /// them that lies in the tag's current segment when the buffer can prove it safe (they
    /// are the last ids it handed out, and none of them was given back before), else 0 and
    /// nothing changes (the ids are wasted, never repeated). Leases that are not this node's
    /// are refused.
    pub fn take_back(
        &self,
        tag: &Tag,
        start: u64,
        end: u64,
        leases: &[RangeLease],
    ) -> Result<u64, TakeBackError> {
        let range = self.lease_key.check(tag, start, end, leases)?;
        let Some(generator) = self.registry.load().get(tag.as_str()).cloned() else {
            return Ok(0);
        };
        Ok(generator.take_back(range))
    }

    /// The generator of `tag`, made (empty, loaded on its first request) if the node has
    /// none. Embedders that take many ids of one tag keep this handle.
    ///
    /// A name the store did not hold less than `UNKNOWN_TAG_TTL_MS` ago is
    /// [`Error::UnknownTag`] without a store call; past `UNKNOWN_TAG_LOOKUPS_PER_S_MAX`
    /// unknown lookups in a second, a new name is [`Error::Unavailable`] (retry) until the
    /// second is over.
    ///
    /// An internal row ([`Tag::is_internal`], e.g. a key guard) is never served: it is
    /// [`Error::UnknownTag`].
    pub fn generator(&self, tag: &Tag) -> Result<Arc<TagGenerator>, Error> {
        if tag.is_internal() {
            return Err(Error::UnknownTag(tag.clone()));
        }
        if let Some(generator) = self.registry.load().get(tag.as_str()) {
            return Ok(Arc::clone(generator));
        }
        if self.closing.load(Ordering::Acquire) {
            return Err(Error::ShuttingDown);
        }
        let admission = match self.shared.config.bound_unknown_tags() {
            true => self.unknown.admit(tag),
            false => Admission::Lookup,
        };
        match admission {
            Admission::Lookup => {}
            Admission::Unknown => return Err(Error::UnknownTag(tag.clone())),
            Admission::OverBudget => {
                return Err(Error::Unavailable {
                    tag: tag.clone(),
                    reason: format!(
                        "this node already looked up {UNKNOWN_TAG_LOOKUPS_PER_S_MAX} tags the \
                         store does not hold in the last second, the most it does; retry"
                    ),
                });
            }
        }
        let mut found = Err(Error::TooManyTags(TAG_COUNT_MAX));
        self.update_registry(|registry| {
            if let Some(generator) = registry.get(tag.as_str()) {
                found = Ok(Arc::clone(generator));
                return Arc::clone(registry);
            }
            if registry.len() >= TAG_COUNT_MAX {
                found = Err(Error::TooManyTags(TAG_COUNT_MAX));
                return Arc::clone(registry);
            }
            let generator = Arc::new(TagGenerator::new(tag.clone(), Arc::clone(&self.shared)));
            found = Ok(Arc::clone(&generator));
            Arc::new(registry.with(tag.clone(), generator))
        });
        found
    }

    /// The two segments this node holds for `tag`, if it serves the tag.
    pub fn snapshot(&self, tag: &Tag) -> Option<BufferSnapshot> {
        self.registry.load().get(tag.as_str()).map(|g| g.snapshot())
    }

    /// How this node serves `tag` (segments, step, rate, runway, counters), if it does.
    pub fn status(&self, tag: &Tag) -> Option<TagStatus> {
        self.registry.load().get(tag.as_str()).map(|g| g.status())
    }

    /// How this node serves each tag it holds a generator for, sorted by tag: the metrics
    /// and the dashboard read it. Bounded by `TAG_COUNT_MAX`.
    pub fn statuses(&self) -> Vec<(Tag, TagStatus)> {
        let mut statuses: Vec<(Tag, TagStatus)> =
            self.registry.load().iter().map(|(tag, g)| (tag.clone(), g.status())).collect();
        statuses.sort_by(|a, b| a.0.cmp(&b.0));
        statuses
    }

    /// Creates a tag in the store. Over the tombstone of a deleted tag of the same name, it
    /// continues above the old tag's ids; a lower start is refused
    /// ([`StoreError::StartBelowIssued`]) unless `spec.force`, which is logged as a warning
    /// and reported in [`CreatedTag::forced`].
    pub async fn create_tag(&self, spec: &TagSpec) -> Result<CreatedTag, Error> {
        // Read first only to tell the operator what forcing did; the store enforces the
        // tombstone itself, atomically with the insert.
        let tombstone = match spec.force {
            true => self.store_call(self.shared.store.tombstone(&spec.tag)).await?,
            false => None,
        };
        let record =
            self.store_call(self.admin("create tags", &spec.tag)?.create_tag(spec)).await?;
        self.unknown.clear(&spec.tag);
        let forced = idmint_store::forced_below_tombstone(spec, tombstone);
        if let Some(warning) = &forced {
            tracing::warn!(tag = %spec.tag, "{warning}");
        }
        Ok(CreatedTag { record, forced })
    }

    /// The store's tag admin, or the refusal of `what` (on `tag`) when it has none.
    fn admin(&self, what: &str, tag: &Tag) -> Result<&Arc<dyn SegmentStore>, Error> {
        self.shared.admin.as_ref().ok_or_else(|| {
            Error::from(StoreError::InvalidValue(format!(
                "{} holds no tag admin and cannot {what} (tag {tag}); use the server's admin \
                 API: `idmint tag …` against its store, or /v1/tags with the admin token",
                self.shared.store.describe()
            )))
        })
    }

    /// The store row of `tag`.
    pub async fn get_tag(&self, tag: &Tag) -> Result<TagRecord, Error> {
        self.store_call(self.shared.store.get_tag(tag))
            .await?
            .ok_or_else(|| Error::UnknownTag(tag.clone()))
    }

    /// Where a deleted tag of this name stopped (every id it handed out is below), if one
    /// was deleted through idmint.
    pub async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, Error> {
        self.store_call(self.shared.store.tombstone(tag)).await
    }

    /// Every tag in the store, without idmint's internal rows ([`Tag::is_internal`]).
    pub async fn list_tags(&self) -> Result<Vec<TagRecord>, Error> {
        let mut records = self.store_call(self.shared.store.list_tags()).await?;
        records.retain(|record| !record.tag.is_internal());
        Ok(records)
    }

    /// idmint's internal rows alone ([`Tag::is_internal`]): the key guards earlier versions
    /// kept in the segment table, found at start to be moved out of it.
    pub async fn internal_rows(&self) -> Result<Vec<TagRecord>, Error> {
        let mut records = self.store_call(self.shared.store.list_tags()).await?;
        records.retain(|record| record.tag.is_internal());
        Ok(records)
    }

    /// Each row's `update_time` as the database writes it as text, by tag (empty for a store
    /// whose time has no text of its own): Leaf's `/db`.
    pub async fn update_times_text(&self) -> Result<Vec<(Tag, String)>, Error> {
        self.store_call(self.shared.store.update_times_text()).await
    }

    /// Changes the step of `tag`; its next allocation uses it.
    pub async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, Error> {
        self.store_call(self.admin("change steps", tag)?.set_step(tag, step)).await
    }

    /// Deletes `tag` from the store, leaving its tombstone there, and stops serving it on this
    /// node at once (other nodes stop at their next refresh or refill).
    ///
    /// The node keeps its high-water mark of the tag: a tag created again under the name (even
    /// forced below the tombstone, or after the row and tombstone were lost) never makes this
    /// node hand out an id it handed out before.
    pub async fn delete_tag(&self, tag: &Tag) -> Result<(), Error> {
        self.store_call(self.admin("delete tags", tag)?.delete_tag(tag)).await?;
        self.forget(tag, None);
        Ok(())
    }

    /// Reconciles the served tags with the store: tags deleted there stop being served.
    pub async fn refresh(&self) -> Result<(), Error> {
        let records = self.list_tags().await?;
        let live: HashSet<&Tag> = records.iter().map(|r| &r.tag).collect();
        let served = self.registry.load();
        // A tag loaded between the listing and here may be dropped too; its next request
        // loads it again with a fresh range, which wastes ids but never repeats one.
        for (tag, _) in served.iter().filter(|(t, _)| !live.contains(t)) {
            tracing::info!(%tag, "tag no longer in the store; no longer served");
            self.forget(tag, None);
        }
        Ok(())
    }

    /// Whether the node can serve: not shutting down and the store answers.
    pub async fn ready(&self) -> Result<(), Error> {
        if self.shared.cancel.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        self.store_call(self.shared.store.ping()).await
    }

    /// Where the store lives (password removed).
    pub fn store_description(&self) -> String {
        self.shared.store.describe()
    }

    /// Shuts down without wasting ids: freezes every generator (every later take fails with
    /// [`Error::ShuttingDown`], never an id), lets refills already running land (bounded by
    /// the store call timeout), stops the background tasks, then gives each tag's unissued
    /// ids back to the store with a compare-and-set, in batches, within
    /// [`SegmentConfig::give_back`] (`giveback.rs`: what that bound cuts off is skipped,
    /// never served again). Call it after requests have drained.
    ///
    /// Idempotent: a second call waits for the background tasks and returns.
    pub async fn shutdown(&self) {
        if self.closing.swap(true, Ordering::AcqRel) {
            self.shared.cancel.cancel();
            self.shared.tracker.close();
            self.shared.tracker.wait().await;
            return;
        }
        let generators: Vec<Arc<TagGenerator>> = self.registry.load().values().cloned().collect();
        for generator in &generators {
            generator.freeze();
        }
        // A refill in flight may have reserved a range already: let it land in the frozen
        // buffer (parked, never served) so it is given back too.
        let deadline = tokio::time::Instant::now() + self.shared.config.store_call_timeout();
        while generators.iter().any(|g| g.refilling()) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.shared.cancel.cancel();
        self.shared.tracker.close();
        self.shared.tracker.wait().await;
        super::giveback::give_back_all(&self.shared, &generators).await;
    }

    /// `read` of this thread's snapshot of the registry ([`LAST_REGISTRY`]), made anew when
    /// it is not of the registry's current generation: an acquire load and one compare
    /// while the registry does not change. Borrowed mutably (`read` may change the hit): a
    /// lookup inside `read` (none is made today) would read a snapshot of its own.
    #[inline(always)]
    fn with_snapshot<R>(&self, read: impl Fn(&mut LastRegistry) -> R) -> R {
        let generation = self.generation.load(Ordering::Acquire);
        let cached = LAST_REGISTRY.try_with(|cell| {
            let mut last = cell.try_borrow_mut().ok()?;
            let last = last.as_mut().filter(|last| last.generation == generation)?;
            Some(read(last))
        });
        match cached {
            Ok(Some(result)) => result,
            _ => self.with_snapshot_reloading(generation, read),
        }
    }

    /// [`Segments::with_snapshot`] when this thread's snapshot is not of this registry's
    /// `generation`: loads the registry, keeps it as the thread's snapshot, reads it.
    #[cold]
    #[inline(never)]
    fn with_snapshot_reloading<R>(
        &self,
        generation: u64,
        read: impl Fn(&mut LastRegistry) -> R,
    ) -> R {
        // Loaded after the generation was read: at least as new as it says.
        let snapshot = || LastRegistry {
            segments: self.number,
            generation,
            registry: self.registry.load_full(),
            hit: None,
            previous: None,
        };
        let cached = LAST_REGISTRY.try_with(|cell| {
            let mut last = cell.try_borrow_mut().ok()?;
            Some(read(last.insert(snapshot())))
        });
        match cached {
            Ok(Some(result)) => result,
            // The thread is exiting, or this is a lookup inside a lookup: a snapshot of its own.
            Ok(None) | Err(_) => read(&mut snapshot()),
        }
    }

    /// [`Segments::next_id`] when the take found nothing: the tag's generator (made if the
    /// node has none), waited on.
    async fn next_id_waiting(&self, tag: &Tag) -> Result<u64, Error> {
        let generator = self.generator(tag)?;
        let result = generator.next_id().await;
        self.forget_if_unknown(&generator, result.as_ref().err());
        result
    }

    /// [`Segments::next_id_by_name`] when the take by name found nothing: the full parse, then
    /// the path of a parsed tag, so every refusal is the one a parsed tag gets.
    async fn next_id_by_name_waiting(&self, name: &str) -> Result<u64, ByNameError> {
        let tag = Tag::parse(name)?;
        Ok(self.next_id_waiting(&tag).await?)
    }

    pub(crate) async fn store_call<T>(
        &self,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, Error> {
        let timeout = self.shared.config.store_call_timeout();
        match tokio::time::timeout(timeout, call).await {
            Ok(result) => Ok(result?),
            Err(_elapsed) => Err(Error::Store(StoreError::Unavailable(format!(
                "{} did not answer within {} ms",
                self.shared.store.describe(),
                timeout.as_millis()
            )))),
        }
    }

    fn forget_if_unknown(&self, generator: &Arc<TagGenerator>, error: Option<&Error>) {
        // Remembered once per lookup: the request that removes the generator records it,
        // not every request that shared its refill.
        if let Some(Error::UnknownTag(tag)) = error
            && self.forget(tag, Some(generator))
            && self.shared.config.bound_unknown_tags()
        {
            self.unknown.record(tag);
        }
        // No row can hold the name, and its refusal cost no store call: not kept, so such
        // names never fill the registry.
        if let Some(Error::Store(StoreError::TagNotStorable { tag, .. })) = error {
            self.forget(tag, Some(generator));
        }
    }

    /// Changes the registry (copy-on-write), then its generation: a thread that sees the new
    /// generation loads the new registry ([`LAST_REGISTRY`]).
    ///
    /// Why a snapshot of the current generation is current, though two changes may store
    /// their generations in either order: each generation is stored once, after its own
    /// change, and a thread loads the registry after reading the generation. If the
    /// generation a thread read is still the current one after a change C, it was stored
    /// after C's own store, hence after C's change, so the thread's load saw C.
    fn update_registry(&self, change: impl FnMut(&Arc<Registry>) -> Arc<Registry>) {
        self.registry.rcu(change);
        self.generation.store(GENERATIONS.fetch_add(1, Ordering::Relaxed), Ordering::Release);
    }

    /// Removes `tag` from the registry (only if it still maps to `only`, when given); says
    /// whether this call removed it.
    fn forget(&self, tag: &Tag, only: Option<&Arc<TagGenerator>>) -> bool {
        let mut removed = false;
        self.update_registry(|registry| {
            let matches =
                registry.get(tag.as_str()).is_some_and(|g| only.is_none_or(|o| Arc::ptr_eq(g, o)));
            removed = matches;
            if !matches {
                return Arc::clone(registry);
            }
            Arc::new(registry.without(tag))
        });
        removed
    }
}

/// Samples every tag's consumption once per `RATE_SAMPLE_MS`, for the step policy and the
/// runway.
impl Drop for Segments {
    /// Dropped without [`Segments::shutdown`] (a crash-like stop): the background tasks end at
    /// once, and the state directory's lock is given up when they have; nothing is given back.
    fn drop(&mut self) {
        self.shared.cancel.cancel();
        // This thread's snapshot goes now; another thread's stays until its next lookup or
        // its exit, holding the generators (unreachable: no lookup names this number again)
        // and the shared parts, the marks file among them. So the lock is released here
        // rather than with the last of them, once no task can write a mark: the tasks are
        // cancelled and a cancelled generator starts no refill.
        let _ = LAST_REGISTRY.try_with(|cell| {
            if let Ok(mut last) = cell.try_borrow_mut()
                && last.as_ref().is_some_and(|l| l.segments == self.number)
            {
                *last = None;
            }
        });
        if let Some(marks) = self.shared.high_water.clone() {
            let tracker = self.shared.tracker.clone();
            tracker.close();
            if tracker.is_empty() {
                // After `shutdown`: at once, so a restart right after the drop finds it free.
                marks.release();
            } else {
                // On a runtime already shut down the task does not run, and the lock goes
                // with the last holder of the file, as before.
                drop(self.shared.runtime.spawn(async move {
                    tracker.wait().await;
                    marks.release();
                }));
            }
        }
    }
}

async fn sample_loop(segments: Weak<Segments>, shared: Arc<Shared>) {
    let mut interval = tokio::time::interval(Duration::from_millis(RATE_SAMPLE_MS));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = shared.cancel.cancelled() => return,
        }
        let Some(segments) = segments.upgrade() else { return };
        for generator in segments.registry.load().values() {
            generator.sample_rate();
        }
    }
}

async fn refresh_loop(segments: Weak<Segments>, shared: Arc<Shared>) {
    let mut interval = tokio::time::interval(shared.config.tag_refresh_interval());
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await; // The first tick is immediate; nothing is loaded yet.
    loop {
        tokio::select! {
            _ = interval.tick() => {}
            () = shared.cancel.cancelled() => return,
        }
        let Some(segments) = segments.upgrade() else { return };
        if let Err(error) = segments.refresh().await {
            tracing::warn!(%error, "tag refresh failed; serving the tags already known");
        }
    }
}

#[cfg(test)]
mod tests {
    use idmint_core::{Description, StartId};
    use idmint_store::MemoryStore;

    use super::*;

    /// Defence in depth: even if an internal row got into the registry (no path puts one
    /// there today), neither the take by name (in any ASCII case) nor the take by tag serves
    /// it, and its row in the store is never allocated from.
    #[tokio::test]
    async fn an_internal_row_in_the_registry_is_never_served() {
        let store = Arc::new(MemoryStore::new());
        let internal = Tag::from_stored("idmint.key.order").unwrap();
        let spec = TagSpec {
            tag: internal.clone(),
            step: Step::new(10).unwrap(),
            start: Some(StartId::DEFAULT),
            force: false,
            description: Description::default(),
        };
        store.create_tag(&spec).await.unwrap();
        let before = store.get_tag(&internal).await.unwrap().unwrap().max_id;
        let segments = Segments::start(store.clone(), SegmentConfig::default()).unwrap();
        let generator = Arc::new(TagGenerator::new(internal.clone(), Arc::clone(&segments.shared)));
        segments.update_registry(|registry| {
            Arc::new(registry.with(internal.clone(), Arc::clone(&generator)))
        });
        for round in 0..20 {
            for name in ["idmint.key.order", "IDMINT.KEY.order", "Idmint.Key.order"] {
                assert_eq!(segments.try_next_id_by_name(name), None, "{name}");
                assert_eq!(
                    segments.next_id_by_name(name).await,
                    Err(ByNameError::BadTag(TagError::Reserved)),
                    "{name}, round {round}"
                );
            }
            // `internal` is the entry's own `Tag`: a take by it is refused as by its name.
            assert_eq!(segments.try_next_id(&internal), None);
            assert_eq!(segments.next_id(&internal).await, Err(Error::UnknownTag(internal.clone())));
            // Lets a refill the take would have started land before the next round.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let after = store.get_tag(&internal).await.unwrap().unwrap().max_id;
        assert_eq!(after, before, "the internal row was allocated from");
        segments.shutdown().await;
    }

    /// An engine on a store without tag admin (the idmint client's remote store) serves its
    /// tags, and refuses creating, changing or deleting one, naming the server's admin API,
    /// without asking the store: the row is unchanged.
    #[tokio::test]
    async fn an_engine_without_tag_admin_serves_and_refuses_admin() {
        let store = Arc::new(MemoryStore::new());
        let order = Tag::parse("order").unwrap();
        let spec = TagSpec {
            tag: order.clone(),
            step: Step::new(10).unwrap(),
            start: Some(StartId::DEFAULT),
            force: false,
            description: Description::default(),
        };
        store.create_tag(&spec).await.unwrap();
        let ranges = Arc::clone(&store) as Arc<dyn RangeStore>;
        let segments = Segments::start_ranges(ranges, SegmentConfig::default()).unwrap();
        assert_eq!(segments.next_id(&order).await, Ok(1));
        let refusals = [
            segments.create_tag(&spec).await.map(|_| ()),
            segments.set_step(&order, Step::new(20).unwrap()).await.map(|_| ()),
            segments.delete_tag(&order).await,
        ];
        for (refusal, what) in
            refusals.into_iter().zip(["create tags", "change steps", "delete tags"])
        {
            let message = refusal.unwrap_err().to_string();
            assert!(
                message.contains(&format!("holds no tag admin and cannot {what}")),
                "{message}"
            );
            assert!(message.contains("/v1/tags"), "{message}");
        }
        let row = store.get_tag(&order).await.unwrap().unwrap();
        assert_eq!((row.step, row.max_id), (10, 11), "the store was changed");
        assert_eq!(segments.next_id(&order).await, Ok(2));
        segments.shutdown().await;
    }
}
