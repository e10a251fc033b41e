//! [`Node`]: one idmint node, whatever serves it. It owns every engine ([`Segments`],
//! [`Snowflake`] and its [`CachedSnowflake`] ring, [`Sequences`], [`Uuids`], the tags'
//! public id formats), the background loops that are not an engine's own (the snowflake
//! start's retry, the Redis connection retry), their start order ([`NodeBuilder`]) and
//! their shutdown order ([`Node::shutdown`]).
//!
//! Its operations are the one home of the rules every transport shares: plain and public
//! (formatted) ids, leases and take-back, snowflake ids (from the ring or the generator),
//! decoding, tag and sequence admin, readiness per engine (`ready.rs`) and status. A transport parses its wire
//! format into these calls and renders the answers; it decides nothing. This module knows
//! no HTTP, gRPC or status code.

mod error;
mod policy;
mod ready;
mod slot;
mod snowflake;
mod start;
mod text;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use idmint_core::encoding::Encoding;
use idmint_core::snowflake::{Layout, Parts, UtcMs};
use idmint_core::{Count, IdRange, StartId, Step, Tag};
use idmint_store::{SequenceRecord, SequenceSpec, StoreError, TagMetaStore, TagRecord, TagSpec};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::format::IdFormat;
use crate::segment::take_first::{TakeFirst, Waiting};
use crate::segment::unknown::Admission;
use crate::segment::{CreatedTag, RangeLease, TagStatus};
use crate::segment::{Error, Segments};
use crate::sequence::Sequences;
use crate::sequence::limits::SEQ_COUNT_MAX;
use crate::sequence::{SequenceIds, SequenceStatus};
use crate::snowflake::SnowflakeStatus;
use crate::snowflake::{CachedSnowflake, Snowflake};
use crate::tinyid::{BizTypeView, Tinyid, TinyidSegment};
use crate::uuid::Uuids;
use idmint_core::limits::UNKNOWN_TAG_LOOKUPS_PER_S_MAX;

pub use crate::peer::{Peer, PeerError, PeerLink, PublicIds};
use crate::strict::{Owner, StrictTags};
pub use error::{Feature, NodeError, NodeStartError};
pub use idmint_store::{POLICY_FORMATTED, POLICY_NAME, POLICY_PLAIN, POLICY_STRICT};
pub use policy::{Policies, TagPolicy};
pub use ready::{Engine, EngineReadiness};
use slot::{Absence, EngineSlot, Slotted};
use snowflake::SnowflakeSlot;
pub use snowflake::{
    SNOWFLAKE_RETRY_MS_MAX, SNOWFLAKE_RETRY_MS_MIN, SNOWFLAKE_START_ATTEMPT_MS_MAX,
};
pub use start::{
    FormatConfig, NodeBuilder, NodeConfig, REDIS_RETRY_MS, SequencesConfig, TinyidNodeConfig,
};
pub use text::PublicText;

/// The public id formats of a node, by tag (`[format.TAG]`); a tag without one serves its
/// ids as they are.
pub type TagFormats = HashMap<Tag, IdFormat>;

/// Most leases one give-back may name: a client gives back the tail of its last one or two
/// leases.
pub const RETURN_LEASES_MAX: usize = 16;

/// How long [`Node::status`] waits for the store and Redis before reporting them down.
pub const STATUS_WAIT_MS: u64 = 1_000;

/// One node: its engines, its background loops, and the operations every transport calls.
/// Built by [`NodeBuilder`]; stopped by [`Node::shutdown`] once the transports drained.
pub struct Node {
    segments: Arc<Segments>,
    tinyid: TinyidSlot,
    batch_count_max: u64,
    /// The configured snowflake layout and its name, for decoding (the generator's, or the
    /// configuration's when the generator did not start).
    layout: Option<(String, Layout)>,
    /// The generator and its ring once they run (started with the node, or later by its
    /// retry loop), or why they do not.
    snowflake: SnowflakeSlot,
    sequences: SequenceSlot,
    /// Every tag's policy, read once per request.
    policies: Policies,
    /// How this node reaches its peers, if it was given a way.
    peers: Option<Arc<dyn PeerLink>>,
    /// The strict tags' engine, when the node's store holds leases and its peers can reach it.
    strict: Option<Arc<StrictTags>>,
    /// The store's tag metadata, where tags' policies are recorded (none on sets of databases).
    meta: Option<Arc<dyn TagMetaStore>>,
    uuids: Arc<Uuids>,
    /// The engines whose readiness gates the node's ([`Node::ready`]).
    ready_engines: Vec<ready::Engine>,
    clock: Arc<dyn Clock>,
    tasks: TaskTracker,
    cancel: CancellationToken,
}

/// A lease as a client sends it back: the range and the proof, not yet checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseParts {
    /// First id.
    pub start: u64,
    /// End (exclusive).
    pub end: u64,
    /// The proof the node answered with the range.
    pub proof: u64,
}

/// Snowflake ids and the worker id that made them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnowflakeIds {
    /// Increasing ids.
    pub ids: Vec<u64>,
    /// The node's worker id.
    pub worker: u64,
}

/// A snowflake-style id's parts, under a named layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedSnowflake {
    /// The layout's name: the node's, or the preset asked for.
    pub layout: String,
    /// The parts.
    pub parts: Parts,
}

/// What a public id text stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedText {
    /// The text decoded.
    pub text: String,
    /// The tag whose format decoded it, when decoded by tag.
    pub tag: Option<Tag>,
    /// That tag's template (`{id}` for a tag without a format).
    pub template: Option<String>,
    /// The number the text encodes (after the permutation).
    pub public_id: u64,
    /// The id the tag issued.
    pub id: u64,
    /// The template's rendered dates, in order.
    pub dates: Vec<String>,
}

/// A tag's store row, with what this node holds of it.
#[derive(Debug, Clone)]
pub struct TagView {
    /// The store row.
    pub record: TagRecord,
    /// This node's segments, pacing and counters, when it serves the tag.
    pub status: Option<TagStatus>,
    /// The tag's public id format, if it has one.
    pub format: Option<IdFormat>,
}

