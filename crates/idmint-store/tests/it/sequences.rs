//! The sequence suite: what every `SequenceStore` backend must do (definitions, and ceilings
//! that only grow, by exactly what was asked, in one atomic step), written once against the
//! trait and instantiated per backend with [`sequence_suite!`] in the modules at the end of
//! this file, beside the checks only one backend can make.
//!
//! The sequence tables have fixed names, so on MySQL and PostgreSQL every check of a run
//! shares them (in the run's fresh database). Checks therefore keep to names of their own,
//! starting with a prefix named after the check, and look only at those in listings.

use std::collections::BTreeSet;
use std::sync::Arc;

use idmint_core::Tag;
use idmint_store::{
    CEILING_MAX, PERIOD_LEN_MAX, SEQUENCE_FORMAT_LEN_MAX, SequenceRecord, SequenceSpec,
    SequenceStore, StoreError, TIME_ZONE_LEN_MAX,
};

/// The suite's runner: one check on a fresh subject's store.
pub use crate::conformance::run;

/// When the checks' sequences were created, in ms since the Unix epoch.
const CREATED_MS: u64 = 1_700_000_000_123;
/// Tasks raising one ceiling at once in the concurrency check: idmint nodes.
const RAISER_COUNT: u64 = 8;
/// Raises each of them makes.
const RAISES_PER_TASK: u64 = 50;

/// A sequence store under test, with whatever must live as long as it does.
pub type SequenceSubject = crate::conformance::Subject<dyn SequenceStore>;

/// Generates one `#[tokio::test]` per sequence check in the calling module (the test kit's
/// [`idmint_testkit::suite!`] over this module's checks).
///
/// `$factory` is an `async fn() -> Option<SequenceSubject>`: a store on which the check's own
/// names are unused, or `None` when the backend cannot run here (the test kit has recorded
/// the skip for the run's summary).
macro_rules! sequence_suite {
    ($factory:path) => {
        idmint_testkit::suite! {
            checks: crate::sequences, runner: run, subject: $factory,
            tests: [
                create_get_list_delete_round_trip,
                a_duplicate_name_is_refused_and_the_first_kept,
                concurrent_creates_of_one_name_succeed_once,
                names_compare_byte_for_byte,
                specs_outside_the_bounds_are_refused_and_nothing_is_written,
                ceilings_start_at_zero_and_grow_by_exactly_by,
                ceilings_are_per_period_and_per_name,
                bad_raises_and_periods_are_refused_and_nothing_is_written,
                a_raise_past_the_max_is_refused_and_the_ceiling_left_unchanged,
                delete_keeps_the_ceilings_so_a_recreated_sequence_continues_above,
                concurrent_raises_are_distinct_and_add_up,
                names_in_any_characters_round_trip,
            ],
        }
    };
}

/// A plain sequence (no format) and a daily one (with a format) read back as created, one by
/// one and listed in name order; deleting one leaves the other, and a second delete is
/// refused as not found.
pub async fn create_get_list_delete_round_trip(store: Arc<dyn SequenceStore>) {
    let plain = spec("sq.round.plain", false, None, "UTC");
    let daily = spec("sq.round.daily", true, Some("{date:%Y%m%d}{seq:06}"), "+08:00");
    assert_eq!(store.get_sequence(&plain.name).await, Ok(None));
    assert_eq!(store.create_sequence(&plain).await, Ok(plain.clone()));
    assert_eq!(store.create_sequence(&daily).await, Ok(daily.clone()));

    assert_eq!(store.get_sequence(&plain.name).await, Ok(Some(plain.clone())));
    assert_eq!(store.get_sequence(&daily.name).await, Ok(Some(daily.clone())));
    assert_eq!(listed(&store, "sq.round.").await, [daily.clone(), plain.clone()]);

    assert_eq!(store.delete_sequence(&daily.name).await, Ok(()));
    assert_eq!(store.get_sequence(&daily.name).await, Ok(None));
    assert_eq!(listed(&store, "sq.round.").await, std::slice::from_ref(&plain));
    assert_eq!(
        store.delete_sequence(&daily.name).await,
        Err(StoreError::TagNotFound(daily.name.clone()))
    );
    assert_eq!(store.get_sequence(&plain.name).await, Ok(Some(plain)));
}

