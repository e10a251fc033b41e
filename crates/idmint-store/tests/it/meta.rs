//! The tag-metadata suite: what every `TagMetaStore` backend must do (values read back as
//! set, changed only by a compare-and-set from the value that is there, one winner among
//! racing writers, tags and names compared byte for byte, bad input refused with nothing
//! written), written once against the trait and instantiated per backend with
//! [`meta_suite!`] in the modules at the end of this file, beside the check that values
//! survive reopening the store.
//!
//! The metadata table has a fixed name, so on MySQL and PostgreSQL every check of a run
//! shares it (in the run's fresh database): each check keeps to tags of its own, starting
//! with a prefix named after the check.

use std::sync::Arc;

use idmint_core::Tag;
use idmint_store::{META_NAME_LEN_MAX, META_VALUE_LEN_MAX, StoreError, TagMetaStore};

/// The suite's runner: one check on a fresh subject's store.
pub use crate::conformance::run;

/// Tasks writing one value at once in the race check: idmint nodes starting together.
const WRITER_COUNT: usize = 8;
/// Rounds of that race, each on a tag of its own.
const RACE_ROUNDS: usize = 10;

/// A metadata store under test, with whatever must live as long as it does.
pub type MetaSubject = crate::conformance::Subject<dyn TagMetaStore>;

/// Generates one `#[tokio::test]` per metadata check in the calling module (the test kit's
/// [`idmint_testkit::suite!`] over this module's checks).
///
/// `$factory` is an `async fn() -> Option<MetaSubject>`: a store on which the check's own
/// tags are unused, or `None` when the backend cannot run here (the test kit has recorded
/// the skip for the run's summary).
macro_rules! meta_suite {
    ($factory:path) => {
        idmint_testkit::suite! {
            checks: crate::meta, runner: run, subject: $factory,
            tests: [
                a_value_changes_only_from_the_value_that_is_there,
                racing_sets_have_exactly_one_winner,
                tags_names_and_values_compare_byte_for_byte,
                bad_input_is_refused_and_nothing_is_written,
                values_at_the_bounds_round_trip,
                every_tags_value_of_a_name_is_listed,
            ],
        }
    };
}

/// Every tag holding a value of a name is listed with its value as it is now, and no tag
/// without one (a compare-and-set that did not take leaves none), nor another name's values;
/// a bad name is refused.
pub async fn every_tags_value_of_a_name_is_listed(store: Arc<dyn TagMetaStore>) {
    let (a, b, c, d) =
        (tag("meta.list.a"), tag("meta.list.b"), tag("meta.list.c"), tag("meta.list.d"));
    assert_eq!(store.compare_and_set_meta(&a, "listed", None, "1").await, Ok(true));
    assert_eq!(store.compare_and_set_meta(&b, "listed", None, "2").await, Ok(true));
    assert_eq!(store.compare_and_set_meta(&c, "unlisted", None, "3").await, Ok(true));
    assert_eq!(store.compare_and_set_meta(&d, "listed", Some("x"), "4").await, Ok(false));
    assert_eq!(store.compare_and_set_meta(&a, "listed", Some("1"), "5").await, Ok(true));
    let mut listed: Vec<(String, String)> = store
        .meta_of_every_tag("listed")
        .await
        .unwrap()
        .into_iter()
        .filter(|(tag, _)| tag.as_str().starts_with("meta.list."))
        .map(|(tag, value)| (tag.as_str().to_string(), value))
        .collect();
    listed.sort();
    let expected = [("meta.list.a", "5"), ("meta.list.b", "2")];
    assert_eq!(listed, expected.map(|(t, v)| (t.to_string(), v.to_string())));
    assert!(invalid(store.meta_of_every_tag("bad name").await));
}

