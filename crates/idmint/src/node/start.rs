//! How a [`Node`] starts: its typed configuration ([`NodeConfig`]), the parts a caller may
//! hand in ready-made ([`NodeBuilder`]: a store, a running generator or sequence engine, a
//! clock), and the start order: segment store -> segments -> legacy key guard rows moved to
//! the tag metadata (stores that have it) -> format keys claimed -> Tinyid
//! (when configured) ->
//! snowflake generator and its ring (retried in a tracked loop while the failure passes by
//! itself) -> sequences (Redis retried in a tracked loop) -> UUIDs.
//!
//! Parts that cannot start leave the node up with a reason (their operations answer it):
//! the snowflake generator, the sequences. Segments and claimed keys are the node's
//! foundation and stop the start.

use std::sync::Arc;
use std::time::Duration;

use idmint_core::limits::BATCH_COUNT_MAX;
use idmint_core::snowflake::Layout;
use idmint_store::{
    Backend, LeaseStore, SegmentStore, SequenceStore, StoreError, StoreUrl, TagMetaStore,
    TinyidStore, WorkerStore,
};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::policy::Policies;
use super::slot::Absence;
use super::snowflake::{self as slot, Attempt, RetryParts, SnowflakeEngines, SnowflakeSlot};
use super::{Engine, Node, NodeStartError, SequenceSlot, TagFormats, TinyidSlot};
use crate::clock::{Clock, SystemClock};
use crate::format::{IdFormat, KeyGuard, claim_key, guarded_tag, migrate_key_guard};
use crate::peer::PeerLink;
use crate::segment::SegmentConfig;
use crate::sequence::SequenceConfig;
use crate::sequence::Sequences;
use crate::snowflake::{CachedConfig, SnowflakeConfig, WorkerIdSource};
use crate::snowflake::{CachedSnowflake, Snowflake};
use crate::strict::{StrictConfig, StrictTags};
use crate::tinyid::{Tinyid, TinyidConfig};
use crate::uuid::Uuids;
use crate::witness::{MetaMarks, Witness};
use idmint_core::Tag;

/// The sequence engine's marks file, opened at start.
type SequenceMarks = Arc<crate::marks::LocalMarks<idmint_store::CounterKey>>;

/// How long the node waits between attempts to reach a Redis that did not answer.
pub const REDIS_RETRY_MS: u64 = 2_000;

/// What a node runs, typed: the server converts its settings into this.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The store of segment rows (and, on SQL stores, of worker leases and sequence
    /// ceilings), opened at start unless [`NodeBuilder::segment_store`] hands one in.
    pub store: StoreUrl,
    /// Segment serving tunables.
    pub segment: SegmentConfig,
    /// Largest `count` of a batch (at most `BATCH_COUNT_MAX`).
    pub batch_count_max: u64,
    /// The snowflake generator, or why the node runs none (its operations answer that).
    pub snowflake: Result<SnowflakeConfig, String>,
    /// Serve snowflake ids from a ring of pre-made ids.
    pub snowflake_cached: Option<CachedConfig>,
    /// Public id formats of segment tags.
    pub formats: Vec<FormatConfig>,
    /// The sequences, or why the node serves none.
    pub sequences: Result<SequencesConfig, String>,
    /// Didi Tinyid's `biz_type`s, from a Tinyid database; `None`: not served.
    pub tinyid: Option<TinyidNodeConfig>,
    /// Strict tags: how this node's peers reach it and its leases' timing; `None`: strict
    /// tags are refused (a node its peers cannot reach cannot own one).
    pub strict: Option<StrictConfig>,
    /// The engines whose readiness gates the node's ([`Node::ready`]): those the deployment
    /// uses. An engine listed that the node does not run is passed over.
    pub ready_engines: Vec<Engine>,
    /// The witness: a second, independent store in whose tag metadata every segment
    /// allocation's end and every strict ceiling is raised before it is served, opened at
    /// start (unless `segment` already has one, [`SegmentConfig::with_witness`]); `None`:
    /// none.
    pub witness: Option<StoreUrl>,
}

/// Where and how a node serves Didi Tinyid's `biz_type`s.
#[derive(Debug, Clone)]
pub struct TinyidNodeConfig {
    /// The Tinyid database (`mysql://…`), opened at start unless
    /// [`NodeBuilder::tinyid_store`] hands one in.
    pub store: StoreUrl,
    /// The engine's tunables.
    pub engine: TinyidConfig,
}