/// A second sequence of one name is refused, naming it, and the first stays as it was.
pub async fn a_duplicate_name_is_refused_and_the_first_kept(store: Arc<dyn SequenceStore>) {
    let first = spec("sq.dup", false, None, "UTC");
    store.create_sequence(&first).await.unwrap();
    let second = spec("sq.dup", true, Some("{seq}"), "Asia/Shanghai");
    let Err(StoreError::InvalidValue(message)) = store.create_sequence(&second).await else {
        panic!("a duplicate sequence was not refused as invalid");
    };
    assert!(message.contains("sq.dup") && message.contains("already exists"), "{message}");
    assert_eq!(store.get_sequence(&first.name).await, Ok(Some(first)));
    assert_eq!(listed(&store, "sq.dup").await.len(), 1);
}

/// Nodes creating one name at once: exactly one succeeds, the rest are refused as existing.
pub async fn concurrent_creates_of_one_name_succeed_once(store: Arc<dyn SequenceStore>) {
    let tasks: Vec<_> = (0..RAISER_COUNT)
        .map(|task| {
            let store = Arc::clone(&store);
            let spec = SequenceSpec {
                created_ms: CREATED_MS + task,
                ..spec("sq.race", false, None, "UTC")
            };
            tokio::spawn(async move { store.create_sequence(&spec).await })
        })
        .collect();
    let mut created = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(record) => created.push(record),
            Err(StoreError::InvalidValue(message)) => {
                assert!(message.contains("already exists"), "{message}");
            }
            Err(other) => panic!("a racing create failed otherwise: {other:?}"),
        }
    }
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(listed(&store, "sq.race").await, created);
}

/// Names that differ only in case are two sequences with ceilings of their own.
pub async fn names_compare_byte_for_byte(store: Arc<dyn SequenceStore>) {
    let upper = spec("sq.case.Order", false, None, "UTC");
    let lower = spec("sq.case.order", true, None, "UTC");
    store.create_sequence(&upper).await.unwrap();
    store.create_sequence(&lower).await.unwrap();
    assert_eq!(listed(&store, "sq.case.").await, [upper.clone(), lower.clone()]);
    assert_eq!(store.raise_ceiling(&upper.name, "", 3).await, Ok(3));
    assert_eq!(store.raise_ceiling(&lower.name, "", 5).await, Ok(5));
    assert_eq!(store.ceiling(&upper.name, "").await, Ok(3));
    store.delete_sequence(&lower.name).await.unwrap();
    assert_eq!(store.get_sequence(&upper.name).await, Ok(Some(upper.clone())));
    assert_eq!(store.ceiling(&upper.name, "").await, Ok(3));
}

/// Formats and time zones of 0 or too many bytes and too late a creation time are refused
/// before anything is written; the largest of each is stored intact (multi-byte text too).
pub async fn specs_outside_the_bounds_are_refused_and_nothing_is_written(
    store: Arc<dyn SequenceStore>,
) {
    let base = spec("sq.bounds", false, None, "UTC");
    let bad = [
        SequenceSpec { format: Some(String::new()), ..base.clone() },
        SequenceSpec { format: Some("f".repeat(SEQUENCE_FORMAT_LEN_MAX + 1)), ..base.clone() },
        SequenceSpec { time_zone: String::new(), ..base.clone() },
        SequenceSpec { time_zone: "z".repeat(TIME_ZONE_LEN_MAX + 1), ..base.clone() },
        SequenceSpec { created_ms: CEILING_MAX + 1, ..base.clone() },
    ];
    for spec in &bad {
        assert!(invalid(store.create_sequence(spec).await), "{spec:?} was accepted");
    }
    assert_eq!(store.get_sequence(&base.name).await, Ok(None));

    // "订单" is 6 bytes: the format is exactly the longest allowed.
    let format = format!("订单{}", "x".repeat(SEQUENCE_FORMAT_LEN_MAX - 6));
    let largest = SequenceSpec {
        format: Some(format),
        time_zone: "z".repeat(TIME_ZONE_LEN_MAX),
        created_ms: CEILING_MAX,
        ..base
    };
    assert_eq!(store.create_sequence(&largest).await, Ok(largest.clone()));
    assert_eq!(store.get_sequence(&largest.name).await, Ok(Some(largest.clone())));
    assert_eq!(listed(&store, "sq.bounds").await, [largest]);
}