/// The node at a glance ([`Node::status`]): what a dashboard shows.
#[derive(Debug, Clone)]
pub struct NodeStatus {
    /// When the status was taken, ms since the Unix epoch.
    pub time_ms: u64,
    /// The store's description (password removed).
    pub store: String,
    /// Why the store is reported down, if it is.
    pub store_error: Option<String>,
    /// Every tag of the store, with this node's segments for the tags it serves.
    pub tags: Vec<(TagRecord, Option<TagStatus>)>,
    /// The snowflake generator's status, or why it does not run.
    pub snowflake: Result<SnowflakeStatus, String>,
    /// Ids in the cached ring, when the node serves from one.
    pub ring_ids: Option<u64>,
    /// The sequences.
    pub sequences: SequencesStatus,
    /// Tinyid's `biz_type`s, when the node serves a Tinyid database.
    pub tinyid: Option<TinyidStatus>,
}

/// The Tinyid database of [`NodeStatus`] and its `biz_type`s.
#[derive(Debug, Clone)]
pub struct TinyidStatus {
    /// The database's description (password removed).
    pub store: String,
    /// Why the database is reported down, if it is.
    pub store_error: Option<String>,
    /// Every row idmint can serve, with this node's buffer of each.
    pub biz_types: Vec<BizTypeView>,
}

/// What `GET /v1/tags/{name}` shows: a tag of the segment store, or a Tinyid `biz_type` of
/// that name when the store has no such tag.
#[derive(Debug, Clone)]
pub enum NamedView {
    /// A tag of the segment store.
    Tag(TagView),
    /// A Tinyid `biz_type`.
    BizType(BizTypeView),
    /// A strict tag, as [`StrictTags::record`] shows it.
    Strict(TagRecord),
}

/// The sequences of [`NodeStatus`].
#[derive(Debug, Clone, Default)]
pub struct SequencesStatus {
    /// Whether the engine runs.
    pub running: bool,
    /// Why it does not run, or why its list is missing.
    pub reason: Option<String>,
    /// Each definition and its current counter.
    pub items: Vec<(SequenceRecord, SequenceStatus)>,
    /// Ceiling raises this node made.
    pub raises: u64,
    /// Times this node reseeded a counter.
    pub reseeds: u64,
}

impl Node {
    // ---- plain and public ids -------------------------------------------------------

    /// How this node serves `tag` (its segments, step, rate, runway, counters), if it does:
    /// memory only, no store call.
    pub fn segment_status(&self, tag: &Tag) -> Option<TagStatus> {
        self.segments.status(tag)
    }

    /// How this node serves each tag it holds a generator for, sorted by tag (the metrics
    /// read it): memory only, bounded by `TAG_COUNT_MAX`.
    pub fn segment_statuses(&self) -> Vec<(Tag, TagStatus)> {
        self.segments.statuses()
    }

    /// Largest `count` a batch may ask for (at most `BATCH_COUNT_MAX`).
    pub fn batch_count_max(&self) -> u64 {
        self.batch_count_max
    }

    /// Largest `count` a sequence batch may ask for.
    pub fn sequence_count_max(&self) -> u64 {
        self.batch_count_max.min(SEQ_COUNT_MAX)
    }

    /// The store's description (password removed).
    pub fn store_description(&self) -> String {
        self.segments.store_description()
    }

    /// The public format of `tag`, if it has one.
    pub fn format(&self, tag: &Tag) -> Option<&IdFormat> {
        self.policies.format(tag)
    }

    /// How this node reaches the other nodes of its cluster, if its transport gave it a way
    /// ([`NodeBuilder::peer_link`]).
    pub fn peer_link(&self) -> Option<&Arc<dyn PeerLink>> {
        self.peers.as_ref()
    }

    /// For a strict tag, its owner as far as this node knows ([`StrictTags::owner`]): what
    /// the transports tell clients so that they can ask the owner directly. `None` for any
    /// other tag, or while the owner is unknown.
    pub fn strict_owner(&self, name: &str) -> Option<Owner> {
        let strict = self.strict.as_ref()?;
        let TagPolicy::Strict = self.policies.of(name) else { return None };
        strict.owner(name)
    }

    /// This node as its peers reach it, when it serves strict tags.
    pub fn strict_peer(&self) -> Option<&Peer> {
        self.strict.as_ref().map(|strict| strict.peer())
    }