/// A tag's public id format.
#[derive(Debug, Clone)]
pub struct FormatConfig {
    /// The tag.
    pub tag: Tag,
    /// Template, time zone and permutation.
    pub format: IdFormat,
    /// Whether a key other than the recorded one is accepted.
    pub force_key_change: bool,
}

/// Where sequences live: definitions and ceilings in the node's SQL store, counters in Redis.
#[derive(Clone)]
pub struct SequencesConfig {
    /// The Redis URL (a secret: never printed).
    pub redis: String,
    /// The engine's tunables.
    pub engine: SequenceConfig,
}

impl std::fmt::Debug for SequencesConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SequencesConfig")
            .field("redis", &idmint_store::redact_urls(&self.redis))
            .field("engine", &self.engine)
            .finish()
    }
}

impl NodeConfig {
    /// A node serving the segments of `store` and nothing else: the largest batch limit,
    /// no snowflake generator, no sequences, no public id formats; its readiness gated on
    /// segments and on a snowflake generator once one is configured.
    pub fn new(store: StoreUrl) -> NodeConfig {
        NodeConfig {
            store,
            segment: SegmentConfig::default(),
            batch_count_max: BATCH_COUNT_MAX,
            snowflake: Err("snowflake ids are not configured on this node".to_string()),
            snowflake_cached: None,
            formats: Vec::new(),
            sequences: Err("sequences are not configured on this node".to_string()),
            tinyid: None,
            strict: None,
            ready_engines: vec![Engine::Segment, Engine::Snowflake],
            witness: None,
        }
    }
}

/// Builds a [`Node`] from a [`NodeConfig`], with parts handed in ready-made where a caller
/// (an embedder, a test) already has them.
pub struct NodeBuilder {
    config: NodeConfig,
    store: Option<Arc<dyn SegmentStore>>,
    workers: Option<Arc<dyn WorkerStore>>,
    sequence_store: Option<Arc<dyn SequenceStore>>,
    tag_meta: Option<Arc<dyn TagMetaStore>>,
    snowflake: Option<Arc<Snowflake>>,
    sequences: Option<Arc<Sequences>>,
    tinyid_store: Option<Arc<dyn TinyidStore>>,
    peers: Option<Arc<dyn PeerLink>>,
    clock: Arc<dyn Clock>,
}

impl NodeBuilder {
    /// A builder of a node running `config`, on the system clock.
    pub fn new(config: NodeConfig) -> NodeBuilder {
        NodeBuilder {
            config,
            store: None,
            workers: None,
            sequence_store: None,
            tag_meta: None,
            snowflake: None,
            sequences: None,
            tinyid_store: None,
            peers: None,
            clock: Arc::new(SystemClock),
        }
    }

    /// Serves the segments of `store` rather than opening `config.store`.
    pub fn segment_store(mut self, store: Arc<dyn SegmentStore>) -> NodeBuilder {
        self.store = Some(store);
        self
    }

    /// Leases the snowflake generator's worker ids in `store` rather than in one opened from
    /// `config.store`.
    pub fn worker_store(mut self, store: Arc<dyn WorkerStore>) -> NodeBuilder {
        self.workers = Some(store);
        self
    }

    /// Keeps sequence definitions and ceilings in `store` rather than in one opened from
    /// `config.store`.
    pub fn sequence_store(mut self, store: Arc<dyn SequenceStore>) -> NodeBuilder {
        self.sequence_store = Some(store);
        self
    }

    /// Records the keys of keyed tags in `store`'s tag metadata rather than in the one of
    /// `config.store`. Without it, a node handed a segment store keeps them in legacy guard
    /// rows of the segment table (`idmint.key.TAG`), as on stores without tag metadata.
    pub fn tag_meta_store(mut self, store: Arc<dyn TagMetaStore>) -> NodeBuilder {
        self.tag_meta = Some(store);
        self
    }

    /// `link` as the node's way to its peers (the server's is over gRPC).
    pub fn peer_link(mut self, link: Arc<dyn PeerLink>) -> NodeBuilder {
        self.peers = Some(link);
        self
    }

