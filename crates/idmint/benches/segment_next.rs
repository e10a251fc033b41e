//! `segment_next`: in-process ids per second of segment mode, beside the physical floor (a
//! bare `AtomicU64::fetch_add`) in the same group, on 1 and 2 threads; and batch takes of
//! 1000 ids beside one `fetch_add(1000)`. Results and ratios: docs/PERFORMANCE.md;
//! `scripts/bench-take` runs this beside a model of Leaf's `get(key)` and prints the ratios.
//!
//! Run: `cargo bench -p idmint --bench segment_next`. Every variant takes single ids; the
//! library variants use a memory store and a step of `STEP_MAX`, so refills (every 10^6 ids)
//! are part of the measurement, as they are in service. The by-name variants pass the name
//! through `black_box` on every call, as a request's name reaches the handler; a thread's
//! take of the tag it took last is found without a hash (`LAST_REGISTRY` in `segment/engine.rs`),
//! so `library_by_name_str_2tags` takes two tags in turn, each take a hash and a lookup.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use idmint::segment::{Count, SegmentConfig, TagGenerator};
use idmint::{Node, NodeBuilder, NodeConfig, Segments, Tag};
use idmint_core::limits::STEP_MAX;
use idmint_core::{DoubleBuffer, IdRange, PreloadRatio, SEGMENT_LEN_MAX, StartId, Step};
use idmint_store::{MemoryStore, SegmentStore, StoreUrl, TagSpec};
use tokio::runtime::Runtime;

fn segment_next(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let (segments, tag, other) = runtime.block_on(start_segments());
    let node = runtime.block_on(start_node(&tag));
    let generator = segments.generator(&tag).expect("generator");
    let buffer = DoubleBuffer::new(PreloadRatio::DEFAULT);
    buffer.install(IdRange::new(1, 1 + SEGMENT_LEN_MAX).expect("range"), 0).expect("install");
    let counter = AtomicU64::new(0);

    let mut group = c.benchmark_group("segment_next");
    group.throughput(Throughput::Elements(1));
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    for threads in [1usize, 2] {
        group.bench_function(format!("atomic_fetch_add/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |n| {
                    for _ in 0..n {
                        black_box(counter.fetch_add(1, Ordering::Relaxed));
                    }
                })
            })
        });
        group.bench_function(format!("core_double_buffer/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |n| {
                    for _ in 0..n {
                        black_box(buffer.take_one());
                    }
                })
            })
        });
        group.bench_function(format!("library_try_next_id/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |n| {
                    for _ in 0..n {
                        black_box(generator.try_next_id());
                    }
                })
            })
        });
        group.bench_function(format!("library_tag_handle/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |n| take_from_handle(&runtime, &generator, n))
            })
        });
        group.bench_function(format!("library_by_tag_name/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |n| take_by_tag(&runtime, &segments, &tag, n))
            })
        });
        group.bench_function(format!("library_try_by_name_str/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |n| {
                    for _ in 0..n {
                        black_box(segments.try_next_id_by_name(black_box(tag.as_str())));
                    }
                })
            })
        });
        group.bench_function(format!("library_by_name_str/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |n| take_by_str(&runtime, &segments, tag.as_str(), n))
            })
        });
        // Two tags in turn: every take names another tag than the thread's previous take did,
        // so none is found as the thread's last hit (`LAST_REGISTRY`): the hash every time.
        group.bench_function(format!("library_by_name_str_2tags/{threads}t"), |b| {
            b.iter_custom(|iters| {
                on_threads(threads, iters, |n| {
                    take_by_str_in_turn(&runtime, &segments, [tag.as_str(), other.as_str()], n)
                })
            })
        });
    }
    // The node's take by name as text: the take and the answer's digits (on the stack).
    group.bench_function("node_public_text_by_name/1t", |b| {
        b.iter_custom(|iters| {
            on_threads(1, iters, |n| {
                runtime.block_on(async {
                    for _ in 0..n {
                        let name = black_box(tag.as_str());
                        let text = node.next_public_text_by_name(name).await.expect("id");
                        text.with_str(|digits| black_box(digits.as_bytes()).len());
                    }
                })
            })
        })
    });
    // The whole take the Leaf route makes per request besides HTTP: the handler's
    // `Node::try_public_text_by_name` of the path's name (awaiting `next_public_text_by_name`
    // only when it finds nothing) and the text's bytes. The middleware looks nothing up: on a
    // node without client tokens it only decodes the path's segment, as the handler does.
    group.bench_function("node_leaf_route_take/1t", |b| {
        b.iter_custom(|iters| {
            on_threads(1, iters, |n| {
                runtime.block_on(async {
                    for _ in 0..n {
                        let name = black_box(tag.as_str());
                        let text = match node.try_public_text_by_name(name) {
                            Some(text) => text,
                            None => node.next_public_text_by_name(name).await.expect("id"),
                        };
                        text.with_str(|digits| black_box(digits.as_bytes()).len());
                    }
                })
            })
        })
    });
    group.finish();

    // Batches: one take of BATCH ids, counted as BATCH elements, beside one fetch_add of
    // BATCH on a bare atomic.
    let mut group = c.benchmark_group("segment_batch");
    group.throughput(Throughput::Elements(BATCH));
    group.measurement_time(Duration::from_secs(3));
    group.warm_up_time(Duration::from_secs(1));
    let batch = Count::new(BATCH).expect("count");
    group.bench_function(format!("atomic_fetch_add_{BATCH}/1t"), |b| {
        b.iter(|| black_box(counter.fetch_add(BATCH, Ordering::Relaxed)))
    });
    group.bench_function(format!("core_take_{BATCH}/1t"), |b| {
        b.iter(|| black_box(buffer.take(batch).count()))
    });
    group.bench_function(format!("library_next_ids_{BATCH}/1t"), |b| {
        b.iter_custom(|iters| {
            on_threads(1, iters, |n| {
                runtime.block_on(async {
                    for _ in 0..n {
                        black_box(generator.next_ids(batch).await.expect("ids"));
                    }
                })
            })
        })
    });
    group.finish();
    runtime.block_on(segments.shutdown());
    runtime.block_on(node.shutdown());
}