/// A never-raised ceiling reads 0; each raise adds exactly `by` and returns the new ceiling,
/// which a read then sees.
pub async fn ceilings_start_at_zero_and_grow_by_exactly_by(store: Arc<dyn SequenceStore>) {
    let name = tag("sq.grow");
    store.create_sequence(&spec("sq.grow", false, None, "UTC")).await.unwrap();
    assert_eq!(store.ceiling(&name, "").await, Ok(0));
    let mut expected = 0;
    for by in [1, 1, 5, 1_000, 2, 123_456_789] {
        expected += by;
        assert_eq!(store.raise_ceiling(&name, "", by).await, Ok(expected), "raise by {by}");
        assert_eq!(store.ceiling(&name, "").await, Ok(expected));
    }
}

/// Each `(name, period)` has a ceiling of its own: raising one leaves the others, including
/// other days of the same sequence and the same day of another one.
pub async fn ceilings_are_per_period_and_per_name(store: Arc<dyn SequenceStore>) {
    let (a, b) = (tag("sq.periods.a"), tag("sq.periods.b"));
    let longest = "9".repeat(PERIOD_LEN_MAX);
    assert_eq!(store.raise_ceiling(&a, "", 10).await, Ok(10));
    assert_eq!(store.raise_ceiling(&a, "20240101", 3).await, Ok(3));
    assert_eq!(store.raise_ceiling(&a, "20240102", 4).await, Ok(4));
    assert_eq!(store.raise_ceiling(&b, "20240101", 7).await, Ok(7));
    assert_eq!(store.raise_ceiling(&a, "20240101", 3).await, Ok(6));
    assert_eq!(store.raise_ceiling(&a, &longest, 1).await, Ok(1));

    assert_eq!(store.ceiling(&a, "").await, Ok(10));
    assert_eq!(store.ceiling(&a, "20240101").await, Ok(6));
    assert_eq!(store.ceiling(&a, "20240102").await, Ok(4));
    assert_eq!(store.ceiling(&a, "20240103").await, Ok(0));
    assert_eq!(store.ceiling(&a, &longest).await, Ok(1));
    assert_eq!(store.ceiling(&b, "").await, Ok(0));
    assert_eq!(store.ceiling(&b, "20240101").await, Ok(7));
}

/// A raise by 0 or by more than the largest ceiling, and any period that is not up to 16
/// ASCII digits, are refused before the store is asked; nothing is written.
pub async fn bad_raises_and_periods_are_refused_and_nothing_is_written(
    store: Arc<dyn SequenceStore>,
) {
    let name = tag("sq.bad");
    store.raise_ceiling(&name, "20240101", 2).await.unwrap();
    for by in [0, CEILING_MAX + 1, u64::MAX] {
        let refused = store.raise_ceiling(&name, "20240101", by).await;
        assert!(invalid(refused), "a raise by {by} was accepted");
    }
    let too_long = "1".repeat(PERIOD_LEN_MAX + 1);
    for period in ["2024-01-01", "abc", " ", "2024010a", "２０２４", "'; --", &too_long] {
        assert!(invalid(store.raise_ceiling(&name, period, 1).await), "{period:?} raised");
        assert!(invalid(store.ceiling(&name, period).await), "{period:?} read");
    }
    assert_eq!(store.ceiling(&name, "20240101").await, Ok(2));
    assert_eq!(store.ceiling(&name, "").await, Ok(0));
}