    /// `store` for the segments, the worker leases, the sequences and the tag metadata
    /// alike: what an embedder or a test with one in-memory store wants.
    pub fn stores<S>(self, store: Arc<S>) -> NodeBuilder
    where
        S: SegmentStore + WorkerStore + SequenceStore + TagMetaStore + 'static,
    {
        self.segment_store(Arc::clone(&store) as Arc<dyn SegmentStore>)
            .worker_store(Arc::clone(&store) as Arc<dyn WorkerStore>)
            .sequence_store(Arc::clone(&store) as Arc<dyn SequenceStore>)
            .tag_meta_store(store)
    }

    /// Serves snowflake ids from `generator`, already started, rather than starting one
    /// from `config.snowflake`.
    pub fn snowflake(mut self, generator: Arc<Snowflake>) -> NodeBuilder {
        self.snowflake = Some(generator);
        self
    }

    /// Serves sequences from `engine`, already started, rather than from
    /// `config.sequences`.
    pub fn sequences(mut self, engine: Arc<Sequences>) -> NodeBuilder {
        self.sequences = Some(engine);
        self
    }

    /// Serves Tinyid's `biz_type`s from `store` rather than opening `config.tinyid`'s URL
    /// (`config.tinyid` must be set).
    pub fn tinyid_store(mut self, store: Arc<dyn TinyidStore>) -> NodeBuilder {
        self.tinyid_store = Some(store);
        self
    }

    /// The clock of the generators the node starts, its UUIDs and its public ids' dates.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> NodeBuilder {
        self.clock = clock;
        self
    }

    /// Starts the node, in order: segment store, segments, format keys claimed (a changed
    /// key stops the start), snowflake generator, its ring, sequences, UUIDs. Must be
    /// called inside a tokio runtime.
    pub async fn start(self) -> Result<Node, NodeStartError> {
        let NodeBuilder {
            config,
            store,
            workers,
            sequence_store,
            tag_meta,
            peers,
            snowflake,
            sequences,
            tinyid_store,
            clock,
        } = self;
        check_parts(
            &config,
            store.is_some(),
            snowflake.is_some() || workers.is_some(),
            sequences.is_some() || sequence_store.is_some(),
        )?;
        // Opened before anything starts: a damaged or locked marks file refuses the start.
        let sequence_marks = match (&sequences, &config.sequences) {
            (None, Ok(configured)) => crate::sequence::engine::open_marks(&configured.engine)
                .map_err(NodeStartError::Sequences)?,
            _ => None,
        };
        if let (Ok(snowflake), Some(ring)) = (&config.snowflake, config.snowflake_cached) {
            // Checked before a generator leases a worker id it would then hold for nothing.
            ring.check(&snowflake.layout).map_err(|reason| {
                NodeStartError::CachedRing(crate::snowflake::SnowflakeError::Config(reason))
            })?;
        }
        // The store URL is opened once: worker leases and sequence ceilings share the
        // segments' handle (one pool), unless the builder was handed stores of its own.
        let (store, backend) = match store {
            Some(store) => (store, None),
            None => {
                let backend = Backend::open(&config.store).await.map_err(|source| {
                    NodeStartError::OpenStore { url: config.store.to_string(), source }
                })?;
                (backend.segments(), Some(backend))
            }
        };
        let workers = workers.or_else(|| backend.as_ref()?.workers().ok());
        let sequence_store = sequence_store.or_else(|| backend.as_ref()?.sequences().ok());
        let key_guard = match tag_meta.or_else(|| backend.as_ref()?.tag_meta()) {
            Some(meta) => KeyGuard::Meta(meta),
            None => KeyGuard::Row,
        };
        let witness = open_witness(&config).await?;
        let segment_config = match &witness {
            Some(witness) if config.segment.witness().is_none() => {
                config.segment.clone().with_witness(witness.clone())
            }
            _ => config.segment.clone(),
        };
        let segments = crate::segment::Segments::start(store, segment_config)
            .map_err(NodeStartError::Segments)?;
        let strict = match (&config.strict, &workers, &key_guard) {
            (Some(strict), Some(leases), KeyGuard::Meta(meta)) => {
                let mut strict = strict.clone();
                strict.forward_batch_max = strict.forward_batch_max.min(config.batch_count_max);
                strict.witness = strict.witness.or_else(|| witness.clone());
                let stores = (Arc::clone(leases) as Arc<dyn LeaseStore>, Arc::clone(meta));
                Some(StrictTags::new(stores, strict, peers.clone(), Arc::clone(&clock)))
            }
            _ => None,
        };
        let served = strict.is_some();
        let policies = match claim_policies(&segments, &key_guard, &config.formats, served).await {
            Ok(policies) => policies,
            Err(error) => {
                // Nothing served yet: the segments stop (and give back nothing they took).
                segments.shutdown().await;
                return Err(error);
            }
        };
        let tinyid = match start_tinyid(&config, tinyid_store).await {
            Ok(tinyid) => tinyid,
            Err(error) => {
                segments.shutdown().await;
                return Err(error);
            }
        };
        let first = first_snowflake(&config, snowflake, workers.clone(), &clock).await;
        let FirstSnowflake { slot: snowflake, layout, retry } = match first {
            Ok(first) => first,
            Err(error) => {
                segments.shutdown().await;
                return Err(error);
            }
        };
        let tasks = TaskTracker::new();
        let cancel = CancellationToken::new();
        if let Some(reason) = retry {
            let ring = config.snowflake_cached;
            let parts = RetryParts {
                config: config.snowflake.clone(),
                store: config.store.clone(),
                workers,
                clock: Arc::clone(&clock),
                ring,
            };
            slot::spawn_retry(&snowflake, parts, reason, &tasks, &cancel);
        }
        let sequences = match sequences {
            Some(engine) => SequenceSlot::running(engine),
            None => {
                let given = (sequence_store, sequence_marks);
                start_sequences(&config, given, &clock, &tasks, &cancel).await
            }
        };
        Ok(Node {
            segments,
            tinyid,
            batch_count_max: config.batch_count_max,
            layout,
            snowflake,
            sequences,
            policies,
            strict,
            meta: match key_guard {
                KeyGuard::Meta(meta) => Some(meta),
                KeyGuard::Row => None,
            },
            peers,
            uuids: Arc::new(Uuids::new(Arc::clone(&clock))),
            ready_engines: config.ready_engines.clone(),
            clock,
            tasks,
            cancel,
        })
    }
}