/// Ids per batch in the `segment_batch` group.
const BATCH: u64 = 1_000;

/// A segments engine serving `bench` and `other`, both loaded (a generator each).
async fn start_segments() -> (Arc<Segments>, Tag, Tag) {
    let store = Arc::new(MemoryStore::new());
    let tag = Tag::parse("bench").expect("tag");
    let other = Tag::parse("other").expect("tag");
    create_tag(&*store, &tag).await;
    create_tag(&*store, &other).await;
    let segments = Segments::start(store, SegmentConfig::default()).expect("start");
    segments.generator(&other).expect("generator");
    (segments, tag, other)
}

/// A node on a memory store of its own serving `tag` (no format, no snowflake).
async fn start_node(tag: &Tag) -> Node {
    let store = Arc::new(MemoryStore::new());
    create_tag(&*store, tag).await;
    let config = NodeConfig::new(StoreUrl::Memory);
    NodeBuilder::new(config).stores(store).start().await.expect("node")
}

async fn create_tag(store: &dyn SegmentStore, tag: &Tag) {
    let spec = TagSpec {
        tag: tag.clone(),
        step: Step::new(STEP_MAX).expect("step"),
        start: Some(StartId::DEFAULT),
        force: false,
        description: Default::default(),
    };
    store.create_tag(&spec).await.expect("create");
}

fn take_from_handle(runtime: &Runtime, generator: &Arc<TagGenerator>, n: u64) {
    runtime.block_on(async {
        for _ in 0..n {
            black_box(generator.next_id().await.expect("id"));
        }
    })
}

fn take_by_tag(runtime: &Runtime, segments: &Segments, tag: &Tag, n: u64) {
    runtime.block_on(async {
        for _ in 0..n {
            black_box(segments.next_id(tag).await.expect("id"));
        }
    })
}

fn take_by_str(runtime: &Runtime, segments: &Segments, name: &str, n: u64) {
    runtime.block_on(async {
        for _ in 0..n {
            black_box(segments.next_id_by_name(black_box(name)).await.expect("id"));
        }
    })
}

fn take_by_str_in_turn(runtime: &Runtime, segments: &Segments, names: [&str; 2], n: u64) {
    runtime.block_on(async {
        for i in 0..n {
            let name = black_box(names[(i & 1) as usize]);
            black_box(segments.next_id_by_name(name).await.expect("id"));
        }
    })
}

/// Runs `work(iters / threads)` on each of `threads` threads at once; returns the wall time.
fn on_threads(threads: usize, iters: u64, work: impl Fn(u64) + Sync) -> Duration {
    let per_thread = iters.div_ceil(threads as u64);
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                barrier.wait();
                work(per_thread);
            });
        }
        barrier.wait();
        let started = Instant::now();
        // The scope joins every thread before returning.
        started
    })
    .elapsed()
}

criterion_group!(benches, segment_next);
criterion_main!(benches);