/// Raising past the largest ceiling is refused, names the sequence and changes nothing; a
/// raise that lands exactly on it is accepted. A fresh ceiling may start at the largest.
pub async fn a_raise_past_the_max_is_refused_and_the_ceiling_left_unchanged(
    store: Arc<dyn SequenceStore>,
) {
    let name = tag("sq.max");
    let near = CEILING_MAX - 10;
    assert_eq!(store.raise_ceiling(&name, "", near).await, Ok(near));
    for by in [11, 12, 1 << 40, CEILING_MAX] {
        let Err(StoreError::InvalidValue(message)) = store.raise_ceiling(&name, "", by).await
        else {
            panic!("a raise of {near} by {by} was not refused");
        };
        assert!(message.contains("sq.max"), "{message}");
        assert_eq!(store.ceiling(&name, "").await, Ok(near), "after a raise by {by}");
    }
    assert_eq!(store.raise_ceiling(&name, "", 10).await, Ok(CEILING_MAX));
    assert!(invalid(store.raise_ceiling(&name, "", 1).await));
    assert_eq!(store.ceiling(&name, "").await, Ok(CEILING_MAX));

    assert_eq!(store.raise_ceiling(&name, "20240101", CEILING_MAX).await, Ok(CEILING_MAX));
    assert!(invalid(store.raise_ceiling(&name, "20240101", 1).await));
    assert_eq!(store.raise_ceiling(&name, "20240102", 1).await, Ok(1));
    assert!(invalid(store.raise_ceiling(&name, "20240102", CEILING_MAX).await));
    assert_eq!(store.ceiling(&name, "20240102").await, Ok(1));
}

/// Deleting a sequence removes its definition, and only its own, but keeps its ceilings:
/// recreated, it continues above every number the old one could have served.
pub async fn delete_keeps_the_ceilings_so_a_recreated_sequence_continues_above(
    store: Arc<dyn SequenceStore>,
) {
    let gone = spec("sq.delete.gone", true, None, "UTC");
    let kept = spec("sq.delete.kept", true, None, "UTC");
    for spec in [&gone, &kept] {
        store.create_sequence(spec).await.unwrap();
        store.raise_ceiling(&spec.name, "20240101", 100).await.unwrap();
        store.raise_ceiling(&spec.name, "20240102", 200).await.unwrap();
    }
    store.delete_sequence(&gone.name).await.unwrap();
    assert_eq!(store.get_sequence(&gone.name).await, Ok(None));
    assert_eq!(store.get_sequence(&kept.name).await, Ok(Some(kept.clone())));
    assert_eq!(store.ceiling(&gone.name, "20240101").await, Ok(100));
    assert_eq!(store.ceiling(&gone.name, "20240102").await, Ok(200));
    assert_eq!(
        store.delete_sequence(&gone.name).await,
        Err(StoreError::TagNotFound(gone.name.clone()))
    );

    store.create_sequence(&gone).await.unwrap();
    assert_eq!(store.raise_ceiling(&gone.name, "20240101", 1).await, Ok(101));
}

/// Eight nodes raising one ceiling at once, fifty times each, by sizes all distinct: every
/// raise returns a distinct ceiling, the ranges `(ceiling - by, ceiling]` they reserve tile
/// `(0, total]` without a gap or an overlap, and the final ceiling is the sum. This is what
/// stops two idmint nodes from handing out one block of a sequence twice.
pub async fn concurrent_raises_are_distinct_and_add_up(store: Arc<dyn SequenceStore>) {
    let name = tag("sq.concurrent");
    let raises = raise_concurrently(&store, &name, "20240101").await;
    let total: u64 = raises.iter().map(|(by, _)| by).sum();
    assert_eq!(total, (RAISER_COUNT * RAISES_PER_TASK) * (RAISER_COUNT * RAISES_PER_TASK + 1) / 2);
    assert_tile(raises, total);
    assert_eq!(store.ceiling(&name, "20240101").await, Ok(total));
    assert_eq!(store.ceiling(&name, "").await, Ok(0));
}