/// Refuses parts that would split the node's state: a segment store handed in while
/// `config.store` is `memory://` would give the worker leases and the sequence ceilings a
/// second, private in-memory store (every node leasing worker id 0 there).
fn check_parts(
    config: &NodeConfig,
    store_given: bool,
    workers_given: bool,
    sequences_given: bool,
) -> Result<(), NodeStartError> {
    if !store_given || config.store != StoreUrl::Memory {
        return Ok(());
    }
    let leased = !workers_given
        && config.snowflake.as_ref().is_ok_and(|s| {
            !matches!(s.worker, WorkerIdSource::Static(_) | WorkerIdSource::Ordinal)
        });
    let sequences = !sequences_given && config.sequences.is_ok();
    if leased || sequences {
        let what = if leased { "worker-id leases" } else { "sequence ceilings" };
        return Err(NodeStartError::Parts(format!(
            "a segment store was handed to the builder, but config.store is memory://, so the \
             {what} would live in a separate in-memory store of their own; set config.store to \
             the store's URL, or hand their store in too (NodeBuilder::stores, worker_store, \
             sequence_store)"
        )));
    }
    Ok(())
}

/// The tags' policies: their public id formats, each keyed one checked against the key
/// recorded in the store (and recorded there on first use) before any id is served, and with
/// tag metadata every tag's recorded policy. With tag metadata, the legacy guard rows of the
/// segment table are moved there first, every one of them (a tag whose format was dropped
/// too), so none is left in the segment table.
async fn claim_policies(
    segments: &crate::segment::Segments,
    guard: &KeyGuard,
    formats: &[FormatConfig],
    strict_served: bool,
) -> Result<Policies, NodeStartError> {
    if let KeyGuard::Meta(meta) = guard {
        let rows = segments.internal_rows().await.map_err(NodeStartError::Segments)?;
        for row in rows {
            let Some(tag) = guarded_tag(&row.tag) else {
                tracing::warn!(row = %row.tag, "leaving an internal row idmint did not write");
                continue;
            };
            migrate_key_guard(segments, meta.as_ref(), &tag, &row.tag, &row.description)
                .await
                .map_err(|source| NodeStartError::FormatKey { tag, source })?;
        }
    }
    let mut claimed = TagFormats::new();
    for tag_format in formats {
        if let Some(permutation) = tag_format.format.permutation() {
            let force = tag_format.force_key_change;
            claim_key(segments, guard, &tag_format.tag, permutation, force).await.map_err(
                |source| NodeStartError::FormatKey { tag: tag_format.tag.clone(), source },
            )?;
        }
        tracing::info!(tag = %tag_format.tag, template = %tag_format.format, keyed = tag_format.format.permutation().is_some(), "public id format");
        claimed.insert(tag_format.tag.clone(), tag_format.format.clone());
    }
    match guard {
        KeyGuard::Meta(meta) => {
            let recorded = Policies::recorded(claimed, meta.as_ref(), strict_served).await;
            recorded.map_err(NodeStartError::TagPolicies)
        }
        KeyGuard::Row => Ok(Policies::new(claimed)),
    }
}