/// A missing value reads as `None`; a set from `None` takes; a second set from `None`, or a
/// set from a value that is not there, changes nothing and says so; a set from the value
/// there takes, and so does a set to the same value.
pub async fn a_value_changes_only_from_the_value_that_is_there(store: Arc<dyn TagMetaStore>) {
    let orders = tag("meta.cas.orders");
    assert_eq!(store.meta(&orders, "key").await, Ok(None));
    assert_eq!(store.compare_and_set_meta(&orders, "key", None, "first").await, Ok(true));
    assert_eq!(store.meta(&orders, "key").await, Ok(Some("first".to_string())));

    assert_eq!(store.compare_and_set_meta(&orders, "key", None, "second").await, Ok(false));
    let stale = store.compare_and_set_meta(&orders, "key", Some("other"), "second").await;
    assert_eq!(stale, Ok(false));
    assert_eq!(store.meta(&orders, "key").await, Ok(Some("first".to_string())));

    let moved = store.compare_and_set_meta(&orders, "key", Some("first"), "second").await;
    assert_eq!(moved, Ok(true));
    assert_eq!(store.meta(&orders, "key").await, Ok(Some("second".to_string())));
    let same = store.compare_and_set_meta(&orders, "key", Some("second"), "second").await;
    assert_eq!(same, Ok(true));
    let gone = store.compare_and_set_meta(&orders, "key", Some("first"), "first").await;
    assert_eq!(gone, Ok(false));
    assert_eq!(store.meta(&orders, "key").await, Ok(Some("second".to_string())));

    // Another name of the tag, and the name on another tag, are values of their own.
    assert_eq!(store.meta(&orders, "other").await, Ok(None));
    assert_eq!(store.meta(&tag("meta.cas.users"), "key").await, Ok(None));
}

/// [`WRITER_COUNT`] writers set one value from `None` at once: exactly one wins, and the value
/// is the winner's; then they race again from that value, with the same outcome.
pub async fn racing_sets_have_exactly_one_winner(store: Arc<dyn TagMetaStore>) {
    for round in 0..RACE_ROUNDS {
        let tag = tag(&format!("meta.race.{round}"));
        let winner = race(&store, &tag, None, "first").await;
        let first = format!("first {winner}");
        assert_eq!(store.meta(&tag, "key").await, Ok(Some(first.clone())), "round {round}");

        let winner = race(&store, &tag, Some(&first), "second").await;
        let second = format!("second {winner}");
        assert_eq!(store.meta(&tag, "key").await, Ok(Some(second)), "round {round}");
    }
}

/// Tags, names and values that a case- or accent-folding collation would take for one are
/// kept apart: each holds its own value, and a compare-and-set from a value that differs only
/// in case, accents or a trailing space does not take.
pub async fn tags_names_and_values_compare_byte_for_byte(store: Arc<dyn TagMetaStore>) {
    // "Café" precomposed and decomposed, unaccented, in other cases.
    let tags =
        ["meta.exact.Caf\u{e9}", "meta.exact.Cafe\u{301}", "meta.exact.cafe", "meta.exact.CAFE"];
    for (i, name) in tags.iter().enumerate() {
        let set = store.compare_and_set_meta(&tag(name), "key", None, &format!("v{i}")).await;
        assert_eq!(set, Ok(true), "{name} took another tag's value");
    }
    for (i, name) in tags.iter().enumerate() {
        assert_eq!(store.meta(&tag(name), "key").await, Ok(Some(format!("v{i}"))), "{name}");
    }

    let orders = tag("meta.exact.orders");
    for (i, name) in ["key", "Key", "KEY"].iter().enumerate() {
        let set = store.compare_and_set_meta(&orders, name, None, &format!("n{i}")).await;
        assert_eq!(set, Ok(true), "name {name} took another name's value");
    }
    for (i, name) in ["key", "Key", "KEY"].iter().enumerate() {
        assert_eq!(store.meta(&orders, name).await, Ok(Some(format!("n{i}"))), "{name}");
    }

    let value = tag("meta.exact.value");
    store.compare_and_set_meta(&value, "key", None, "Caf\u{e9}").await.unwrap();
    for near in ["caf\u{e9}", "Cafe", "Cafe\u{301}", "Caf\u{e9} ", "CAF\u{c9}"] {
        let set = store.compare_and_set_meta(&value, "key", Some(near), "changed").await;
        assert_eq!(set, Ok(false), "{near:?} was taken for the stored value");
    }
    assert_eq!(store.meta(&value, "key").await, Ok(Some("Caf\u{e9}".to_string())));
    // A trailing space is part of a value, read back as written.
    let spaced = tag("meta.exact.spaced");
    store.compare_and_set_meta(&spaced, "key", None, "v ").await.unwrap();
    assert_eq!(store.meta(&spaced, "key").await, Ok(Some("v ".to_string())));
    assert_eq!(store.compare_and_set_meta(&spaced, "key", Some("v"), "w").await, Ok(false));
}

