//! Marks written ahead: the store-regression guard's mark on disk covers every id served,
//! though most refills write nothing; a restart skips at most the lead and says so quietly;
//! a store that really went back across a restart is still refused and logged as an error.
//! A seeded run of lives (killed or shut down, the store sometimes restored from a backup)
//! checks all of it together.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use idmint::segment::{Count, HIGH_WATER_FILE, SegmentConfig};
use idmint::{Segments, Tag};
use idmint_core::Step;
use idmint_core::pacing::mark_lead;
use idmint_store::RangeStore;

use crate::simulation::{Rng, seeds};
use crate::test_store::TestStore;

/// After a `kill -9` the mark on disk is ahead of the store by at most the lead; the next
/// start begins at the mark (skipping at most the lead) without an error in the log. A store
/// restored from a backup further down than the lead is refused and logged as an error.
#[test]
fn a_restart_skips_at_most_the_lead_and_a_real_regression_is_still_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = SegmentConfig::default().with_adaptive_step(false).with_state_dir(dir.path());
    let store = TestStore::new(41);
    let tag = runtime().block_on(store.create("ahead", 10));
    let lead = mark_lead(10);

    let (served1, _) = life(&store, &config, &tag, 205, false);
    let max_id1 = runtime().block_on(store.max_id(&tag));
    let mark1 = read_mark(dir.path(), &tag).unwrap();
    assert!(served1.iter().all(|&id| id < mark1), "an id at or above the mark {mark1}");
    assert!(mark1 > max_id1, "the mark {mark1} was not written ahead of the store {max_id1}");
    assert!(mark1 - max_id1 <= lead, "the mark {mark1} is more than {lead} above {max_id1}");

    let (served2, errors) = life(&store, &config, &tag, 50, false);
    assert_eq!(served2[0], mark1, "the restart did not begin at the mark");
    assert!(served2[0] - max_id1 <= lead, "the restart skipped more than the lead");
    assert_eq!(errors, 0, "the lead written ahead was logged as the store going back");

    // A backup from before both lives: far more than the lead below the mark.
    let mark2 = read_mark(dir.path(), &tag).unwrap();
    assert!(mark2 > 1 + lead);
    runtime().block_on(store.restore_max_id(&tag, 1));
    let (served3, errors) = life(&store, &config, &tag, 50, false);
    assert!(served3[0] >= mark2, "after the restore, id {} below the mark {mark2}", served3[0]);
    assert!(errors > 0, "a store that went back across a restart was not logged as an error");

    let all: Vec<u64> = [served1, served2, served3].concat();
    assert!(all.windows(2).all(|w| w[0] < w[1]), "ids repeated or went back");
}

/// Seeded lives of one node on one tag: each serves a random number of ids in random
/// batches, then is killed or shut down; before some lives another node allocates a range,
/// and before some the store is restored from a backup. No id is served twice, every id served lies below the mark on disk when it is
/// served, and a start without a restore skips at most the lead above the store.
#[test]
fn seeded_lives_never_repeat_an_id_and_skip_at_most_the_lead() {
    for seed in seeds() {
        println!("marks ahead seed {seed} (replay: IDMINT_SIM_SEED={seed})");
        let mut rng = Rng::new(seed);
        let dir = tempfile::tempdir().unwrap();
        // The adaptive step and another node's ranges make ranges that end anywhere, not
        // only at whole steps above the mark.
        let adaptive = rng.below(2) == 0;
        let config =
            SegmentConfig::default().with_adaptive_step(adaptive).with_state_dir(dir.path());
        let store = TestStore::new(seed);
        let step = 1 + rng.below(40);
        let tag = runtime().block_on(store.create("lives", step));
        let mut served: Vec<u64> = Vec::new();
        for _life in 0..10 {
            if rng.below(2) == 0 {
                let other = Step::new(1 + rng.below(3 * step)).unwrap();
                runtime().block_on(store.allocate(&tag, Some(other))).unwrap();
            }
            let before = runtime().block_on(store.max_id(&tag));
            let restored = before > 1 && rng.below(4) == 0;
            if restored {
                runtime().block_on(store.restore_max_id(&tag, 1 + rng.below(before - 1)));
            }
            let ids = 1 + rng.below(step * 100);
            let graceful = rng.below(2) == 0;
            let (ids, _) = life(&store, &config, &tag, ids, graceful);
            if !restored {
                let skipped = ids[0] - before;
                assert!(
                    skipped <= mark_lead(step),
                    "seed {seed}: a start skipped {skipped} ids, the lead is {}",
                    mark_lead(step)
                );
            }
            served.extend(ids);
        }
        let total = served.len();
        served.sort_unstable();
        served.dedup();
        assert_eq!(served.len(), total, "seed {seed}: ids served twice");
    }
}

/// One life of a node: `ids` ids in batches of 1 to 7, each checked against the mark on
/// disk as it is served; then a shutdown, or a `kill -9` (dropped without one). Returns the
/// ids in order and the errors the node logged.
fn life(
    store: &Arc<TestStore>,
    config: &SegmentConfig,
    tag: &Tag,
    ids: u64,
    graceful: bool,
) -> (Vec<u64>, u64) {
    let errors = Arc::new(AtomicU64::new(0));
    let _logging = tracing::subscriber::set_default(Errors(Arc::clone(&errors)));
    let state_dir = config.state_dir().unwrap().to_path_buf();
    let runtime = runtime();
    let served = runtime.block_on(async {
        let segments = Segments::start(store.clone(), config.clone()).unwrap();
        let mut served = Vec::new();
        let mut batch = 1;
        while (served.len() as u64) < ids {
            let count = Count::new(batch.min(ids - served.len() as u64)).unwrap();
            for range in segments.next_ids(tag, count).await.unwrap() {
                let mark = read_mark(&state_dir, tag).unwrap_or(0);
                assert!(range.end() <= mark, "{range:?} served above the mark on disk {mark}");
                served.extend(range.start()..range.end());
            }
            batch = batch % 7 + 1;
        }
        if graceful {
            segments.shutdown().await;
        }
        served
    });
    drop(runtime);
    (served, errors.load(Ordering::SeqCst))
}

/// The mark of `tag` in the high-water file of `state_dir`, if it holds one.
fn read_mark(state_dir: &Path, tag: &Tag) -> Option<u64> {
    let text = std::fs::read_to_string(state_dir.join(HIGH_WATER_FILE)).ok()?;
    let line = text.lines().find_map(|l| l.strip_prefix(&format!("{tag} ")))?;
    Some(line.parse().unwrap())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// A subscriber that counts the ERROR events of this thread and ignores everything else.
struct Errors(Arc<AtomicU64>);

impl tracing::Subscriber for Errors {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::ERROR {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}
