//! A Redis whose `INFO` the sequence counters cannot use, on a private server of the test's
//! own: an ACL user without `INFO` (`-@dangerous`, a common hardening). Every counter call
//! is the final `StoreError::Unsupported` naming the fix, never the retryable
//! `Unavailable`, and writes nothing; once `INFO` is allowed the same connection serves.

use idmint_core::Tag;
use idmint_store::redis::{RedisCounters, RedisUrl};
use idmint_store::{CounterKey, CounterStore, StoreError, Take};
use idmint_testkit::servers::{PrivateRedis, installed};

#[tokio::test]
async fn a_redis_that_refuses_info_to_idmint_is_final_and_names_the_fix() {
    if installed::redis().is_none() {
        idmint_testkit::skip(idmint_testkit::skip::NO_REDIS);
        return;
    }
    let redis = PrivateRedis::start().unwrap();
    let user = ["ACL", "SETUSER", "hardened", "on", ">secret", "~*", "&*", "+@all"];
    redis.cli(&[&user[..], &["-@dangerous"]].concat()).unwrap();
    let url = format!("redis://hardened:secret@127.0.0.1:{}", redis.port());
    let url = RedisUrl::parse(&url).unwrap().with_prefix("acl:").unwrap();
    let counters = RedisCounters::connect(&url).await.unwrap();
    let key = CounterKey { name: Tag::parse("orders").unwrap(), period: String::new() };

    let calls = [
        ("take", counters.take(&key, 1, 1).await.map(|_| ())),
        ("seed", counters.seed(&key, 0, 10_000).await),
        ("raise", counters.raise_max(&key, 20_000).await.map(|_| ())),
        ("state", counters.state(&key, 1).await.map(|_| ())),
    ];
    for (call, answer) in calls {
        let Err(StoreError::Unsupported { store, reason }) = &answer else {
            panic!("{call}: {answer:?}, not the final refusal");
        };
        assert!(reason.contains("refuses INFO") && reason.contains("+info"), "{call}: {reason}");
        assert!(reason.contains("Redis server itself"), "{call}: {reason}");
        assert!(!store.contains("secret"), "{store}");
    }
    assert_eq!(redis.cli(&["DBSIZE"]).unwrap().trim(), "0", "a refused script wrote");

    // The fix the message names, on the same connection.
    redis.cli(&["ACL", "SETUSER", "hardened", "+info"]).unwrap();
    assert_eq!(counters.take(&key, 1, 1).await.unwrap(), Take::NeedsSeed);
    counters.seed(&key, 0, 10_000).await.unwrap();
    assert_eq!(counters.take(&key, 1, 1).await.unwrap(), Take::Taken { last: 1 });
}