/// Names outside `[A-Za-z0-9_.-]{1,64}` and values too long or holding a control character
/// are refused as invalid before anything is written, from `None` and from a value alike.
pub async fn bad_input_is_refused_and_nothing_is_written(store: Arc<dyn TagMetaStore>) {
    let fresh = tag("meta.bad.fresh");
    let held = tag("meta.bad.held");
    store.compare_and_set_meta(&held, "key", None, "kept").await.unwrap();
    let long_name = "n".repeat(META_NAME_LEN_MAX + 1);
    for name in ["", "a b", "k\u{e9}y", "key\n", long_name.as_str()] {
        assert!(invalid(store.meta(&fresh, name).await), "{name:?} was read");
        let set = store.compare_and_set_meta(&fresh, name, None, "v").await;
        assert!(invalid(set), "{name:?} was written");
    }
    let long_value = "v".repeat(META_VALUE_LEN_MAX + 1);
    for value in [long_value.as_str(), "a\nb", "nul\0", "tab\t"] {
        let set = store.compare_and_set_meta(&fresh, "key", None, value).await;
        assert!(invalid(set), "{value:?} was written");
        let set = store.compare_and_set_meta(&held, "key", Some("kept"), value).await;
        assert!(invalid(set), "{value:?} was written over a value");
        let set = store.compare_and_set_meta(&held, "key", Some(value), "v").await;
        assert!(invalid(set), "{value:?} was compared");
    }
    assert_eq!(store.meta(&fresh, "key").await, Ok(None));
    assert_eq!(store.meta(&held, "key").await, Ok(Some("kept".to_string())));
}

/// The longest name, the longest value (in multi-byte characters too), an empty value and
/// the longest tag are stored and read back exactly.
pub async fn values_at_the_bounds_round_trip(store: Arc<dyn TagMetaStore>) {
    let name = "n".repeat(META_NAME_LEN_MAX);
    let longest = "\u{e9}".repeat(META_VALUE_LEN_MAX / 2);
    let wide = "\u{1f600}".repeat(META_VALUE_LEN_MAX / 4);
    let long_tag = format!("meta.bound.x{}", "\u{e9}".repeat(58));
    assert_eq!(long_tag.len(), idmint_core::limits::TAG_LEN_MAX);
    for (tag_name, value) in
        [("meta.bound.a", longest.as_str()), ("meta.bound.b", wide.as_str()), ("meta.bound.c", "")]
    {
        let t = tag(tag_name);
        assert_eq!(store.compare_and_set_meta(&t, &name, None, value).await, Ok(true));
        assert_eq!(store.meta(&t, &name).await, Ok(Some(value.to_string())), "{tag_name}");
    }
    let t = tag(&long_tag);
    assert_eq!(store.compare_and_set_meta(&t, "key", None, &longest).await, Ok(true));
    assert_eq!(store.meta(&t, "key").await, Ok(Some(longest)));
}

/// Runs [`WRITER_COUNT`] compare-and-sets from `expected` at once, writer `i` writing
/// `"{word} {i}"`, and returns the one winner's number, failing unless exactly one won.
async fn race(
    store: &Arc<dyn TagMetaStore>,
    tag: &Tag,
    expected: Option<&str>,
    word: &str,
) -> usize {
    let writers = (0..WRITER_COUNT).map(|i| {
        let (store, tag, expected) = (Arc::clone(store), tag.clone(), expected.map(str::to_string));
        let value = format!("{word} {i}");
        tokio::spawn(async move {
            store.compare_and_set_meta(&tag, "key", expected.as_deref(), &value).await.unwrap()
        })
    });
    let mut winners = Vec::new();
    for (i, writer) in writers.collect::<Vec<_>>().into_iter().enumerate() {
        if writer.await.unwrap() {
            winners.push(i);
        }
    }
    assert_eq!(winners.len(), 1, "{tag}: winners {winners:?} from {expected:?}");
    winners[0]
}

fn invalid<T: std::fmt::Debug>(result: Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::InvalidValue(_)))
}

fn tag(name: &str) -> Tag {
    Tag::parse(name).unwrap()
}

/// Sets a value on `first`, then reads it through `second`, a store opened anew on the same
/// place.
async fn assert_survives(
    first: Arc<dyn TagMetaStore>,
    second: impl AsyncFnOnce() -> Arc<dyn TagMetaStore>,
) {
    let durable = tag("meta.durable.\u{e9}");
    first.compare_and_set_meta(&durable, "key", None, "kept across opens").await.unwrap();
    drop(first);
    let second = second().await;
    assert_eq!(second.meta(&durable, "key").await, Ok(Some("kept across opens".to_string())));
    let set = second.compare_and_set_meta(&durable, "key", None, "again").await;
    assert_eq!(set, Ok(false));
}

mod memory {
    //! The metadata suite on the memory backend, and `Backend`'s accessor: a single store
    //! and Redis have a metadata store, sets of stores none.

    use std::sync::Arc;

    use idmint_store::{Backend, MemoryStore, StoreUrl};

    use super::MetaSubject;

