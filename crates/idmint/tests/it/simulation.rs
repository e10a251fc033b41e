//! Seeded simulation: several nodes (each its own `Segments`) on one faulty store, many
//! tasks taking random batch sizes; every acknowledged id is checked against a model set.
//! The seed is printed; replay a failure with `IDMINT_SIM_SEED=<seed> cargo test -p idmint
//! simulation`.

use std::collections::HashSet;
use std::sync::Arc;

use idmint::{Count, Error, SegmentConfig, Segments};

use crate::test_store::{Mode, TestStore};

const NODES: usize = 3;
const TASKS_PER_NODE: usize = 3;
const REQUESTS_PER_TASK: usize = 400;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_on_a_faulty_store_never_repeat_an_id() {
    let seed: u64 = std::env::var("IDMINT_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::process::id() as u64 ^ 0x9e37_79b9_7f4a_7c15);
    println!("simulation seed: {seed} (replay with IDMINT_SIM_SEED={seed})");
    let store = TestStore::new(seed);
    let tag = store.create("sim", 37).await;
    store.set_mode(Mode::Faulty { fail_permille: 150, delay_ms_max: 3 });
    let config = SegmentConfig::default().with_refill_wait_ms(50).unwrap();
    let nodes: Vec<_> =
        (0..NODES).map(|_| Segments::start(store.clone(), config.clone()).unwrap()).collect();

    let mut tasks = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        for t in 0..TASKS_PER_NODE {
            let (node, tag) = (Arc::clone(node), tag.clone());
            let mut rng = seed ^ ((n * 31 + t) as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d);
            tasks.push(tokio::spawn(async move {
                let (mut acked, mut refused) = (Vec::new(), 0u32);
                for _ in 0..REQUESTS_PER_TASK {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let count = Count::new(1 + rng % 60).unwrap();
                    match node.next_ids(&tag, count).await {
                        Ok(ranges) => {
                            let ids: Vec<u64> = ranges.iter().flat_map(|r| r.ids()).collect();
                            assert_eq!(ids.len() as u64, count.get(), "short batch acknowledged");
                            acked.extend(ids);
                        }
                        Err(Error::Unavailable { .. }) => refused += 1,
                        Err(other) => panic!("unexpected error {other:?}"),
                    }
                }
                (acked, refused)
            }));
        }
    }
    let mut model = HashSet::new();
    let (mut acked_total, mut refused_total) = (0usize, 0u32);
    for task in tasks {
        let (acked, refused) = task.await.expect("task");
        assert!(acked.windows(2).all(|w| w[0] < w[1]), "seed {seed}: a task saw ids go down");
        for id in &acked {
            assert!(model.insert(*id), "seed {seed}: id {id} acknowledged twice");
        }
        acked_total += acked.len();
        refused_total += refused;
    }
    println!("acknowledged {acked_total} ids, {refused_total} requests refused");
    assert!(acked_total > 0, "seed {seed}: nothing was served");
    for node in nodes {
        node.shutdown().await;
    }
}