    /// How this node serves the tag named `name`.
    pub fn policy(&self, name: &str) -> TagPolicy<'_> {
        self.policies.of(name)
    }

    /// The next id of the tag named `name` as text: its public id as the tag's format renders
    /// it, or the decimal id (written in place, nothing allocated). The name is as the
    /// request carries it (the path segment, percent-decoded): what a transport calls per
    /// request instead of parsing the name. A name the node serves is answered without a `Tag` being made (no parse, no
    /// allocation); any other name is parsed and answered as its `Tag`
    /// is: a bad name (an internal row's in any ASCII case included) is [`NodeError::Tag`]
    /// with `Tag::parse`'s reason, an unknown tag `NodeError::Segment(Error::UnknownTag)`.
    ///
    /// Lazy and small as [`Segments::next_id`]'s future: for a tag without a format, a hit is
    /// the take and the digits, inlined into the caller's poll (`segment/take_first.rs`).
    #[inline]
    pub fn next_public_text_by_name<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Future<Output = Result<PublicText, NodeError>> + Send + 'a {
        TakeFirst::new(
            move || self.try_public_decimal(name, || self.segments.try_next_id_by_name(name)),
            move || -> Waiting<'a, NodeError, PublicText> {
                Box::pin(async move {
                    let mut policy = self.policies.of(name);
                    if let TagPolicy::Plain = policy {
                        match self.segments.next_id_by_name(name).await {
                            Ok(id) => return Ok(PublicText::decimal(id)),
                            Err(error) => {
                                let error = NodeError::from(error);
                                policy = self.recorded_strict(name, error).await?;
                            }
                        }
                    }
                    policy.served(name)?;
                    if let TagPolicy::Strict = policy {
                        let range = self.strict_ids(&Tag::parse(name)?, Count::ONE).await?;
                        return Ok(PublicText::decimal(range.start()));
                    }
                    let id = self.segments.next_id_by_name(name).await?;
                    self.public_text(policy, id)
                })
            },
        )
    }

    /// [`Node::next_public_text_by_name`] without waiting: the decimal text of the next id of
    /// the served tag named `name` when it has no format and its buffer holds an id now;
    /// `None` otherwise (nothing was taken: the caller awaits
    /// [`Node::next_public_text_by_name`], which says why or waits).
    ///
    /// A transport's hot path tries this first: its answer is two words, where the awaited
    /// take's `Result` is the size of [`NodeError`] and the caller copies it whole.
    #[inline]
    pub fn try_public_text_by_name(&self, name: &str) -> Option<PublicText> {
        self.try_public_decimal(name, || self.segments.try_next_id_by_name(name))
    }

    /// The take as decimal text, for a tag without a format, when its buffer holds an id:
    /// the fast path of the two takes as text. `None` sends the request the waiting way
    /// (which takes then, so nothing is taken twice: `take` ran only if it is called here).
    #[inline(always)]
    fn try_public_decimal(
        &self,
        name: &str,
        take: impl FnOnce() -> Option<u64>,
    ) -> Option<PublicText> {
        match self.policies.of(name) {
            TagPolicy::Plain => take().map(PublicText::decimal),
            TagPolicy::Formatted(_) | TagPolicy::Refused(_) | TagPolicy::Strict => None,
        }
    }

    /// `id` of a tag served under `policy`, as text.
    #[inline]
    fn public_text(&self, policy: TagPolicy<'_>, id: u64) -> Result<PublicText, NodeError> {
        let TagPolicy::Formatted(format) = policy else {
            return Ok(PublicText::decimal(id));
        };
        Ok(PublicText::rendered(format.at(&format.zoned(self.clock.now_ms()))?.render(id)?))
    }

    /// `count` public ids of `tag`: rendered by the tag's format if it has one (texts, or
    /// numbers for a numeric template), else the ids as they are.
    pub async fn next_public_ids(&self, tag: &Tag, count: Count) -> Result<PublicIds, NodeError> {
        let mut policy = self.policies.of(tag.as_str());
        if let TagPolicy::Plain = policy {
            match self.segments.next_ids(tag, count).await {
                Ok(ranges) => return self.public_ids(policy, &ranges),
                Err(error) => policy = self.recorded_strict(tag.as_str(), error.into()).await?,
            }
        }
        policy.served(tag.as_str())?;
        if let TagPolicy::Strict = policy {
            let range = self.strict_ids(tag, count).await?;
            return Ok(PublicIds::Numbers(range.ids().collect()));
        }
        let ranges = self.segments.next_ids(tag, count).await?;
        self.public_ids(policy, &ranges)
    }

    /// The public ids of `ranges` of a tag served under `policy`.
    fn public_ids(
        &self,
        policy: TagPolicy<'_>,
        ranges: &[IdRange],
    ) -> Result<PublicIds, NodeError> {
        let ids = ranges.iter().flat_map(|r| r.ids());
        let TagPolicy::Formatted(format) = policy else {
            return Ok(PublicIds::Numbers(ids.collect()));
        };
        if format.is_numeric() {
            let publics = ids.map(|id| format.public_id(id)).collect::<Result<Vec<_>, _>>()?;
            return Ok(PublicIds::Numbers(publics));
        }
        let renderer = format.at(&format.zoned(self.clock.now_ms()))?;
        let texts = ids.map(|id| renderer.render(id)).collect::<Result<_, _>>()?;
        Ok(PublicIds::Texts(texts))
    }

    /// `count` ids of the strict tag `tag` for a peer that found this node holding the tag's
    /// lease under `fence`: served only under that very holding, never forwarded on
    /// ([`StrictTags::next_ids_held`]).
    pub async fn forwarded_ids(
        &self,
        tag: &Tag,
        count: Count,
        fence: crate::peer::FenceToken,
    ) -> Result<IdRange, NodeError> {
        let Some(strict) = &self.strict else {
            return Err(policy::refusal(tag.as_str(), POLICY_STRICT));
        };
        Ok(strict.next_ids_held(tag, count, fence).await?)
    }

    /// The policy of a tag the segment engine refused with `error`: strict when the store
    /// records it so (a strict tag created after this node started, learnt here), else the
    /// refusal as it was.
    async fn recorded_strict(
        &self,
        name: &str,
        error: NodeError,
    ) -> Result<TagPolicy<'_>, NodeError> {
        let unknown = matches!(
            error,
            NodeError::Segment(Error::UnknownTag(_) | Error::Store(StoreError::TagNotFound(_)))
        );
        let (true, Some(meta)) = (unknown, &self.meta) else { return Err(error) };
        let Ok(tag) = Tag::parse(name) else { return Err(error) };
        // Bounded as the segment engine bounds its lookups: a name found unrecorded is not
        // looked up again for `UNKNOWN_TAG_TTL_MS`, at most `UNKNOWN_TAG_LOOKUPS_PER_S_MAX`
        // such lookups a second.
        match self.policies.unrecorded.admit(&tag) {
            Admission::Lookup => {}
            Admission::Unknown => return Err(error),
            Admission::OverBudget => {
                let reason = format!(
                    "this node already looked up {UNKNOWN_TAG_LOOKUPS_PER_S_MAX} names the store \
                     does not hold in the last second, the most it does; retry"
                );
                return Err(NodeError::Segment(Error::Unavailable { tag, reason }));
            }
        }
        match meta.meta(&tag, POLICY_NAME).await {
            // The name may be a strict tag: unavailable, not unknown, until the store answers.
            Err(store) => {
                let reason = store.to_string();
                Err(NodeError::Segment(Error::Unavailable { tag, reason }))
            }
            Ok(Some(value)) if value == POLICY_STRICT => {
                if self.strict.is_none() {
                    return Ok(TagPolicy::Refused(POLICY_STRICT));
                }
                self.policies.learn_strict(tag);
                Ok(TagPolicy::Strict)
            }
            _ => {
                self.policies.unrecorded.record(&tag);
                Err(error)
            }
        }
    }

    /// `count` ids of the strict tag `tag`, from this node when it owns the tag, else from
    /// its owner.
    async fn strict_ids(&self, tag: &Tag, count: Count) -> Result<IdRange, NodeError> {
        let Some(strict) = &self.strict else {
            return Err(policy::refusal(tag.as_str(), POLICY_STRICT));
        };
        match strict.next_ids(tag, count).await {
            Ok(range) => Ok(range),
            Err(error @ Error::UnknownTag(_)) => {
                // Deleted on another node: no longer strict here either.
                self.policies.forget_strict(tag);
                Err(error.into())
            }
            Err(error) => Err(error.into()),
        }
    }

    // ---- the timestamp oracle ------------------------------------------------------------

    /// Largest `count` a timestamp batch may ask for: the batch limit, at most
    /// [`idmint_core::tso::BATCH_MAX`] (a batch shares one millisecond).
    pub fn tso_count_max(&self) -> u64 {
        self.batch_count_max.min(idmint_core::tso::BATCH_MAX)
    }

    /// `count` timestamps of the cluster's oracle, `[first, first + count)`, in one
    /// millisecond, greater than every timestamp answered before this call on any node; from
    /// this node when it owns the oracle, else from its owner.
    pub async fn timestamps(&self, count: Count) -> Result<IdRange, NodeError> {
        let Some(strict) = &self.strict else {
            return Err(NodeError::NotConfigured {
                feature: Feature::Tso,
                reason: "this node serves no timestamp oracle: it needs a store that holds \
                         leases and tag metadata (SQLite, MySQL, PostgreSQL or Redis, not \
                         several databases or Flicker) and a gRPC listener its peers reach \
                         (grpc_listen)"
                    .to_string(),
            });
        };
        let max = self.tso_count_max();
        if count.get() > max {
            return Err(NodeError::Value(idmint_core::ValueError::Count { got: count.get(), max }));
        }
        strict.timestamps(count).await.map_err(|error| match error {
            Error::ShuttingDown => NodeError::Segment(Error::ShuttingDown),
            Error::Unavailable { reason, .. } => NodeError::TsoUnavailable(reason),
            // Final: the oracle's time is spent (past the year 4199), 409 as a spent tag.
            spent @ Error::Store(StoreError::Exhausted { .. }) => NodeError::Segment(spent),
            other => NodeError::TsoUnavailable(other.to_string()),
        })
    }

    /// [`Node::timestamps`] for a peer that found this node holding the oracle's lease under
    /// `fence`: served only under that very holding, never forwarded on.
    pub async fn forwarded_timestamps(
        &self,
        count: Count,
        fence: crate::peer::FenceToken,
    ) -> Result<IdRange, NodeError> {
        let Some(strict) = &self.strict else {
            return Err(NodeError::TsoUnavailable("this node serves no oracle".to_string()));
        };
        let tso = crate::strict::tso_tag();
        strict.next_ids_held(&tso, count, fence).await.map_err(|error| match error {
            Error::Unavailable { reason, .. } => NodeError::TsoUnavailable(reason),
            other => NodeError::TsoUnavailable(other.to_string()),
        })
    }

    /// A timestamp's parts (physical milliseconds, logical counter, time).
    pub fn decode_timestamp(&self, timestamp: u64) -> idmint_core::tso::Parts {
        idmint_core::tso::decode(timestamp)
    }

    // ---- leases ---------------------------------------------------------------------

    /// `count` ids of `tag` leased to a client as ranges with this node's proofs. A tag with
    /// a public id format is refused: its internal ids do not leave the node.
    pub async fn lease(&self, tag: &Tag, count: Count) -> Result<Vec<RangeLease>, NodeError> {
        let mut policy = self.policies.of(tag.as_str());
        if let TagPolicy::Plain = policy {
            match self.segments.lease(tag, count).await {
                Ok(leases) => return Ok(leases),
                // A strict tag this node has not met yet is refused as strict, not unknown.
                Err(error) => policy = self.recorded_strict(tag.as_str(), error.into()).await?,
            }
        }
        // (`recorded_strict` never answers plain: that arm leases as a plain tag would.)
        match policy {
            TagPolicy::Formatted(_) => Err(NodeError::FormattedTag(tag.clone())),
            TagPolicy::Strict => Err(NodeError::StrictTag(tag.clone())),
            TagPolicy::Refused(value) => Err(policy::refusal(tag.as_str(), value)),
            TagPolicy::Plain => Ok(self.segments.lease(tag, count).await?),
        }
    }

    /// Takes back `[start, end)`, unused ids of `leases` (at most [`RETURN_LEASES_MAX`],
    /// each a range this node leased): how many ids were taken back (0 when it cannot be
    /// proven safe).
    pub fn take_back(
        &self,
        tag: &Tag,
        start: u64,
        end: u64,
        leases: &[LeaseParts],
    ) -> Result<u64, NodeError> {
        let leases = checked_leases(leases)?;
        let returned = self
            .segments
            .take_back(tag, start, end, &leases)
            .map_err(|e| NodeError::BadLease(e.to_string()))?;
        if returned > 0 {
            tracing::debug!(%tag, start, end, "leased ids taken back");
        }
        Ok(returned)
    }

    // ---- snowflake ------------------------------------------------------------------

    /// The running snowflake generator, or why there is none: not configured, or configured
    /// so that it cannot run ([`NodeError::NotConfigured`], final); no worker id free at
    /// start, or the layout's time run out ([`NodeError::Snowflake`], final until the node
    /// restarts); or not started yet for a reason that passes by itself
    /// ([`NodeError::SnowflakeNotRunning`]: the start is retried in the background). One
    /// acquire load when it runs.
    pub fn snowflake(&self) -> Result<&Arc<Snowflake>, NodeError> {
        Ok(&self.snowflake.get()?.generator)
    }

    /// The ring of pre-made snowflake ids, when the node serves from one (and it runs).
    pub fn snowflake_ring(&self) -> Option<&Arc<CachedSnowflake>> {
        self.snowflake.engine().and_then(|engines| engines.ring.as_ref())
    }

    /// The configured snowflake layout's name (its worker space), whether or not the
    /// generator runs: what metrics label a generator not started yet with.
    pub fn snowflake_space(&self) -> Option<&str> {
        self.layout.as_ref().map(|(space, _)| space.as_str())
    }

    /// Whether the snowflake generator's start failed for a reason that passes by itself and
    /// is being retried in the background (no generator yet).
    pub fn snowflake_starting(&self) -> bool {
        self.snowflake.starting()
    }

    /// `count` snowflake ids: from the ring of pre-made ids when the node runs one, else from
    /// the generator.
    pub async fn next_snowflake_ids(&self, count: Count) -> Result<Vec<u64>, NodeError> {
        let engines = self.snowflake.get()?;
        Ok(match &engines.ring {
            Some(cached) => cached.next_ids(count.get()).await?,
            None => engines.generator.next_ids(count.get()).await?,
        })
    }

    /// [`Node::next_snowflake_ids`], and the worker id that made them.
    pub async fn snowflake_ids(&self, count: Count) -> Result<SnowflakeIds, NodeError> {
        let ids = self.next_snowflake_ids(count).await?;
        Ok(SnowflakeIds { ids, worker: self.snowflake()?.status().worker })
    }

    /// The parts of `id` under the layout `layout` names (a preset, or the name of the
    /// node's configured layout, `custom` for one set bit by bit), or by default the node's
    /// configured layout, even when its generator did not start.
    pub fn decode_snowflake(
        &self,
        id: u64,
        layout: Option<&str>,
    ) -> Result<DecodedSnowflake, NodeError> {
        if id > i64::MAX as u64 {
            return Err(NodeError::BadId(format!(
                "{id} is not an id; give a number from 0 to {}",
                i64::MAX
            )));
        }
        let configured = self.layout.as_ref();
        let (name, layout) = match layout {
            // The node's own layout first: a custom one may differ from the preset it names.
            Some(name) if configured.is_some_and(|(own, _)| own == name) => {
                configured.cloned().ok_or_else(|| NodeError::BadLayout(name.to_string()))?
            }
            Some(name) => {
                let layout = Layout::preset(name).ok_or_else(|| {
                    let own = configured.map(|(own, _)| format!(", or {own} (this node's)"));
                    NodeError::BadLayout(format!(
                        "{name:?} is not a layout; use snowflake, sonyflake, uid or js-safe{}",
                        own.unwrap_or_default()
                    ))
                })?;
                (name.to_string(), layout)
            }
            None => match configured {
                Some(own) => own.clone(),
                None => {
                    let generator = self.snowflake()?;
                    (generator.status().space, *generator.layout())
                }
            },
        };
        let parts = layout
            .decode(id)
            .ok_or_else(|| NodeError::BadId(format!("{id} is not an id of layout {layout}")))?;
        Ok(DecodedSnowflake { layout: name, parts })
    }

    // ---- public id decoding ---------------------------------------------------------

    /// What `text` stands for under `tag`'s format or an `encoding` (exactly one of the
    /// two). A tag that does not exist is [`crate::segment::Error::UnknownTag`].
    pub async fn decode_text(
        &self,
        text: String,
        tag: Option<Tag>,
        encoding: Option<&str>,
    ) -> Result<DecodedText, NodeError> {
        let not_an_id = |e: &dyn std::fmt::Display| NodeError::NotAnId(e.to_string());
        match (tag, encoding) {
            (Some(tag), None) => {
                // A tag this node serves exists; any other is looked up in the store.
                if self.segments.status(&tag).is_none() {
                    self.segments.get_tag(&tag).await?;
                }
                let plain = IdFormat::plain();
                let format = self.policies.format(&tag).unwrap_or(&plain);
                let decoded = format.decode(&text).map_err(|e| not_an_id(&e))?;
                Ok(DecodedText {
                    text,
                    tag: Some(tag),
                    template: Some(format.template().to_string()),
                    public_id: decoded.public_id,
                    id: decoded.internal_id,
                    dates: decoded.dates,
                })
            }
            (None, Some(name)) => {
                let encoding =
                    Encoding::parse(name).map_err(|e| NodeError::BadEncoding(e.to_string()))?;
                let id = encoding.decode(&text).map_err(|e| not_an_id(&e))?;
                Ok(DecodedText {
                    text,
                    tag: None,
                    template: None,
                    public_id: id,
                    id,
                    dates: Vec::new(),
                })
            }
            _ => Err(NodeError::DecodeHow(
                "give exactly one of tag= (decode with the tag's format) or encoding= \
                 (decimal, base36, base62, crockford32)"
                    .to_string(),
            )),
        }
    }

    // ---- UUIDs ----------------------------------------------------------------------

    /// The node's UUID and ULID maker.
    pub fn uuids(&self) -> &Uuids {
        &self.uuids
    }

    // ---- tag admin ------------------------------------------------------------------

    /// Every tag in the store (the strict ones: [`Node::list_strict_tags`]).
    pub async fn list_tags(&self) -> Result<Vec<TagRecord>, NodeError> {
        Ok(self.segments.list_tags().await?)
    }

    /// Every strict tag recorded in the store, as [`StrictTags::record`] shows it (none on a
    /// node that serves no strict tags).
    pub async fn list_strict_tags(&self) -> Result<Vec<TagRecord>, NodeError> {
        let (Some(strict), Some(meta)) = (&self.strict, &self.meta) else { return Ok(Vec::new()) };
        let recorded = meta.meta_of_every_tag(POLICY_NAME).await;
        let recorded = recorded.map_err(|e| NodeError::Segment(Error::Store(e)))?;
        let mut records = Vec::new();
        for (tag, policy) in recorded {
            if policy == POLICY_STRICT {
                records.push(strict.record(&tag).await?);
            }
        }
        records.sort_unstable_by(|a, b| a.tag.cmp(&b.tag));
        Ok(records)
    }

    /// Creates a tag (a plain one: a row of the segment table). A name a strict tag holds is
    /// refused as taken.
    pub async fn create_tag(&self, spec: &TagSpec) -> Result<CreatedTag, NodeError> {
        let taken = || NodeError::Segment(Error::Store(StoreError::TagExists(spec.tag.clone())));
        if self.recorded_policy(&spec.tag).await?.as_deref() == Some(POLICY_STRICT) {
            return Err(taken());
        }
        // A strict tag deleted under this name leaves its ceiling: start above it.
        let mut spec = spec.clone();
        if let Some(ceiling) = self.strict_ceiling(&spec.tag).await? {
            let above = ceiling.saturating_add(1);
            match spec.start {
                Some(start) if start.get() < above && !spec.force => {
                    let (tag, start, tomb) = (spec.tag.clone(), start.get(), above);
                    let below = StoreError::StartBelowIssued { tag, start, tomb };
                    return Err(NodeError::Segment(Error::Store(below)));
                }
                Some(_) => {}
                None => spec.start = Some(StartId::new(above)?),
            }
        }
        let spec = &spec;
        let created = self.segments.create_tag(spec).await?;
        // A strict tag of the name recorded meanwhile: one of the two creations gives way (each
        // writes first, then reads the other's record).
        if self.recorded_policy(&spec.tag).await?.as_deref() == Some(POLICY_STRICT) {
            self.segments.delete_tag(&spec.tag).await?;
            return Err(taken());
        }
        tracing::info!(tag = %spec.tag, step = spec.step.get(), max_id = created.record.max_id, "tag created");
        Ok(created)
    }

    /// A tag's store row, this node's segments of it and its format.
    pub async fn get_tag(&self, tag: &Tag) -> Result<TagView, NodeError> {
        let record = self.segments.get_tag(tag).await?;
        let status = self.segments.status(tag);
        Ok(TagView { record, status, format: self.policies.format(tag).cloned() })
    }

    /// The tag of that name, or, when the store has none and the node serves a Tinyid
    /// database, the `biz_type` of that name; a name that is neither is
    /// [`NodeError::UnknownName`] (with Tinyid) or the segment engine's unknown tag.
    pub async fn get_tag_or_biz_type(&self, name: &Tag) -> Result<NamedView, NodeError> {
        let missing = match self.get_tag(name).await {
            Ok(view) => return Ok(NamedView::Tag(view)),
            Err(NodeError::Segment(
                error @ (Error::UnknownTag(_) | Error::Store(StoreError::TagNotFound(_))),
            )) => error,
            Err(error) => return Err(error),
        };
        if let (Some(strict), Some(POLICY_STRICT)) =
            (&self.strict, self.recorded_policy(name).await?.as_deref())
        {
            return Ok(NamedView::Strict(strict.record(name).await?));
        }
        let Some(tinyid) = self.tinyid.engine() else { return Err(NodeError::Segment(missing)) };
        match tinyid.biz_type(name).await {
            Ok(view) => Ok(NamedView::BizType(view)),
            Err(Error::UnknownTag(_) | Error::Store(StoreError::TagNotFound(_))) => {
                Err(NodeError::UnknownName(name.clone()))
            }
            Err(error) => Err(NodeError::Segment(error)),
        }
    }

    /// Changes a tag's step (from its next refill).
    pub async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, NodeError> {
        let record = match self.segments.set_step(tag, step).await {
            Ok(record) => record,
            Err(error) => return Err(self.not_a_tag(tag, error).await),
        };
        tracing::info!(%tag, step = step.get(), "tag step changed");
        Ok(record)
    }

    /// Creates the strict tag `tag` (its ids increase in real time across the cluster), owned
    /// by this node to begin with; its first id is at least `start` when given (a tag created
    /// again under a deleted one's name starts above every id the old one had).
    pub async fn create_strict_tag(
        &self,
        tag: &Tag,
        start: Option<StartId>,
    ) -> Result<TagRecord, NodeError> {
        let (Some(strict), Some(meta)) = (&self.strict, &self.meta) else {
            return Err(policy::refusal(tag.as_str(), POLICY_STRICT));
        };
        if let Some(start) = start.filter(|s| s.get() > crate::strict::STRICT_ID_MAX) {
            return Err(NodeError::BadId(format!(
                "start {} is above the largest id of a strict tag, {} (2^53 - 1)",
                start.get(),
                crate::strict::STRICT_ID_MAX
            )));
        }
        let taken = || NodeError::Segment(Error::Store(StoreError::TagExists(tag.clone())));
        let store = |e: StoreError| NodeError::Segment(Error::Store(e));
        if self.segments.get_tag(tag).await.is_ok() {
            return Err(taken());
        }
        let recorded = match meta.compare_and_set_meta(tag, POLICY_NAME, None, POLICY_STRICT).await
        {
            Ok(true) => true,
            Ok(false) => meta
                .compare_and_set_meta(tag, POLICY_NAME, Some(POLICY_PLAIN), POLICY_STRICT)
                .await
                .map_err(store)?,
            Err(error) => return Err(store(error)),
        };
        if !recorded {
            return Err(taken());
        }
        // Above where a plain tag deleted under this name stopped, and above `start`.
        let first = match self.segments.tombstone(tag).await {
            Ok(tomb) => tomb.unwrap_or(0).max(start.map_or(0, StartId::get)),
            Err(error) => {
                self.unrecord_strict(meta, tag).await;
                return Err(error.into());
            }
        };
        // A plain tag of the name created meanwhile: this creation gives way.
        if self.segments.get_tag(tag).await.is_ok() {
            meta.compare_and_set_meta(tag, POLICY_NAME, Some(POLICY_STRICT), POLICY_PLAIN)
                .await
                .map_err(store)?;
            return Err(taken());
        }
        self.policies.learn_strict(tag.clone());
        if let Err(error) = strict.claim(tag, (first > 0).then_some(first)).await {
            // Not created: a retry must find the name free and apply its start.
            self.policies.forget_strict(tag);
            self.unrecord_strict(meta, tag).await;
            return Err(error.into());
        }
        tracing::info!(%tag, "strict tag created");
        Ok(strict.record(tag).await?)
    }

    /// Sets `tag`'s recorded policy back from strict to plain (a creation that did not
    /// complete); a failure is logged (the tag then stays strict, with no id served yet).
    async fn unrecord_strict(&self, meta: &Arc<dyn TagMetaStore>, tag: &Tag) {
        let undo = meta.compare_and_set_meta(tag, POLICY_NAME, Some(POLICY_STRICT), POLICY_PLAIN);
        if let Err(error) = undo.await {
            tracing::warn!(%tag, %error, "a strict tag's creation failed and its policy stays");
        }
    }

    /// The ceiling recorded for a strict tag of this name, deleted or not (every id it
    /// handed out is at or below it).
    async fn strict_ceiling(&self, tag: &Tag) -> Result<Option<u64>, NodeError> {
        let Some(meta) = &self.meta else { return Ok(None) };
        let value = meta.meta(tag, crate::strict::CEILING_META_NAME).await;
        let value = value.map_err(|e| NodeError::Segment(Error::Store(e)))?;
        Ok(value.and_then(|v| v.parse().ok()))
    }

    /// The policy recorded for `tag` in the store's tag metadata (none without metadata).
    async fn recorded_policy(&self, tag: &Tag) -> Result<Option<String>, NodeError> {
        let Some(meta) = &self.meta else { return Ok(None) };
        meta.meta(tag, POLICY_NAME).await.map_err(|e| NodeError::Segment(Error::Store(e)))
    }

    /// Deletes a tag (a strict one: its policy is set back to plain on the store, and this
    /// node gives its lease back; the lease's mark stays).
    pub async fn delete_tag(&self, tag: &Tag) -> Result<(), NodeError> {
        let strict = match self.policies.of(tag.as_str()) {
            TagPolicy::Strict => true,
            _ => self.recorded_policy(tag).await?.as_deref() == Some(POLICY_STRICT),
        };
        if let (Some(meta), true) = (&self.meta, strict) {
            let store = |e: StoreError| NodeError::Segment(Error::Store(e));
            let changed = meta
                .compare_and_set_meta(tag, POLICY_NAME, Some(POLICY_STRICT), POLICY_PLAIN)
                .await
                .map_err(store)?;
            self.policies.forget_strict(tag);
            if let Some(strict) = &self.strict {
                strict.release(tag).await;
            }
            if !changed {
                return Err(NodeError::Segment(Error::UnknownTag(tag.clone())));
            }
            tracing::info!(%tag, "strict tag deleted");
            return Ok(());
        }
        if let Err(error) = self.segments.delete_tag(tag).await {
            return Err(self.not_a_tag(tag, error).await);
        }
        tracing::info!(%tag, "tag deleted");
        Ok(())
    }

    /// A tag admin refusal; an unknown tag that is a Tinyid `biz_type` is named as one
    /// ([`NodeError::BizTypeNotAdministered`]), not as a tag to create.
    async fn not_a_tag(&self, name: &Tag, error: Error) -> NodeError {
        let unknown =
            matches!(error, Error::UnknownTag(_) | Error::Store(StoreError::TagNotFound(_)));
        if let (true, Some(tinyid)) = (unknown, self.tinyid.engine())
            && tinyid.biz_type(name).await.is_ok()
        {
            return NodeError::BizTypeNotAdministered(name.clone());
        }
        NodeError::Segment(error)
    }

    // ---- sequences ------------------------------------------------------------------

    /// The sequence engine, or why it does not run (yet).
    pub fn sequences(&self) -> Result<&Arc<Sequences>, NodeError> {
        self.sequences.get()
    }

    /// `count` numbers of sequence `name` (at most [`Node::sequence_count_max`]).
    pub async fn sequence_ids(&self, name: &Tag, count: Count) -> Result<SequenceIds, NodeError> {
        Ok(self.sequences()?.next(name, count.get()).await?)
    }

    /// Every sequence definition.
    pub async fn list_sequences(&self) -> Result<Vec<SequenceRecord>, NodeError> {
        Ok(self.sequences()?.list().await?)
    }

    /// Defines a sequence, created now by the node's clock (`spec.created_ms` is replaced).
    pub async fn create_sequence(
        &self,
        mut spec: SequenceSpec,
    ) -> Result<SequenceRecord, NodeError> {
        let engine = self.sequences()?;
        spec.created_ms = self.clock.now_ms();
        let record = engine.create(spec).await?;
        tracing::info!(sequence = %record.name, daily = record.daily, "sequence created");
        Ok(record)
    }

    /// A sequence's definition and current counter.
    pub async fn sequence_status(&self, name: &Tag) -> Result<SequenceStatus, NodeError> {
        Ok(self.sequences()?.status(name).await?)
    }

    /// Deletes a sequence and its counters (its ceilings stay).
    pub async fn delete_sequence(&self, name: &Tag) -> Result<(), NodeError> {
        self.sequences()?.delete(name).await?;
        tracing::info!(sequence = %name, "sequence deleted");
        Ok(())
    }

    // ---- readiness and status -------------------------------------------------------

    /// Leaf's `/cache`: every tag of the store, and any this node still serves, sorted by
    /// tag, each with this node's buffer of it (`None`: not loaded here, as Leaf lists a
    /// row it has not initialised). Bounded by the tag count limit.
    pub async fn leaf_cache(&self) -> Result<Vec<(Tag, Option<TagStatus>)>, NodeError> {
        let records = self.segments.list_tags().await?;
        let mut buffers: std::collections::BTreeMap<Tag, Option<TagStatus>> =
            records.into_iter().map(|record| (record.tag, None)).collect();
        for (tag, status) in self.segments.statuses() {
            buffers.insert(tag, Some(status));
        }
        Ok(buffers.into_iter().collect())
    }

    /// Leaf's `/db`: every row of the tag table with its `update_time` as the database
    /// writes it as text, or, for a store whose time has no text of its own, as
    /// `yyyy-MM-dd HH:mm:ss` in UTC.
    pub async fn leaf_rows(&self) -> Result<Vec<(TagRecord, String)>, NodeError> {
        let records = self.segments.list_tags().await?;
        let texts: HashMap<Tag, String> =
            self.segments.update_times_text().await?.into_iter().collect();
        Ok(records
            .into_iter()
            .map(|record| {
                let text = texts.get(&record.tag).cloned().unwrap_or_else(|| {
                    let utc = UtcMs(record.update_time_s.saturating_mul(1000)).to_string();
                    // `2026-11-28T14:03:07.000Z` -> `2026-11-28 14:03:07`
                    utc.get(..19).unwrap_or(&utc).replacen('T', " ", 1)
                });
                (record, text)
            })
            .collect())
    }

    /// The node at a glance; a store or Redis that does not answer within
    /// [`STATUS_WAIT_MS`] is reported down, not as an error.
    pub async fn status(&self) -> NodeStatus {
        let wait = Duration::from_millis(STATUS_WAIT_MS);
        let (records, store_error) =
            match tokio::time::timeout(wait, self.segments.list_tags()).await {
                Ok(Ok(records)) => (records, None),
                Ok(Err(error)) => (Vec::new(), Some(error.to_string())),
                Err(_) => (Vec::new(), Some(format!("the store did not answer within {wait:?}"))),
            };
        let tags = records
            .into_iter()
            .map(|record| {
                let status = self.segments.status(&record.tag);
                (record, status)
            })
            .collect();
        let sequences = tokio::time::timeout(wait, self.sequences_status()).await;
        let tinyid = match self.tinyid.engine() {
            Some(tinyid) => Some(tinyid_status(tinyid, wait).await),
            None => None,
        };
        NodeStatus {
            time_ms: self.clock.now_ms(),
            store: self.segments.store_description(),
            store_error,
            tags,
            snowflake: match self.snowflake.engine() {
                Some(engines) => Ok(engines.generator.status()),
                None => Err(self.snowflake.reason().unwrap_or_default()),
            },
            ring_ids: self.snowflake_ring().map(|ring| ring.len()),
            sequences: sequences.unwrap_or_else(|_| SequencesStatus {
                running: true,
                reason: Some(format!("Redis did not answer within {wait:?}")),
                ..SequencesStatus::default()
            }),
            tinyid,
        }
    }

    async fn sequences_status(&self) -> SequencesStatus {
        let engine = match self.sequences.get() {
            Ok(engine) => engine,
            Err(error) => {
                return SequencesStatus {
                    running: false,
                    reason: Some(error.to_string()),
                    ..SequencesStatus::default()
                };
            }
        };
        let mut status = SequencesStatus {
            running: true,
            reason: None,
            items: Vec::new(),
            raises: engine.raises(),
            reseeds: engine.reseeds(),
        };
        match engine.list().await {
            Ok(records) => {
                for record in records {
                    if let Ok(counter) = engine.status(&record.name).await {
                        status.items.push((record, counter));
                    }
                }
            }
            Err(error) => status.reason = Some(error.to_string()),
        }
        status
    }

    // ---- Tinyid ---------------------------------------------------------------------

    /// The Tinyid engine, when the node serves a Tinyid database.
    pub fn tinyid(&self) -> Result<&Arc<Tinyid>, NodeError> {
        self.tinyid.get()
    }

    /// Whether `token` opens `biz_type` in Tinyid's `tiny_id_token` (constant time).
    pub fn tinyid_token_opens(&self, biz_type: &Tag, token: &str) -> Result<bool, NodeError> {
        Ok(self.tinyid()?.token_opens(biz_type, token))
    }

    /// `batch_size` ids of a Tinyid `biz_type` (cut to `tinyid.batch_size_max`, as Tinyid
    /// cuts to its `batch.size.max`), increasing, each `≡ remainder (mod delta)`.
    pub async fn tinyid_ids(
        &self,
        biz_type: &Tag,
        batch_size: Count,
    ) -> Result<Vec<u64>, NodeError> {
        self.tinyid()?.next_ids(biz_type, batch_size).await.map_err(tinyid_error)
    }

    /// A Tinyid segment for a Tinyid client (`nextSegmentId`).
    pub async fn tinyid_segment(&self, biz_type: &Tag) -> Result<TinyidSegment, NodeError> {
        self.tinyid()?.next_segment(biz_type).await.map_err(tinyid_error)
    }

    // ---- shutdown -------------------------------------------------------------------

    /// Stops the node, after the transports drained, in this order: freeze every segment
    /// generator and give unissued ids back (the Tinyid `biz_type`s' too, at the same time),
    /// stop the node's own loops (the snowflake start's retry, which stops a generator it
    /// started meanwhile, and the Redis retry) and wait for them, close the snowflake ring
    /// (its filler stopped, its pre-made ids discarded, every take refused), stop the
    /// snowflake generator (its lease released: nothing made under it is handed out after),
    /// stop the sequence engine. Idempotent.
    pub async fn shutdown(&self) {
        // Side by side: each gives back within its own bound, so together within one.
        let tinyid = async {
            if let Some(tinyid) = self.tinyid.engine() {
                tinyid.shutdown().await;
            }
        };
        let strict = async {
            if let Some(strict) = &self.strict {
                strict.shutdown().await;
            }
        };
        tokio::join!(self.segments.shutdown(), tinyid, strict);
        // Before the generator: once the loops ended, no generator appears in the slot.
        self.cancel.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        if let Some(engines) = self.snowflake.engine() {
            if let Some(ring) = &engines.ring {
                ring.shutdown().await;
            }
            engines.generator.shutdown().await;
        }
        if let Ok(engine) = self.sequences.get() {
            engine.shutdown().await;
        }
    }
}