    async fn fresh() -> Option<MetaSubject> {
        Some(MetaSubject::new(Arc::new(MemoryStore::new())))
    }

    meta_suite!(fresh);

    #[tokio::test]
    async fn sets_of_stores_have_no_metadata_store() {
        let single = Backend::open(&StoreUrl::Memory).await.unwrap();
        assert!(single.tag_meta().is_some());
        let set = StoreUrl::parse("memory:// memory://").unwrap();
        assert!(Backend::open(&set).await.unwrap().tag_meta().is_none());
    }
}

mod sqlite {
    //! The metadata suite on an SQLite file, and values surviving a reopen of the file.

    use std::sync::Arc;

    use idmint_store::{SqliteStore, TagMetaStore};

    use super::{MetaSubject, assert_survives};

    async fn fresh() -> Option<MetaSubject> {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("idmint.db")).await.unwrap();
        Some(MetaSubject::with_guard(Arc::new(store), dir))
    }

    meta_suite!(fresh);

    #[tokio::test]
    async fn values_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idmint.db");
        let first: Arc<dyn TagMetaStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
        assert_survives(first, async || {
            Arc::new(SqliteStore::open(&path).await.unwrap()) as Arc<dyn TagMetaStore>
        })
        .await;
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    //! The metadata suite on MySQL / MariaDB, in this run's database (the test kit's server;
    //! skipped and reported without one), the table's collation, and values surviving a new
    //! connection pool.

    use idmint_store::{Backend, StoreUrl, TAG_META_TABLE};

    use super::{MetaSubject, assert_survives, tag};

    /// The run's database, with a segment table of the suite's own and a pool as wide as the
    /// race.
    async fn url() -> Option<StoreUrl> {
        crate::mysql::suite_url("meta_suite", 8).await
    }

    async fn fresh() -> Option<MetaSubject> {
        let backend = Backend::open(&url().await?).await.unwrap();
        Some(MetaSubject::new(backend.tag_meta().unwrap()))
    }

    meta_suite!(fresh);

    #[tokio::test]
    async fn the_metadata_table_compares_bytes() {
        let Some(url) = url().await else { return };
        let store = Backend::open(&url).await.unwrap().tag_meta().unwrap();
        // A read creates no table; the first write does.
        store.compare_and_set_meta(&tag("meta.mysql-table"), "key", None, "x").await.unwrap();
        crate::mysql::assert_tables_compare_bytes(&[TAG_META_TABLE]).await;
    }

    #[tokio::test]
    async fn values_survive_a_new_pool() {
        let Some(url) = url().await else { return };
        let first = Backend::open(&url).await.unwrap().tag_meta().unwrap();
        assert_survives(first, async || Backend::open(&url).await.unwrap().tag_meta().unwrap())
            .await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    //! The metadata suite on PostgreSQL, in this run's database (the test kit's server;
    //! skipped and reported without one), and values surviving a new connection pool.

    use idmint_store::{Backend, StoreUrl};

    use super::{MetaSubject, assert_survives};

    async fn url() -> Option<StoreUrl> {
        crate::postgres::suite_url("meta_suite", 8).await
    }

    async fn fresh() -> Option<MetaSubject> {
        let backend = Backend::open(&url().await?).await.unwrap();
        Some(MetaSubject::new(backend.tag_meta().unwrap()))
    }

    meta_suite!(fresh);

    #[tokio::test]
    async fn values_survive_a_new_pool() {
        let Some(url) = url().await else { return };
        let first = Backend::open(&url).await.unwrap().tag_meta().unwrap();
        assert_survives(first, async || Backend::open(&url).await.unwrap().tag_meta().unwrap())
            .await;
    }
}

#[cfg(feature = "redis")]
mod redis {
    //! The metadata suite on Redis, each check under its own key prefix, and values surviving
    //! a new connection.

    use idmint_store::{Backend, StoreUrl};

    use super::{MetaSubject, assert_survives};

    async fn fresh() -> Option<MetaSubject> {
        let (url, cleanup) = crate::redis::fresh_url()?;
        let backend = Backend::open(&StoreUrl::Redis(url)).await.unwrap();
        Some(MetaSubject::with_guard(backend.tag_meta().unwrap(), cleanup))
    }

    meta_suite!(fresh);

    #[tokio::test]
    async fn values_survive_a_new_connection() {
        let Some((url, _cleanup)) = crate::redis::fresh_url() else { return };
        let url = StoreUrl::Redis(url);
        let first = Backend::open(&url).await.unwrap().tag_meta().unwrap();
        assert_survives(first, async || Backend::open(&url).await.unwrap().tag_meta().unwrap())
            .await;
    }
}
