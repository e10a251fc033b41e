//! [`RedisStore`]'s [`TagMetaStore`]: one hash per tag, `meta:{TAG}` after the URL's prefix
//! (the braces make the tag a Redis Cluster hash tag, as for `tag:{TAG}`), a field per name.
//!
//! A compare-and-set is one server-side script on the tag's hash (read the field, compare,
//! `HSET`), so racing calls run one after the other and the second sees the first's value.
//! Keys and fields are binary-safe: names and values compare byte for byte.

use std::sync::LazyLock;

use async_trait::async_trait;
use idmint_core::Tag;
use redis::Script;

use super::{RedisStore, hash_tag, script};
use crate::meta::{check_cas, check_name};
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
        let (present, expected) = match expected {
            Some(value) => ("1", value),
            None => ("0", ""),
        };
        let mut invocation = COMPARE_AND_SET.key(self.meta_key(tag));
        invocation.arg(name).arg(present).arg(expected).arg(new);
        let set: i64 = self.run(&invocation).await?;
        Ok(set == 1)
    }
}

impl RedisStore {
    /// The hash of `tag`'s metadata.
    fn meta_key(&self, tag: &Tag) -> String {
        self.conn().key(&format!("meta:{}", hash_tag(tag.as_str())))
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