/// Runs [`RAISER_COUNT`] tasks, each raising `(name, period)` [`RAISES_PER_TASK`] times by
/// sizes no other raise uses (1 to 400); returns every `(by, new ceiling)`.
pub async fn raise_concurrently(
    store: &Arc<dyn SequenceStore>,
    name: &Tag,
    period: &str,
) -> Vec<(u64, u64)> {
    let tasks: Vec<_> = (0..RAISER_COUNT)
        .map(|task| {
            let (store, name, period) = (Arc::clone(store), name.clone(), period.to_string());
            tokio::spawn(async move {
                let mut raises = Vec::new();
                for i in 0..RAISES_PER_TASK {
                    let by = 1 + task * RAISES_PER_TASK + i;
                    raises.push((by, store.raise_ceiling(&name, &period, by).await.unwrap()));
                }
                raises
            })
        })
        .collect();
    let mut raises = Vec::new();
    for task in tasks {
        raises.extend(task.await.unwrap());
    }
    raises
}

/// Asserts that the raises' ceilings are distinct and that their ranges `(ceiling - by,
/// ceiling]` tile `(0, total]`: each starts where the previous one (by ceiling) ended.
pub fn assert_tile(mut raises: Vec<(u64, u64)>, total: u64) {
    let ceilings: BTreeSet<u64> = raises.iter().map(|(_, ceiling)| *ceiling).collect();
    assert_eq!(ceilings.len(), raises.len(), "two raises returned one ceiling");
    raises.sort_by_key(|(_, ceiling)| *ceiling);
    let mut end = 0;
    for (by, ceiling) in raises {
        assert_eq!(ceiling - by, end, "the raise by {by} to {ceiling} does not follow {end}");
        end = ceiling;
    }
    assert_eq!(end, total);
}

/// Names in any characters a tag may hold (quotes, `%`, braces for Redis hash tags, CJK, an
/// emoji): defined, listed in byte order and given ceilings of their own, each as itself.
pub async fn names_in_any_characters_round_trip(store: Arc<dyn SequenceStore>) {
    let names: Vec<String> = ["it's", "a b", "100%_", "}x", "{y}", "订单", "🚀", "back\\slash"]
        .iter()
        .map(|n| format!("sq.any {n}"))
        .collect();
    for (i, name) in names.iter().enumerate() {
        store.create_sequence(&spec(name, false, None, "UTC")).await.unwrap();
        let by = i as u64 + 1;
        assert_eq!(store.raise_ceiling(&tag(name), "", by).await, Ok(by), "{name:?}");
        assert_eq!(store.raise_ceiling(&tag(name), "20240101", by).await, Ok(by), "{name:?}");
    }
    for (i, name) in names.iter().enumerate() {
        assert_eq!(store.ceiling(&tag(name), "").await, Ok(i as u64 + 1), "{name:?}");
    }
    let got: Vec<String> =
        listed(&store, "sq.any ").await.into_iter().map(|r| r.name.to_string()).collect();
    let mut want = names.clone();
    want.sort();
    assert_eq!(got, want);
}

/// The sequences whose names start with `prefix`, as listed; asserts the whole listing is in
/// name order.
pub async fn listed(store: &Arc<dyn SequenceStore>, prefix: &str) -> Vec<SequenceRecord> {
    let all = store.list_sequences().await.unwrap();
    let names: Vec<&str> = all.iter().map(|r| r.name.as_str()).collect();
    assert!(names.windows(2).all(|w| w[0] < w[1]), "not in name order: {names:?}");
    all.into_iter().filter(|r| r.name.as_str().starts_with(prefix)).collect()
}