impl Drop for Node {
    /// A node dropped without [`Node::shutdown`] still stops its own loops (the snowflake
    /// start's retry, the Redis retry): they never outlive it.
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// Checks the leases a client sends back: at most [`RETURN_LEASES_MAX`], each a range.
fn checked_leases(leases: &[LeaseParts]) -> Result<Vec<RangeLease>, NodeError> {
    if leases.len() > RETURN_LEASES_MAX {
        return Err(NodeError::BadLease(format!(
            "{} leases sent; give back at most {RETURN_LEASES_MAX} leases at once",
            leases.len()
        )));
    }
    leases
        .iter()
        .map(|l| {
            let range = IdRange::new(l.start, l.end).ok_or_else(|| {
                NodeError::BadLease(format!(
                    "lease [{}, {}) is not a range of ids; send the leases as NextRange \
                     answered them",
                    l.start, l.end
                ))
            })?;
            Ok(RangeLease { range, proof: l.proof })
        })
        .collect()
}

/// The node's sequence engine once it runs, or why it does not (yet): it starts after the
/// node when Redis is not reachable at first.
type SequenceSlot = EngineSlot<Arc<Sequences>>;

impl Slotted for Arc<Sequences> {
    type Failure = std::convert::Infallible;

    fn refusal(standing: &Absence<Self::Failure>) -> NodeError {
        match standing {
            Absence::NotConfigured(reason) => {
                NodeError::NotConfigured { feature: Feature::Sequences, reason: reason.clone() }
            }
            Absence::Starting(reason) => NodeError::SequencesNotRunning(reason.clone()),
            Absence::ShutDown => NodeError::Segment(Error::ShuttingDown),
            Absence::Failed(never) => match *never {},
        }
    }
}

/// The node's Tinyid engine, when it serves Didi Tinyid's routes.
type TinyidSlot = EngineSlot<Arc<Tinyid>>;

impl Slotted for Arc<Tinyid> {
    type Failure = std::convert::Infallible;

