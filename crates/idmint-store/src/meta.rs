//! Per-tag metadata: the [`TagMetaStore`] trait, small text values idmint keeps about a tag
//! (the first is the fingerprint of a keyed public id format's key, the key guard), in a
//! table of idmint's own beside the segment table, never as rows of the segment table.
//!
//! Table [`TAG_META_TABLE`] (created when first used, as `create_tables=` allows; never
//! altered): one row per `(tag, name)` holding `value`. Names and tags compare byte for byte
//! (MySQL `utf8mb4_bin`; PostgreSQL and SQLite compare text exactly), and so do values when
//! compared by [`TagMetaStore::compare_and_set_meta`]. Redis keeps one hash per tag,
//! `meta:{TAG}` after the URL's prefix. Sets of databases (Flicker, interleaved) and a client's
//! remote store have none: a value must live in one place.
//!
//! Inputs are checked before any store is asked ([`check_name`], [`check_value`]), so a
//! refused call writes nothing.

use async_trait::async_trait;
use idmint_core::Tag;

use crate::StoreError;

/// The metadata table.
pub const TAG_META_TABLE: &str = "idmint_tag_meta";
/// The metadata name of a tag's policy: how every node serves the tag.
pub const POLICY_NAME: &str = "policy";
/// The policy of a tag with a public id format.
pub const POLICY_FORMATTED: &str = "formatted";
/// The policy of a strict tag (its ids increase in real time across the cluster).
pub const POLICY_STRICT: &str = "strict";
/// The policy of a tag served as it is, recorded where another was (a strict tag deleted, or
/// a strict tag's creation that lost a race to a plain tag of its name).
pub const POLICY_PLAIN: &str = "plain";
/// Longest metadata name, in bytes.
pub const META_NAME_LEN_MAX: usize = 64;
/// Longest metadata value, in bytes.
pub const META_VALUE_LEN_MAX: usize = 512;

/// Where idmint keeps small values about a tag, each under a name, changed only by
/// compare-and-set so nodes that write at once never overwrite one another unseen.
#[async_trait]
pub trait TagMetaStore: Send + Sync + 'static {
    /// The value of `name` for `tag`, if one was set. Refuses a bad name
    /// ([`StoreError::InvalidValue`]).
    async fn meta(&self, tag: &Tag, name: &str) -> Result<Option<String>, StoreError>;

    /// Sets `name` of `tag` to `new` if it now holds `expected` (`None`: no value), in one
    /// atomic step, and says whether it did: `false` when the value is another (it changed
    /// meanwhile), leaving it as it is. Of calls racing from one `expected`, at most one
    /// returns `true`. Refuses a bad name or value ([`StoreError::InvalidValue`]), writing
    /// nothing.
    async fn compare_and_set_meta(
        &self,
        tag: &Tag,
        name: &str,
        expected: Option<&str>,
        new: &str,
    ) -> Result<bool, StoreError>;

    /// Every tag's value of `name`, in no particular order: how a node reads one setting of
    /// all tags at start. Refuses a bad name ([`StoreError::InvalidValue`]).
    async fn meta_of_every_tag(&self, name: &str) -> Result<Vec<(Tag, String)>, StoreError>;
}

/// Rows `(tag, value)` as a store read them, as tags: a tag no name rule admits is a
/// corrupt row, refused rather than skipped (a setting read for every tag must not lose one).
#[cfg_attr(
    not(any(feature = "sqlite", feature = "mysql", feature = "postgres", feature = "redis")),
    allow(dead_code)
)]
pub(crate) fn stored_values(
    rows: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<(Tag, String)>, StoreError> {
    rows.into_iter()
        .map(|(tag, value)| match Tag::from_stored(&tag) {
            Ok(parsed) => Ok((parsed, value)),
            Err(e) => {
                Err(StoreError::Corrupt { tag, reason: format!("its metadata names it: {e}") })
            }
        })
        .collect()
}

/// Refuses a name other than 1 to [`META_NAME_LEN_MAX`] bytes of `[A-Za-z0-9_.-]`: names are
/// idmint's own words, and so safe in any store's key or column.
pub(crate) fn check_name(name: &str) -> Result<(), StoreError> {
    let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
    if name.is_empty() || name.len() > META_NAME_LEN_MAX || !name.bytes().all(allowed) {
        return Err(StoreError::InvalidValue(format!(
            "metadata name {name:?}: use 1 to {META_NAME_LEN_MAX} bytes of letters, digits, \
             '_', '.' or '-'"
        )));
    }
    Ok(())
}

/// Refuses a value longer than [`META_VALUE_LEN_MAX`] bytes or holding a control character
/// (PostgreSQL text cannot hold NUL, and a value is shown in messages).
pub(crate) fn check_value(value: &str) -> Result<(), StoreError> {
    if value.len() > META_VALUE_LEN_MAX || value.chars().any(char::is_control) {
        return Err(StoreError::InvalidValue(format!(
            "a metadata value of {} bytes{}: use at most {META_VALUE_LEN_MAX} bytes without \
             control characters",
            value.len(),
            if value.chars().any(char::is_control) { " with a control character" } else { "" }
        )));
    }
    Ok(())
}

/// Checks every input of a compare-and-set.
pub(crate) fn check_cas(name: &str, expected: Option<&str>, new: &str) -> Result<(), StoreError> {
    check_name(name)?;
    if let Some(expected) = expected {
        check_value(expected)?;
    }
    check_value(new)
}