/// A definition from literals, created at [`CREATED_MS`].
pub fn spec(name: &str, daily: bool, format: Option<&str>, time_zone: &str) -> SequenceSpec {
    SequenceSpec {
        name: tag(name),
        daily,
        format: format.map(str::to_string),
        time_zone: time_zone.to_string(),
        created_ms: CREATED_MS,
    }
}

/// The name `name`, which must be valid.
pub fn tag(name: &str) -> Tag {
    Tag::parse(name).unwrap()
}

fn invalid<T: std::fmt::Debug>(result: Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::InvalidValue(_)))
}

mod memory {
    //! The sequence suite on the memory backend, its count limit, and `open_sequences`'
    //! refusals.

    use std::sync::Arc;

    use idmint_store::{
        MemoryStore, SEQUENCE_COUNT_MAX, SequenceStore, StoreError, StoreUrl, open_sequences,
    };

    use super::{SequenceSubject, spec};

    async fn fresh() -> Option<SequenceSubject> {
        Some(SequenceSubject::new(Arc::new(MemoryStore::new())))
    }

    sequence_suite!(fresh);

    #[tokio::test]
    async fn open_sequences_refuses_sets_of_stores_without_showing_a_password() {
        for url in [
            "flicker+mysql://app:s3cret-Pw@db1/ids flicker+mysql://app:s3cret-Pw@db2/ids",
            "mysql://app:s3cret-Pw@db1/ids mysql://app:s3cret-Pw@db2/ids",
            "memory:// memory://",
        ] {
            let parsed = StoreUrl::parse(url).unwrap();
            let Err(error) = open_sequences(&parsed).await else { panic!("{url} was opened") };
            assert!(matches!(error, StoreError::BadUrl { .. }), "{error:?}");
            let text = error.to_string();
            assert!(text.contains("sequence") && text.contains("single store"), "{text}");
            assert!(!text.contains("s3cret"), "the password shows: {text}");
        }
        let store = open_sequences(&StoreUrl::Memory).await.unwrap();
        assert_eq!(store.list_sequences().await, Ok(Vec::new()));
    }

    #[tokio::test]
    async fn the_count_of_sequences_is_bounded() {
        let store = MemoryStore::new();
        for i in 0..SEQUENCE_COUNT_MAX {
            store.create_sequence(&spec(&format!("sq.n{i}"), false, None, "UTC")).await.unwrap();
        }
        let refused = store.create_sequence(&spec("sq.one-more", false, None, "UTC")).await;
        assert!(matches!(refused, Err(StoreError::InvalidValue(_))), "{refused:?}");
        assert_eq!(store.list_sequences().await.unwrap().len(), SEQUENCE_COUNT_MAX);
    }
}

mod sqlite {
    //! The sequence suite on an SQLite file, and what only a file shows: definitions and
    //! ceilings survive reopening, two connections to one file raise one ceiling without
    //! losing or repeating a block, and the count of sequences is bounded.

    use std::sync::Arc;

    use idmint_store::{
        SEQUENCE_COUNT_MAX, SEQUENCES_TABLE, SequenceStore, SqliteStore, StoreError, StoreUrl,
        open_sequences,
    };
    use rusqlite::{Connection, params};

    use super::{
        RAISER_COUNT, RAISES_PER_TASK, SequenceSubject, assert_tile, raise_concurrently, spec, tag,
    };

    async fn fresh() -> Option<SequenceSubject> {
        let dir = tempfile::tempdir().unwrap();
        let store = open_sequences(&StoreUrl::Sqlite(dir.path().join("idmint.db"))).await;
        Some(SequenceSubject::with_guard(store.unwrap(), dir))
    }

    sequence_suite!(fresh);

    #[tokio::test]
    async fn definitions_and_ceilings_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idmint.db");
        let daily = spec("sq.durable", true, Some("{seq:08}"), "Europe/Berlin");
        let store = SqliteStore::open(&path).await.unwrap();
        store.create_sequence(&daily).await.unwrap();
        store.raise_ceiling(&daily.name, "20240229", 500).await.unwrap();
        drop(store);

