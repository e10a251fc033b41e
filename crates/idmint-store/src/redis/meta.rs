//! [`RedisStore`]'s [`TagMetaStore`]: one hash per tag, `meta:{TAG}` after the URL's prefix
//! (the braces make the tag a Redis Cluster hash tag, as for `tag:{TAG}`), a field per name.
//!
//! A compare-and-set is one server-side script on the tag's hash (read the field, compare,
//! `HSET`), so racing calls run one after the other and the second sees the first's value.
//! The tags holding a value of a name are indexed in a set, `meta-index:NAME`, written before
//! the value. Keys and fields are binary-safe: names and values compare byte for byte.

use std::sync::LazyLock;

use async_trait::async_trait;
use idmint_core::Tag;
use redis::Script;

use super::{RedisStore, hash_tag, script};
use crate::meta::{check_cas, check_name, stored_values};
use crate::{StoreError, TagMetaStore};

#[async_trait]
impl TagMetaStore for RedisStore {
    async fn meta(&self, tag: &Tag, name: &str) -> Result<Option<String>, StoreError> {
        check_name(name)?;
        redis::cmd("HGET")
            .arg(self.meta_key(tag))
            .arg(name)
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(&e))
    }

    async fn compare_and_set_meta(
        &self,
        tag: &Tag,
        name: &str,
        expected: Option<&str>,
        new: &str,
    ) -> Result<bool, StoreError> {
        check_cas(name, expected, new)?;
        // Indexed before the value is set (a Cluster script cannot reach a key of another
        // slot): an index entry without its value is skipped when read, a value is never
        // without its entry.
        redis::cmd("SADD")
            .arg(self.meta_index_key(name))
            .arg(tag.as_str())
            .query_async::<()>(&mut self.conn())
            .await
            .map_err(|e| self.fail(&e))?;
        let (present, expected) = match expected {
            Some(value) => ("1", value),
            None => ("0", ""),
        };
        let mut invocation = COMPARE_AND_SET.key(self.meta_key(tag));
        invocation.arg(name).arg(present).arg(expected).arg(new);
        let set: i64 = self.run(&invocation).await?;
        Ok(set == 1)
    }

    async fn meta_of_every_tag(&self, name: &str) -> Result<Vec<(Tag, String)>, StoreError> {
        check_name(name)?;
        let tags: Vec<String> = redis::cmd("SMEMBERS")
            .arg(self.meta_index_key(name))
            .query_async(&mut self.conn())
            .await
            .map_err(|e| self.fail(&e))?;
        let mut rows = Vec::with_capacity(tags.len());
        for tag in tags {
            let key = self.conn().key(&format!("meta:{}", hash_tag(&tag)));
            let value: Option<String> = redis::cmd("HGET")
                .arg(key)
                .arg(name)
                .query_async(&mut self.conn())
                .await
                .map_err(|e| self.fail(&e))?;
            rows.extend(value.map(|value| (tag, value)));
        }
        stored_values(rows)
    }
}

impl RedisStore {
    /// The hash of `tag`'s metadata.
    fn meta_key(&self, tag: &Tag) -> String {
        self.conn().key(&format!("meta:{}", hash_tag(tag.as_str())))
    }

    /// The set of the tags that hold a value of `name` (or once held one), so every tag's
    /// value can be read without scanning the key space.
    fn meta_index_key(&self, name: &str) -> String {
        self.conn().key(&format!("meta-index:{name}"))
    }
}

/// KEYS: the tag's metadata hash. ARGV: the name, `1` when a value is expected (`0`: none),
/// the expected value, the new one. Returns 1 (set) or 0 (the field holds another value).
static COMPARE_AND_SET: LazyLock<Script> = LazyLock::new(|| {
    script(
        r"
        local current = redis.call('HGET', KEYS[1], ARGV[1])
        if ARGV[2] == '0' then
            if current then return 0 end
        elseif current ~= ARGV[3] then
            return 0
        end
        redis.call('HSET', KEYS[1], ARGV[1], ARGV[4])
        return 1
        ",
    )
});
