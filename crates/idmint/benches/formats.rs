//! `formats`: in-process ids per second of each id format beside a baseline in the same run
//! and the same criterion group, with the ratios printed as a table after each group.
//! Results: docs/PERFORMANCE.md.
//!
//! Groups (one function each, all listed in `criterion_group!` at the bottom; run one with
//! `cargo bench -p idmint --bench formats -- GROUP`):
//! - `uuid_ulid`: idmint's UUID v4, UUID v7 and ULID (the [`Uuids`] generator on the system
//!   clock, as served) beside the `uuid` crate's `Uuid::new_v4()` / `Uuid::now_v7()` and the
//!   `ulid` crate's `Ulid::generate()` / `Generator::generate()` (also behind a `Mutex`, as
//!   a generator shared by threads must be, like ours): the id alone, and the id formatted
//!   to a `String` (what a response carries); and `Uuids::v7(1000)`, the batch path of
//!   `/v1/uuid`, counted per id.
//! - `encodings`: a numeric id in each encoding at its fixed width (decimal, base36,
//!   base62, Crockford base32), the keyed permutation at 32, 41 and 63 bits, and a whole
//!   template (`ORD-{date:%Y%m%d}-{id:base36:8}` with a 41-bit key, dates rendered once per
//!   batch as the server does), over consecutive ids as a tag issues them, beside a bare
//!   `AtomicU64::fetch_add` (the permutation's baseline) and `u64::to_string` (the
//!   encodings' baseline).
//!
//! Run: `cargo bench -p idmint --bench formats`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use std::sync::atomic::{AtomicU64, Ordering};

use idmint::SystemClock;
use idmint::segment::Count;
use idmint::{IdFormat, Uuids};
use idmint_core::encoding::Encoding;
use idmint_core::permute::{Permutation, PermuteKey};
use idmint_core::uuid::{UuidFormat, ulid_encode};

fn uuid_ulid(c: &mut Criterion) {
    let uuids = Uuids::new(Arc::new(SystemClock));
    let mut ulid_generator = ulid::Generator::new();
    let tally = Tally::default();
    let mut group = group(c, "uuid_ulid");
    tally.bench(&mut group, "idmint_v4", 1, || uuids.next_v4());
    tally.bench(&mut group, "uuid_new_v4", 1, uuid::Uuid::new_v4);
    tally.bench(&mut group, "idmint_v7", 1, || uuids.next_v7().expect("v7"));
    tally.bench(&mut group, "uuid_now_v7", 1, uuid::Uuid::now_v7);
    tally.bench(&mut group, "idmint_ulid", 1, || uuids.next_ulid().expect("ulid"));
    tally.bench(&mut group, "ulid_generate", 1, ulid::Ulid::generate);
    tally.bench(&mut group, "ulid_generator", 1, || ulid_generator.generate().expect("ulid"));
    // The ulid crate's generator is `&mut self`: behind a mutex, as a shared one must be.
    let shared_generator = std::sync::Mutex::new(ulid::Generator::new());
    tally.bench(&mut group, "ulid_generator_mutex", 1, || {
        shared_generator.lock().expect("lock").generate().expect("ulid")
    });
    let batch = Count::new(BATCH).expect("count");
    tally.bench(&mut group, "idmint_v7_batch", BATCH, || uuids.v7(batch).expect("v7"));
    tally.bench(&mut group, "idmint_v4_string", 1, || UuidFormat::Standard.encode(uuids.next_v4()));
    tally.bench(&mut group, "uuid_new_v4_string", 1, || uuid::Uuid::new_v4().to_string());
    tally.bench(&mut group, "idmint_v7_string", 1, || {
        UuidFormat::Standard.encode(uuids.next_v7().expect("v7"))
    });
    tally.bench(&mut group, "uuid_now_v7_string", 1, || uuid::Uuid::now_v7().to_string());
    tally.bench(&mut group, "idmint_v7_hex_string", 1, || {
        UuidFormat::Hex.encode(uuids.next_v7().expect("v7"))
    });
    tally.bench(&mut group, "uuid_now_v7_simple_string", 1, || {
        uuid::Uuid::now_v7().simple().to_string()
    });
    tally.bench(&mut group, "idmint_ulid_string", 1, || {
        ulid_encode(uuids.next_ulid().expect("ulid"))
    });
    tally.bench(&mut group, "ulid_generate_string", 1, || ulid::Ulid::generate().to_string());
    tally.bench(&mut group, "ulid_generator_string", 1, || {
        ulid_generator.generate().expect("ulid").to_string()
    });
    group.finish();
    tally.print(&[
        ("idmint_v4", "uuid_new_v4"),
        ("idmint_v7", "uuid_now_v7"),
        ("idmint_v7_batch", "uuid_now_v7"),
        ("idmint_ulid", "ulid_generate"),
        ("idmint_ulid", "ulid_generator"),
        ("idmint_ulid", "ulid_generator_mutex"),
        ("idmint_v4_string", "uuid_new_v4_string"),
        ("idmint_v7_string", "uuid_now_v7_string"),
        ("idmint_v7_hex_string", "uuid_now_v7_simple_string"),
        ("idmint_ulid_string", "ulid_generate_string"),
        ("idmint_ulid_string", "ulid_generator_string"),
    ]);
}