        let store = SqliteStore::open(&path).await.unwrap();
        assert_eq!(store.list_sequences().await, Ok(vec![daily.clone()]));
        assert_eq!(store.ceiling(&daily.name, "20240229").await, Ok(500));
        assert_eq!(store.raise_ceiling(&daily.name, "20240229", 1).await, Ok(501));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_connections_to_one_file_raise_without_losing_a_block() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idmint.db");
        let first: Arc<dyn SequenceStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
        let second: Arc<dyn SequenceStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
        let name = tag("sq.shared-file");
        let (a, b) = tokio::join!(
            raise_concurrently(&first, &name, ""),
            raise_concurrently(&second, &name, ""),
        );
        // Each store raised by 1..=400 once: every size twice in all.
        let count = RAISER_COUNT * RAISES_PER_TASK;
        let total = count * (count + 1);
        assert_tile(a.into_iter().chain(b).collect(), total);
        assert_eq!(first.ceiling(&name, "").await, Ok(total));
    }

    #[tokio::test]
    async fn the_count_of_sequences_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idmint.db");
        let store = SqliteStore::open(&path).await.unwrap();
        // Makes the tables; then all but one sequence are written in one transaction.
        assert_eq!(store.list_sequences().await, Ok(Vec::new()));
        let mut raw = Connection::open(&path).unwrap();
        let tx = raw.transaction().unwrap();
        for i in 1..SEQUENCE_COUNT_MAX {
            tx.execute(
                &format!("INSERT INTO {SEQUENCES_TABLE} VALUES (?1, 0, NULL, 'UTC', 1)"),
                params![format!("sq.n{i}")],
            )
            .unwrap();
        }
        tx.commit().unwrap();

        store.create_sequence(&spec("sq.last", false, None, "UTC")).await.unwrap();
        let refused = store.create_sequence(&spec("sq.one-more", false, None, "UTC")).await;
        assert!(matches!(refused, Err(StoreError::InvalidValue(_))), "{refused:?}");
        assert_eq!(store.list_sequences().await.unwrap().len(), SEQUENCE_COUNT_MAX);
        assert_eq!(store.get_sequence(&tag("sq.one-more")).await, Ok(None));
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    //! The sequence suite on MySQL / MariaDB, in this run's database (the test kit's
    //! server; skipped and reported without one), and the tables idmint makes there.

    use idmint_store::{CEILINGS_TABLE, SEQUENCES_TABLE, StoreUrl, open_sequences};

    use super::{SequenceSubject, tag};

    /// The run's database, with a segment table of the suite's own and a pool as wide as the
    /// concurrency check.
    async fn url() -> Option<StoreUrl> {
        crate::mysql::suite_url("sequence_suite", 8).await
    }

    async fn fresh() -> Option<SequenceSubject> {
        Some(SequenceSubject::new(open_sequences(&url().await?).await.unwrap()))
    }

    sequence_suite!(fresh);

    #[tokio::test]
    async fn the_sequence_tables_compare_bytes() {
        let Some(url) = url().await else { return };
        let store = open_sequences(&url).await.unwrap();
        store.raise_ceiling(&tag("sq.mysql-tables"), "", 1).await.unwrap();
        crate::mysql::assert_tables_compare_bytes(&[SEQUENCES_TABLE, CEILINGS_TABLE]).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    //! The sequence suite on PostgreSQL, in this run's database (the test kit's
    //! server; skipped and reported without one).

    use idmint_store::open_sequences;

    use super::SequenceSubject;

    async fn fresh() -> Option<SequenceSubject> {
        let url = crate::postgres::suite_url("sequence_suite", 8).await?;
        Some(SequenceSubject::new(open_sequences(&url).await.unwrap()))
    }

    sequence_suite!(fresh);
}