    fn refusal(standing: &Absence<Self::Failure>) -> NodeError {
        match standing {
            Absence::ShutDown => NodeError::Segment(Error::ShuttingDown),
            Absence::Failed(never) => match *never {},
            Absence::NotConfigured(_) | Absence::Starting(_) => NodeError::TinyidNotServed,
        }
    }
}

/// The Tinyid database's rows with this node's buffers; a database that does not answer
/// within `wait` is reported down, not as an error.
async fn tinyid_status(tinyid: &Tinyid, wait: Duration) -> TinyidStatus {
    let (biz_types, store_error) = match tokio::time::timeout(wait, tinyid.biz_types()).await {
        Ok(Ok(views)) => (views, None),
        Ok(Err(error)) => (Vec::new(), Some(error.to_string())),
        Err(_) => (Vec::new(), Some(format!("the database did not answer within {wait:?}"))),
    };
    TinyidStatus { store: tinyid.describe(), store_error, biz_types }
}

/// A Tinyid refusal: a missing row is named as Tinyid's (its fix is Tinyid's SQL, not a tag
/// created through idmint).
fn tinyid_error(error: Error) -> NodeError {
    match error {
        Error::UnknownTag(biz_type) | Error::Store(StoreError::TagNotFound(biz_type)) => {
            NodeError::UnknownBizType(biz_type)
        }
        other => NodeError::Segment(other),
    }
}
