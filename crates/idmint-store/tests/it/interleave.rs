//! Residue interleaving over segment stores ([`InterleavedStore::over_stores`]), hermetic on
//! memory stores: the blocks each store stands for, a seeded simulation of nodes, outages
//! and restarts in which no id may repeat, and the operations an interleaved tag refuses.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use idmint_core::{IdRange, Step, Tag};
use idmint_store::{
    Allocation, InterleavedStore, MemoryStore, RangeStore, SegmentStore, StoreError, StoreUrl,
    TagRecord, TagSpec,
};

use crate::conformance::{spec, tag};

/// A store that can be switched off: every call then fails as unavailable.
struct Switch {
    inner: MemoryStore,
    down: AtomicBool,
}

impl Switch {
    fn new() -> Arc<Switch> {
        Arc::new(Switch { inner: MemoryStore::new(), down: AtomicBool::new(false) })
    }

    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StoreError::Unavailable("switched off".into()))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl RangeStore for Switch {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        self.check()?;
        self.inner.allocate(tag, step).await
    }
    async fn compare_and_set_max_id(&self, t: &Tag, e: u64, n: u64) -> Result<bool, StoreError> {
        self.check()?;
        self.inner.compare_and_set_max_id(t, e, n).await
    }
    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        self.check()?;
        self.inner.get_tag(tag).await
    }
    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        self.check()?;
        self.inner.list_tags().await
    }
    async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, StoreError> {
        self.check()?;
        self.inner.tombstone(tag).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.check()
    }
    fn describe(&self) -> String {
        "switch".into()
    }
}

#[async_trait]
impl SegmentStore for Switch {
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError> {
        self.check()?;
        self.inner.create_tag(spec).await
    }

    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError> {
        self.check()?;
        self.inner.set_step(tag, step).await
    }

    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError> {
        self.check()?;
        self.inner.delete_tag(tag).await
    }
}

fn interleave(stores: &[Arc<Switch>]) -> InterleavedStore {
    let stores = stores.iter().map(|s| Arc::clone(s) as Arc<dyn SegmentStore>).collect();
    InterleavedStore::over_stores(stores).unwrap()
}

#[tokio::test]
async fn each_store_hands_out_the_blocks_of_its_residue() {
    let stores = [Switch::new(), Switch::new()];
    let store = interleave(&stores);
    let created = store.create_tag(&spec("order", 1, 10, "orders")).await.unwrap();
    assert_eq!((created.step, created.description.as_str()), (10, "orders"));
    // Each row holds N × block as its step.
    let row = stores[0].inner.get_tag(&tag("order")).await.unwrap().unwrap();
    assert_eq!(row.step, 20);

    let order = tag("order");
    let mut got = Vec::new();
    for _ in 0..6 {
        let allocation = store.allocate(&order, None).await.unwrap();
        assert_eq!(allocation.tag_step, 10);
        got.push(allocation.range);
    }
    // Store 0 owns the even blocks, store 1 the odd ones; every block whole, and the blocks
    // leave the store increasing, the two stores taking turns.
    let blocks: Vec<u64> = got.iter().map(|r| r.start() / 10).collect();
    assert!(got.iter().all(|r| r.len() == 10 && r.start() % 10 == 0), "{got:?}");
    assert!(blocks.windows(2).all(|w| w[0] < w[1]), "{blocks:?}");
    assert!(blocks[1..].windows(2).all(|w| w[0] % 2 != w[1] % 2), "{blocks:?}");
    assert_eq!(blocks.last(), Some(&(blocks[0] + 5)), "no block skipped once in step: {blocks:?}");
}

#[tokio::test]
async fn losing_a_store_does_not_stop_the_tag_and_it_rejoins_above_the_others() {
    let stores = [Switch::new(), Switch::new(), Switch::new()];
    let store = interleave(&stores);
    store.create_tag(&spec("t", 1, 5, "")).await.unwrap();
    let t = tag("t");
    let mut served = Vec::new();
    for _ in 0..9 {
        served.push(store.allocate(&t, None).await.unwrap().range);
    }
    stores[1].down.store(true, Ordering::SeqCst);
    for _ in 0..30 {
        let r = store.allocate(&t, None).await.unwrap().range;
        assert_ne!((r.start() / 5) % 3, 1, "the store that is down served {r:?}");
        served.push(r);
    }
    stores[1].down.store(false, Ordering::SeqCst);
    // It rejoins after its backoff; its blocks lag the others' and are raised past them.
    tokio::time::sleep(std::time::Duration::from_millis(idmint_store::SOURCE_BACKOFF_MS_MIN + 50))
        .await;
    let mut rejoined = false;
    for _ in 0..9 {
        let r = store.allocate(&t, None).await.unwrap().range;
        rejoined |= (r.start() / 5) % 3 == 1;
        served.push(r);
    }
    assert!(rejoined, "the store never served again");
    assert!(served.windows(2).all(|w| w[0].end() <= w[1].start()), "{served:?}");
    // All three down: the call fails as unavailable, naming the problem.
    for s in &stores {
        s.down.store(true, Ordering::SeqCst);
    }
    let refused = store.allocate(&t, None).await.unwrap_err();
    assert!(matches!(refused, StoreError::Unavailable(_)), "{refused}");
}