/// Starts the Tinyid engine when configured: its store and tokens must answer, or the node
/// does not start (a Tinyid migration that silently served nothing would be worse).
async fn start_tinyid(
    config: &NodeConfig,
    given: Option<Arc<dyn TinyidStore>>,
) -> Result<TinyidSlot, NodeStartError> {
    let Some(tinyid) = &config.tinyid else {
        return Ok(TinyidSlot::new(Absence::NotConfigured("no [tinyid] section".into())));
    };
    let store = match given {
        Some(store) => store,
        None => idmint_store::open_tinyid(&tinyid.store).await.map_err(|source| {
            NodeStartError::OpenStore { url: tinyid.store.to_string(), source }
        })?,
    };
    let engine =
        Tinyid::start(store, tinyid.engine.clone()).await.map_err(NodeStartError::Tinyid)?;
    tracing::info!(store = %engine.describe(), "tinyid biz_types served on /tinyid/id/*");
    Ok(TinyidSlot::running(engine))
}

/// The snowflake generator after the node's first attempt to start it.
struct FirstSnowflake {
    /// Filled, or why not.
    slot: SnowflakeSlot,
    /// The layout that decodes ids: the generator's, or the configured one when the
    /// generator did not start.
    layout: Option<(String, Layout)>,
    /// Why the attempt failed, when the failure passes by itself: the start is to be retried.
    retry: Option<String>,
}

/// Starts the snowflake generator (or takes the one handed in) and its ring once, logging
/// the outcome. Only a ring that does not start stops the node's start; the generator it
/// would have run over gives its lease back first.
async fn first_snowflake(
    config: &NodeConfig,
    given: Option<Arc<Snowflake>>,
    workers: Option<Arc<dyn WorkerStore>>,
    clock: &Arc<dyn Clock>,
) -> Result<FirstSnowflake, NodeStartError> {
    let first = match given {
        Some(generator) => Attempt::Started(generator),
        None => slot::attempt(&config.snowflake, &config.store, workers, Arc::clone(clock)).await,
    };
    slot::log_first(&first, config.snowflake.is_ok());
    // The configured layout decodes ids even when the generator did not start.
    let layout = match (&first, &config.snowflake) {
        (Attempt::Started(generator), _) => Some((generator.status().space, *generator.layout())),
        (_, Ok(configured)) => Some((configured.space.clone(), configured.layout)),
        (_, Err(_)) => None,
    };
    let (outcome, retry) = match first {
        Attempt::Started(generator) => match start_ring(&generator, config.snowflake_cached) {
            Ok(ring) => (Ok(SnowflakeEngines { generator, ring }), None),
            Err(error) => {
                // The lease is given back at once, not held until its TTL runs out.
                generator.shutdown().await;
                return Err(error);
            }
        },
        Attempt::Final(not_served) => (Err(not_served), None),
        Attempt::Failed(reason) => (Err(slot::retrying(&reason)), Some(reason)),
    };
    Ok(FirstSnowflake { slot: slot::first_slot(outcome), layout, retry })
}