fn encodings(c: &mut Criterion) {
    let tally = Tally::default();
    let mut group = group(c, "encodings");
    let counter = AtomicU64::new(1);
    tally.bench(&mut group, "fetch_add", 1, || counter.fetch_add(1, Ordering::Relaxed));
    let mut id = 0u64;
    let mut next = move || {
        id += 1;
        black_box(id)
    };
    tally.bench(&mut group, "u64_to_string", 1, || next().to_string());
    for (name, encoding) in [
        ("decimal_19", Encoding::Decimal),
        ("base36_13", Encoding::Base36),
        ("base62_11", Encoding::Base62),
        ("crockford32_13", Encoding::Crockford32),
    ] {
        let width = Some(encoding.digits_max());
        tally.bench(&mut group, name, 1, || encoding.encode(next(), width).expect("fits"));
    }
    let key = PermuteKey::from_bytes(*b"bench-key-16byte");
    for (name, bits) in [("permute_32", 32), ("permute_41", 41), ("permute_63", 63)] {
        let permutation = Permutation::new(&key, bits).expect("width");
        tally.bench(&mut group, name, 1, || permutation.forward(next()).expect("in range"));
    }
    let zone = idmint::sequence::time_zone("UTC").expect("UTC");
    let keyed = Permutation::new(&key, 41).ok();
    let format = IdFormat::new("ORD-{date:%Y%m%d}-{id:base36:8}", zone, keyed).expect("template");
    let renderer = format.at(&format.zoned(1_795_341_600_000)).expect("renders");
    tally.bench(&mut group, "template_keyed", 1, || renderer.render(next()).expect("renders"));
    group.finish();
    tally.print(&[
        ("decimal_19", "u64_to_string"),
        ("base36_13", "u64_to_string"),
        ("base62_11", "u64_to_string"),
        ("crockford32_13", "u64_to_string"),
        ("permute_32", "fetch_add"),
        ("permute_41", "fetch_add"),
        ("permute_63", "fetch_add"),
        ("template_keyed", "u64_to_string"),
    ]);
    for name in ["permute_32", "permute_41", "permute_63", "template_keyed"] {
        if let Some(rate) = tally.rate(name) {
            println!("{name}: {:.1} ns per id", 1e9 / rate);
        }
    }
}

/// Ids per call of the `idmint_v7_batch` variant (`Uuids::v7(count)`, the HTTP path).
const BATCH: u64 = 1_000;

/// A group with this file's measurement settings.
fn group<'a>(c: &'a mut Criterion, name: &str) -> BenchmarkGroup<'a, WallTime> {
    let mut group = c.benchmark_group(name);
    group.measurement_time(Duration::from_secs(2));
    group.warm_up_time(Duration::from_millis(500));
    group
}

/// Ids and time of every variant of a group, as criterion ran it (warm-up included), so the
/// ratios come from the same run as criterion's own figures.
#[derive(Default)]
struct Tally {
    runs: RefCell<BTreeMap<&'static str, (u64, Duration)>>,
}

impl Tally {
    /// Benchmarks `make` (one call makes `ids` ids) as `name` in `group`, counting its ids
    /// and time.
    fn bench<T>(
        &self,
        group: &mut BenchmarkGroup<'_, WallTime>,
        name: &'static str,
        ids: u64,
        mut make: impl FnMut() -> T,
    ) {
        group.throughput(Throughput::Elements(ids));
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let started = Instant::now();
                for _ in 0..iters {
                    black_box(make());
                }
                let elapsed = started.elapsed();
                let mut runs = self.runs.borrow_mut();
                let run = runs.entry(name).or_default();
                run.0 += iters * ids;
                run.1 += elapsed;
                elapsed
            })
        });
    }

    /// Ids per second of `name`, if it ran (a filter may skip it).
    fn rate(&self, name: &str) -> Option<f64> {
        let runs = self.runs.borrow();
        let (ids, time) = runs.get(name)?;
        Some(*ids as f64 / time.as_secs_f64().max(f64::MIN_POSITIVE))
    }

    /// A Markdown table: each `(variant, baseline)` pair's ids/s and their ratio.
    fn print(&self, pairs: &[(&str, &str)]) {
        let show = |rate: Option<f64>| rate.map_or("-".to_string(), |r| format!("{r:.0}"));
        println!();
        println!("| variant | ids/s | baseline | baseline ids/s | ratio |");
        println!("|---|---:|---|---:|---:|");
        for (variant, baseline) in pairs {
            let (ours, theirs) = (self.rate(variant), self.rate(baseline));
            let ratio = match (ours, theirs) {
                (Some(ours), Some(theirs)) => format!("{:.2}", ours / theirs),
                _ => "-".to_string(),
            };
            println!("| {variant} | {} | {baseline} | {} | {ratio} |", show(ours), show(theirs));
        }
        println!();
    }
}

criterion_group!(benches, uuid_ulid, encodings);
criterion_main!(benches);