#[tokio::test]
async fn an_interleaved_tag_keeps_its_step_and_gives_nothing_back() {
    let stores = [Switch::new(), Switch::new()];
    let store = interleave(&stores);
    let t = tag("fixed");
    store.create_tag(&spec("fixed", 1000, 10, "")).await.unwrap();
    let first = store.allocate(&t, None).await.unwrap().range;
    assert!(first.start() >= 1000, "the start is honoured: {first:?}");
    let refused = store.set_step(&t, Step::new(20).unwrap()).await.unwrap_err();
    assert!(refused.to_string().contains("is fixed"), "{refused}");
    assert_eq!(store.compare_and_set_max_id(&t, first.end(), first.start()).await, Ok(false));
    // A raise (the engine jumping past ids it served) moves every store above the mark.
    assert_eq!(store.compare_and_set_max_id(&t, first.end(), 50_000).await, Ok(true));
    for _ in 0..4 {
        assert!(store.allocate(&t, None).await.unwrap().range.start() >= 50_000);
    }
    assert_eq!(
        store.create_tag(&spec("fixed", 1, 10, "")).await.unwrap_err(),
        StoreError::TagExists(t.clone())
    );
    // A creation one store missed is completed by running it again.
    stores[1].down.store(true, Ordering::SeqCst);
    let partial = store.create_tag(&spec("late", 1, 10, "")).await.unwrap_err();
    assert!(partial.to_string().contains("run the same create again"), "{partial}");
    stores[1].down.store(false, Ordering::SeqCst);
    tokio::time::sleep(std::time::Duration::from_millis(idmint_store::SOURCE_BACKOFF_MS_MIN + 50))
        .await;
    assert_eq!(store.create_tag(&spec("late", 1, 10, "")).await.unwrap().step, 10);
    let listed: Vec<String> =
        store.list_tags().await.unwrap().iter().map(|r| r.tag.to_string()).collect();
    assert_eq!(listed, ["fixed", "late"]);
    store.delete_tag(&t).await.unwrap();
    assert_eq!(store.get_tag(&t).await, Ok(None));
    assert_eq!(store.allocate(&t, None).await.unwrap_err(), StoreError::TagNotFound(t));
}

#[test]
fn interleaved_urls_parse_and_mixing_is_refused() {
    let Ok(StoreUrl::Interleaved(urls)) = StoreUrl::parse("memory:// memory://") else {
        panic!("not interleaved")
    };
    assert_eq!(urls, [StoreUrl::Memory, StoreUrl::Memory]);
    assert_eq!(StoreUrl::parse("memory:// memory://").unwrap().to_string(), "memory:// memory://");
    let mixed = StoreUrl::parse("memory:// sqlite:///tmp/x.db").unwrap_err().to_string();
    assert!(mixed.contains("memory:// interleaves only with memory://"), "{mixed}");
    let mixed =
        StoreUrl::parse("flicker+mysql://root:pw@a/t mysql://root:pw@b/t").unwrap_err().to_string();
    assert!(mixed.contains("cannot be mixed") && !mixed.contains("pw@"), "{mixed}");
    // A file path with a space is one URL.
    assert_eq!(
        StoreUrl::parse("sqlite:///tmp/my ids.db"),
        Ok(StoreUrl::Sqlite("/tmp/my ids.db".into()))
    );
}

/// A seeded simulation: three stores, four nodes (each its own `InterleavedStore` over the
/// same stores), stores going down and up, nodes restarting (losing what they knew) and
/// raising. No id is ever handed out twice, and each node's ids increase.
#[tokio::test(start_paused = true)]
async fn simulated_nodes_outages_and_restarts_never_repeat_an_id() {
    for seed in 1..=20u64 {
        let mut rng = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |bound: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % bound
        };
        let stores = [Switch::new(), Switch::new(), Switch::new()];
        let mut nodes: Vec<InterleavedStore> = (0..4).map(|_| interleave(&stores)).collect();
        nodes[0].create_tag(&spec("sim", 1, 1 + next(20), "")).await.unwrap();
        let t = tag("sim");
        let mut claimed = BTreeSet::new();
        let mut last_end = [0u64; 4];
        for _ in 0..600 {
            match next(20) {
                0 => {
                    let s = next(3) as usize;
                    let down = !stores[s].down.load(Ordering::SeqCst);
                    // Keep at least one store up.
                    if !down || stores.iter().filter(|s| s.down.load(Ordering::SeqCst)).count() < 2
                    {
                        stores[s].down.store(down, Ordering::SeqCst);
                    }
                }
                1 => {
                    let n = next(4) as usize;
                    nodes[n] = interleave(&stores);
                    last_end[n] = 0;
                }
                2 => tokio::time::advance(std::time::Duration::from_millis(next(3_000))).await,
                _ => {
                    let n = next(4) as usize;
                    let r: IdRange = match nodes[n].allocate(&t, None).await {
                        Ok(allocation) => allocation.range,
                        Err(e) => panic!("seed {seed}: a store is up yet allocation failed: {e}"),
                    };
                    assert!(r.start() >= last_end[n], "seed {seed}: node {n} went back: {r:?}");
                    last_end[n] = r.end();
                    for id in r.ids() {
                        assert!(claimed.insert(id), "seed {seed}: id {id} handed out twice");
                    }
                }
            }
        }
    }
}

/// Every exotic tag through an interleaved store: created on both stores, each allocating
/// its own blocks, listed as itself.
#[tokio::test]
async fn every_tag_a_leaf_row_holds_interleaves() {
    let stores = [Switch::new(), Switch::new()];
    let store = interleave(&stores);
    let names = crate::conformance::exotic_tags();
    for name in &names {
        store.create_tag(&spec(name, 1, 10, name)).await.unwrap();
    }
    for name in &names {
        let t = tag(name);
        let first = store.allocate(&t, None).await.unwrap().range;
        let second = store.allocate(&t, None).await.unwrap().range;
        assert!(first.end() <= second.start(), "{name:?}: {first:?} then {second:?}");
        assert!(stores[1].inner.get_tag(&t).await.unwrap().is_some(), "{name:?}");
    }
    assert_eq!(store.list_tags().await.unwrap().len(), names.len());
}