/// The ring over a generator the node's start started, when configured (its configuration
/// was checked before the generator leased a worker id).
fn start_ring(
    generator: &Arc<Snowflake>,
    ring: Option<CachedConfig>,
) -> Result<Option<Arc<CachedSnowflake>>, NodeStartError> {
    let Some(ring) = ring else { return Ok(None) };
    let cached = CachedSnowflake::start_with(Arc::clone(generator), ring)
        .map_err(NodeStartError::CachedRing)?;
    tracing::info!(
        capacity = ring.capacity,
        max_lead_ms = ring.max_lead_ms,
        max_age_ms = ring.max_age_ms,
        "snowflake ids served from a ring of pre-made ids"
    );
    Ok(Some(cached))
}

/// Starts the sequence engine: definitions and ceilings in the store, counters in Redis. A
/// store that cannot hold ceilings leaves the sequences answering the reason; a Redis that
/// does not answer yet is retried every [`REDIS_RETRY_MS`] by a loop on the node's tracker,
/// until it answers or the node shuts down.
async fn start_sequences(
    config: &NodeConfig,
    (given, marks): (Option<Arc<dyn SequenceStore>>, Option<SequenceMarks>),
    clock: &Arc<dyn Clock>,
    tasks: &TaskTracker,
    cancel: &CancellationToken,
) -> SequenceSlot {
    let sequences = match &config.sequences {
        Ok(sequences) => sequences.clone(),
        Err(reason) => {
            tracing::info!(%reason, "sequences not served");
            return SequenceSlot::new(Absence::NotConfigured(reason.clone()));
        }
    };
    let opened = match given {
        Some(store) => Ok(store),
        None => idmint_store::open_sequences(&config.store).await,
    };
    let store = match opened {
        Ok(store) => store,
        Err(error) => {
            tracing::error!(%error, "sequences not served");
            return SequenceSlot::new(Absence::NotConfigured(format!(
                "sequences are not served: their ceilings need one SQL store ({error})"
            )));
        }
    };
    let slot = SequenceSlot::new(Absence::Starting("connecting to Redis".into()));
    let installed = slot.clone();
    let clock = Arc::clone(clock);
    let cancel = cancel.clone();
    tasks.spawn(async move {
        loop {
            let opened = tokio::select! {
                () = cancel.cancelled() => return installed.set(Absence::ShutDown),
                opened = idmint_store::open_counters(&sequences.redis) => opened,
            };
            match opened {
                Ok(counters) => {
                    let engine = Sequences::start_with_marks(
                        store,
                        counters,
                        Arc::clone(&clock),
                        sequences.engine,
                        marks,
                    );
                    tracing::info!(redis = %engine.describe(), "sequences served");
                    installed.publish(engine);
                    return;
                }
                Err(StoreError::BadUrl { url, reason }) => {
                    tracing::error!(%url, %reason, "sequences not served: bad Redis URL");
                    installed.set(Absence::NotConfigured(format!("bad Redis URL {url}: {reason}")));
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "Redis not reachable; retrying in 2 s");
                    installed
                        .set(Absence::Starting(format!("Redis is not reachable yet ({error})")));
                    tokio::select! {
                        () = cancel.cancelled() => return installed.set(Absence::ShutDown),
                        () = tokio::time::sleep(Duration::from_millis(REDIS_RETRY_MS)) => {}
                    }
                }
            }
        }
    });
    slot
}

/// The node's witness: the segment configuration's, or the store `config.witness` names,
/// opened here (it must keep tag metadata: a single database or Redis).
async fn open_witness(config: &NodeConfig) -> Result<Option<Witness>, NodeStartError> {
    if let Some(witness) = config.segment.witness() {
        return Ok(Some(witness.clone()));
    }
    let Some(url) = &config.witness else { return Ok(None) };
    let opened = Backend::open(url).await.and_then(|backend| {
        backend.tag_meta().ok_or_else(|| StoreError::BadUrl {
            url: url.to_string(),
            reason: "a witness keeps its marks in one database's tag metadata: name one \
                     sqlite://, mysql://, postgres:// or redis:// URL"
                .to_string(),
        })
    });
    let meta =
        opened.map_err(|source| NodeStartError::OpenWitness { url: url.to_string(), source })?;
    tracing::info!(witness = %url, "cluster-wide regression guard: every allocation is witnessed there");
    Ok(Some(Witness::new(Arc::new(MetaMarks::new(meta)), url.to_string())))
}
