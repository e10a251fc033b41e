//! The Redis backend against the server the test kit gives (`IDMINT_TEST_REDIS_URL`'s, else a
//! private `redis-server`; skipped when neither is there): the conformance and worker
//! suites, and what only this backend can show: the key layout, rows it cannot serve, the
//! bound on tags kept by the name set.
//!
//! The server is shared: every check writes under a key prefix of its own
//! (`idmint_t{unix seconds}_{pid}_{n}:`) and deletes its keys when it ends (SCAN MATCH + DEL),
//! even when it fails. Nothing else on the server is touched: no FLUSH, no CONFIG.
//!
//! When `redis-server` is installed, the suites also run through a Redis Sentinel and a Redis
//! Cluster of the tests' own (`redis/servers.rs`: private `redis-server` processes on free
//! ports, killed with the test binary), and a sentinel failover is played out.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ::redis as driver;
use idmint_core::limits::TAG_COUNT_MAX;
use idmint_store::redis::{RedisConn, RedisStore, RedisUrl};
use idmint_store::{LeaseStore, RangeStore, SegmentStore, StoreError, StoreUrl};

use crate::conformance::{Subject, conformance_suite, range, spec, tag};

mod failback;
mod keys;
mod servers;
mod unsupported;

pub(crate) use keys::{fresh_prefix, fresh_url};

conformance_suite!(fresh);

async fn fresh() -> Option<Subject> {
    let (url, cleanup) = fresh_url()?;
    let store = idmint_store::open(&StoreUrl::Redis(url)).await.unwrap();
    Some(Subject::with_guard(store, cleanup))
}

pub(crate) mod workers {
    //! The worker suite on Redis, each check under its own key prefix.

    use std::any::Any;
    use std::sync::Arc;

    use ::redis as driver;
    use idmint_store::redis::RedisUrl;
    use idmint_store::{StoreUrl, WorkerSpace, open_workers};

    use crate::workers::{RowTamper, WorkerSubject, worker_suite};

    async fn fresh() -> Option<WorkerSubject> {
        let (url, cleanup) = super::fresh_url()?;
        let store = open_workers(&StoreUrl::Redis(url)).await.unwrap();
        Some(WorkerSubject::with_guard(store, cleanup))
    }

    async fn tampered() -> Option<(WorkerSubject, Arc<dyn RowTamper>)> {
        let (url, cleanup) = super::fresh_url()?;
        let store = open_workers(&StoreUrl::Redis(url.clone())).await.unwrap();
        Some((WorkerSubject::with_guard(store, cleanup), Arc::new(Rows(url))))
    }

    /// The check's lease hash, through a connection of its own (Sentinel's and Cluster's
    /// too).
    pub(crate) struct Rows(pub(crate) RedisUrl);

    impl Rows {
        async fn key(&self, space: &WorkerSpace) -> (idmint_store::redis::RedisConn, String) {
            let raw = self.0.connect().await.unwrap();
            let key = raw.key(&format!("workers:{{{space}}}"));
            (raw, key)
        }
    }

    #[async_trait::async_trait]
    impl RowTamper for Rows {
        async fn age_rows(&self, space: &WorkerSpace, ms: u64) {
            // `TOKEN EXPIRES_MS REST`: the expiry moved back, the rest kept.
            let (mut raw, key) = self.key(space).await;
            let rows: Vec<(String, String)> =
                super::query(driver::cmd("HGETALL").arg(&key), &mut raw).await;
            for (field, value) in rows {
                let mut parts = value.splitn(3, ' ');
                let (token, expires, rest) =
                    (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
                let expires = expires.parse::<u64>().unwrap() - ms;
                let aged = format!("{token} {expires} {rest}");
                let _: i64 =
                    super::query(driver::cmd("HSET").arg(&key).arg(field).arg(aged), &mut raw)
                        .await;
            }
        }
        async fn delete_rows(&self, space: &WorkerSpace) {
            let (mut raw, key) = self.key(space).await;
            let _: i64 = super::query(driver::cmd("DEL").arg(&key), &mut raw).await;
        }
        async fn snapshot_rows(&self, space: &WorkerSpace) -> Box<dyn Any + Send + Sync> {
            let (mut raw, key) = self.key(space).await;
            let rows: Vec<(String, String)> =
                super::query(driver::cmd("HGETALL").arg(&key), &mut raw).await;
            Box::new(rows)
        }
        async fn restore_rows(&self, space: &WorkerSpace, snapshot: &(dyn Any + Send + Sync)) {
            self.delete_rows(space).await;
            let (mut raw, key) = self.key(space).await;
            for (field, value) in snapshot.downcast_ref::<Vec<(String, String)>>().unwrap() {
                let _: i64 =
                    super::query(driver::cmd("HSET").arg(&key).arg(field).arg(value), &mut raw)
                        .await;
            }
        }
    }

    worker_suite!(fresh, tampered);
}

#[tokio::test]
async fn a_tag_is_one_hash_and_a_name_in_the_set() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store = RedisStore::connect(&url).await.unwrap();
    let orders = store.create_tag(&spec("orders", 5, 10, "for orders")).await.unwrap().tag;
    assert_eq!(store.allocate(&orders, None).await.unwrap().range, range(5, 15));
    let mut raw = url.connect().await.unwrap();
    let key = raw.key("tag:{orders}");
    let mut row: Vec<(String, String)> = query(driver::cmd("HGETALL").arg(&key), &mut raw).await;
    row.sort();
    let update_time_ms: u64 =
        row.iter().find(|(f, _)| f == "update_time").unwrap().1.parse().unwrap();
    let now_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
    assert!(now_ms.abs_diff(update_time_ms) < 60_000, "update_time {update_time_ms} is not ms");
    let fields: Vec<_> = row.iter().map(|(f, v)| (f.as_str(), v.as_str())).collect();
    assert_eq!(
        fields,
        [
            ("description", "for orders"),
            ("max_id", "15"),
            ("step", "10"),
            ("update_time", update_time_ms.to_string().as_str())
        ]
    );
    let names: Vec<String> = query(driver::cmd("SMEMBERS").arg(raw.key("tags")), &mut raw).await;
    assert_eq!(names, ["orders"]);
    assert_eq!(store.describe(), url.to_string());
    store.delete_tag(&orders).await.unwrap();
    let exists: i64 = query(driver::cmd("EXISTS").arg(&key).arg(raw.key("tags")), &mut raw).await;
    assert_eq!(exists, 0, "delete left keys behind");
}

#[tokio::test]
async fn rows_idmint_cannot_serve_are_refused_and_left_unchanged() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store = RedisStore::connect(&url).await.unwrap();
    let mut raw = url.connect().await.unwrap();
    let rows = [
        ("zero-step", "7", Some("0")),
        ("negative", "-100", Some("10")),
        ("text", "12abc", Some("10")),
        ("leading-zero", "007", Some("10")),
        ("no-step", "5", None),
        ("past-i64", "9223372036854775808", Some("1")),
    ];
    for (name, max_id, step) in rows {
        let mut hset = driver::cmd("HSET");
        hset.arg(raw.key(&format!("tag:{{{name}}}"))).arg("max_id").arg(max_id);
        if let Some(step) = step {
            hset.arg("step").arg(step);
        }
        let _: i64 = query(&hset, &mut raw).await;
    }
    store.create_tag(&spec("valid", 1, 10, "")).await.unwrap();
    let names =
        ["zero-step", "negative", "text", "leading-zero", "no-step", "past-i64", "bad name"];
    let _: i64 = query(driver::cmd("SADD").arg(raw.key("tags")).arg(&names), &mut raw).await;

    for (name, max_id, _) in rows {
        let refused = store.allocate(&tag(name), None).await;
        assert!(matches!(refused, Err(StoreError::Corrupt { .. })), "{name}: {refused:?}");
        let key = raw.key(&format!("tag:{{{name}}}"));
        let kept: String = query(driver::cmd("HGET").arg(&key).arg("max_id"), &mut raw).await;
        assert_eq!(kept, max_id, "{name} was changed");
    }
    let listed: Vec<String> =
        store.list_tags().await.unwrap().iter().map(|r| r.tag.to_string()).collect();
    assert_eq!(listed, ["valid", "zero-step"], "rows that cannot be read are skipped");
}

#[tokio::test]
async fn the_name_set_bounds_the_tags() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store = RedisStore::connect(&url).await.unwrap();
    let kept = store.create_tag(&spec("kept", 1, 1, "")).await.unwrap().tag;
    // Names without hashes (as an interrupted create leaves them) fill the set.
    let mut raw = url.connect().await.unwrap();
    let fillers: Vec<String> = (1..TAG_COUNT_MAX).map(|i| format!("filler-{i}")).collect();
    let _: i64 = query(driver::cmd("SADD").arg(raw.key("tags")).arg(&fillers), &mut raw).await;

    let again = store.create_tag(&spec("kept", 1, 1, "")).await;
    assert_eq!(again, Err(StoreError::TagExists(kept.clone())));
    let refused = store.create_tag(&spec("one-too-many", 1, 1, "")).await;
    assert_eq!(refused, Err(StoreError::TooManyTags));
    assert_eq!(store.get_tag(&tag("one-too-many")).await, Ok(None));
    assert_eq!(store.get_tag(&tag("filler-1")).await, Ok(None));
    store.delete_tag(&kept).await.unwrap();
    store.create_tag(&spec("one-too-many", 1, 1, "")).await.unwrap();
    let listed: Vec<String> =
        store.list_tags().await.unwrap().iter().map(|r| r.tag.to_string()).collect();
    assert_eq!(listed, ["one-too-many"]);
    // Deleting a name without a hash removes the name, and says the tag was not there.
    let filler = tag("filler-1");
    assert_eq!(store.delete_tag(&filler).await, Err(StoreError::TagNotFound(filler)));
    store.create_tag(&spec("fits-again", 1, 1, "")).await.unwrap();
}

#[tokio::test]
async fn a_lease_is_one_field_of_its_space_hash() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store = RedisStore::connect(&url).await.unwrap();
    let space = idmint_store::WorkerSpace::parse("layout-a").unwrap();
    let request = idmint_store::LeaseRequest {
        space: space.clone(),
        min_worker: 0,
        max_worker: 3,
        holder: "host:80/1 x".to_string(),
        ttl_ms: 500,
        margin_ms: 0,
        mark_max: 1_000,
    };
    let before = store.now_ms().await.unwrap();
    let lease = store.acquire_lease(&request).await.unwrap();
    let after = store.now_ms().await.unwrap();
    // The expiry is the server's clock (TIME) plus the TTL.
    assert!((before + 500..=after + 500).contains(&lease.expires_ms), "{lease:?}");
    store.raise_mark(&lease, 1_200).await.unwrap();
    let mut raw = url.connect().await.unwrap();
    let value: String =
        query(driver::cmd("HGET").arg(raw.key("workers:{layout-a}")).arg("0"), &mut raw).await;
    // The token is the server's clock in microseconds.
    assert!((before * 1_000..(after + 1) * 1_000).contains(&lease.token), "{lease:?}");
    let (token, expires_ms, holder_id) = (lease.token, lease.expires_ms, lease.holder_id);
    let expected = format!("{token} {expires_ms} 1200 {holder_id:032x} host:80/1 x");
    assert_eq!(value, expected);
    // A second connection (another node) sees the same lease.
    let other = RedisStore::connect(&url).await.unwrap();
    let listed = other.list_leases(&space).await.unwrap();
    assert_eq!((listed.len(), listed[0].holder.as_str()), (1, "host:80/1 x"));
}

/// A lease value an earlier idmint wrote (no holder id) is listed, proves no lease, and is
/// taken over once expired, gaining a holder id.
#[tokio::test]
async fn a_lease_value_without_a_holder_id_proves_nothing_and_is_taken_over() {
    let Some((url, _cleanup)) = fresh_url() else { return };
    let store = RedisStore::connect(&url).await.unwrap();
    let space = idmint_store::WorkerSpace::parse("layout-old").unwrap();
    let mut raw = url.connect().await.unwrap();
    let key = raw.key("workers:{layout-old}");
    let _: i64 =
        query(driver::cmd("HSET").arg(&key).arg("0").arg("4 1500 1200 old host"), &mut raw).await;
    let listed = store.list_leases(&space).await.unwrap();
    assert_eq!((listed[0].token, listed[0].holder.as_str()), (4, "old host"));
    let request = idmint_store::LeaseRequest {
        space: space.clone(),
        min_worker: 0,
        max_worker: 0,
        holder: "new".to_string(),
        ttl_ms: 500,
        margin_ms: 0,
        mark_max: 2_000,
    };
    // Expired at 1 500 ms past the epoch, long before the server's clock.
    let lease = store.acquire_lease(&request).await.unwrap();
    assert_eq!((lease.worker_id, lease.mark), (0, 1_200));
    assert!(lease.token > 1_700_000_000_000_000, "a token not from the server's clock: {lease:?}");
    let value: String = query(driver::cmd("HGET").arg(&key).arg("0"), &mut raw).await;
    let stored = format!("{} {} 1200 {:032x} new", lease.token, lease.expires_ms, lease.holder_id);
    assert_eq!(value, stored);
    store.renew_lease(&lease, 500).await.unwrap();
}

#[test]
fn redis_urls_parse_as_store_urls_without_showing_a_password() {
    let parsed = StoreUrl::parse("redis://:s3cret@127.0.0.1:6379/2?prefix=ids:").unwrap();
    let StoreUrl::Redis(url) = &parsed else { panic!("not a Redis URL: {parsed:?}") };
    assert_eq!(url.prefix(), "ids:");
    let shown = format!("{parsed} {parsed:?}");
    assert!(!shown.contains("s3cret") && shown.contains("***"), "{shown}");
    let err = StoreUrl::parse("redis://:s3cret@h?prefix=no space").unwrap_err().to_string();
    assert!(err.contains("not a key prefix") && !err.contains("s3cret"), "{err}");
}

mod sentinel {
    //! The suites through a sentinel (one master, no replica, shared by the checks), and a
    //! failover under a running store (a deployment of its own).

    use std::sync::OnceLock;

    use idmint_store::redis::RedisStore;
    use idmint_store::{RangeStore, SegmentStore, StoreError, StoreUrl};

    use super::servers::SentinelSet;
    use super::{Duration, Instant, RedisUrl, driver, fresh_prefix, query, range, spec};
    use crate::conformance::{Subject, conformance_suite};

    /// The shared deployment, started by the first check that needs it; `None` when Redis
    /// checks are not asked for.
    fn deployment() -> Option<&'static SentinelSet> {
        static SET: OnceLock<Result<SentinelSet, String>> = OnceLock::new();
        super::private_servers_run()?;
        Some(SET.get_or_init(|| SentinelSet::start(0)).as_ref().unwrap())
    }

    async fn fresh() -> Option<Subject> {
        let url = StoreUrl::parse(&deployment()?.url(&fresh_prefix())).unwrap();
        Some(Subject::new(idmint_store::open(&url).await.unwrap()))
    }

    conformance_suite!(fresh);

    mod workers {
        use std::sync::Arc;

        use idmint_store::{StoreUrl, open_workers};

        use crate::workers::{RowTamper, WorkerSubject, worker_suite};

        async fn fresh() -> Option<WorkerSubject> {
            let url = super::deployment()?.url(&super::fresh_prefix());
            let store = open_workers(&StoreUrl::parse(&url).unwrap()).await.unwrap();
            Some(WorkerSubject::new(store))
        }

        async fn tampered() -> Option<(WorkerSubject, Arc<dyn RowTamper>)> {
            let url = super::deployment()?.url(&super::fresh_prefix());
            let StoreUrl::Redis(url) = StoreUrl::parse(&url).unwrap() else {
                panic!("not a Redis URL: {url}")
            };
            let store = open_workers(&StoreUrl::Redis(url.clone())).await.unwrap();
            Some((WorkerSubject::new(store), Arc::new(crate::redis::workers::Rows(url))))
        }

        worker_suite!(fresh, tampered);
    }

    /// The master dies after its writes reached the replica: calls fail until the sentinel
    /// promotes the replica, then the same store allocates from it, continuing the tag.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_store_follows_a_failover() {
        if super::private_servers_run().is_none() {
            return;
        }
        let mut set = SentinelSet::start(1).unwrap();
        let url = RedisUrl::parse(&set.url("failover:")).unwrap();
        let store = RedisStore::connect(&url).await.unwrap();
        let moved = store.create_tag(&spec("moved", 1, 100, "")).await.unwrap().tag;
        for _ in 0..3 {
            store.allocate(&moved, None).await.unwrap();
        }
        let mut raw = url.connect().await.unwrap();
        let old_run_id = raw.run_id().await.unwrap();
        let acked: i64 = query(driver::cmd("WAIT").arg(1).arg(5_000), &mut raw).await;
        assert_eq!(acked, 1, "the replica did not acknowledge the writes");

        set.nodes[0].kill();
        let started = Instant::now();
        let allocation = loop {
            match store.allocate(&moved, None).await {
                Ok(allocation) => break allocation,
                Err(StoreError::Unavailable(_)) if started.elapsed() < Duration::from_secs(30) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("the store did not follow the failover: {e}"),
            }
        };
        assert_eq!(allocation.range, range(301, 401), "the tag did not continue");
        assert_eq!(set.master_port(), Some(set.nodes[1].port));
        // The raw connection's first call meets the dead master; the next asks again.
        let _ = raw.run_id().await;
        assert_ne!(raw.run_id().await.unwrap(), old_run_id);
    }
}

mod cluster {
    //! The suites through a Redis Cluster of three masters shared by the checks, and what a
    //! cluster shows: tags land on different nodes and are still listed together.

    use std::sync::OnceLock;

    use idmint_store::redis::RedisStore;
    use idmint_store::{RangeStore, SegmentStore, StoreUrl};

    use super::servers::Cluster;
    use super::{RedisUrl, driver, fresh_prefix, spec};
    use crate::conformance::{Subject, conformance_suite};

    fn deployment() -> Option<&'static Cluster> {
        static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
        super::private_servers_run()?;
        Some(CLUSTER.get_or_init(Cluster::start).as_ref().unwrap())
    }

    async fn fresh() -> Option<Subject> {
        let url = StoreUrl::parse(&deployment()?.url(&fresh_prefix())).unwrap();
        Some(Subject::new(idmint_store::open(&url).await.unwrap()))
    }

    conformance_suite!(fresh);

    mod workers {
        use std::sync::Arc;

        use idmint_store::{StoreUrl, open_workers};

        use crate::workers::{RowTamper, WorkerSubject, worker_suite};

        async fn fresh() -> Option<WorkerSubject> {
            let url = super::deployment()?.url(&super::fresh_prefix());
            let store = open_workers(&StoreUrl::parse(&url).unwrap()).await.unwrap();
            Some(WorkerSubject::new(store))
        }

        async fn tampered() -> Option<(WorkerSubject, Arc<dyn RowTamper>)> {
            let url = super::deployment()?.url(&super::fresh_prefix());
            let StoreUrl::Redis(url) = StoreUrl::parse(&url).unwrap() else {
                panic!("not a Redis URL: {url}")
            };
            let store = open_workers(&StoreUrl::Redis(url.clone())).await.unwrap();
            Some((WorkerSubject::new(store), Arc::new(crate::redis::workers::Rows(url))))
        }

        worker_suite!(fresh, tampered);
    }

    /// Sequence counters on the cluster's primaries: every script reads the identity of the
    /// node it runs on (`run_id`, `master_replid`), so counters of names on different nodes
    /// are seeded, trusted from take to take and reported as current.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counters_are_trusted_from_take_to_take_on_every_node() {
        use idmint_store::redis::RedisCounters;
        use idmint_store::{CounterKey, CounterStore, Take};

        let Some(cluster) = deployment() else { return };
        let url = RedisUrl::parse(&cluster.url(&fresh_prefix())).unwrap();
        let counters = RedisCounters::connect(&url).await.unwrap();
        for i in 0..12 {
            let name = idmint_core::Tag::parse(&format!("seq-{i}")).unwrap();
            let key = CounterKey { name, period: String::new() };
            assert_eq!(counters.take(&key, 1, 1).await.unwrap(), Take::NeedsSeed);
            counters.seed(&key, 0, 100).await.unwrap();
            assert_eq!(counters.take(&key, 5, 1).await.unwrap(), Take::Taken { last: 5 });
            assert_eq!(counters.take(&key, 5, 1).await.unwrap(), Take::Taken { last: 10 });
            assert!(counters.state(&key, 1).await.unwrap().unwrap().current_run);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tags_spread_over_the_nodes_and_list_together() {
        let Some(cluster) = deployment() else { return };
        let prefix = fresh_prefix();
        let url = RedisUrl::parse(&cluster.url(&prefix)).unwrap();
        let store = RedisStore::connect(&url).await.unwrap();
        let names: Vec<String> = (0..30).map(|i| format!("spread-{i:02}")).collect();
        for name in &names {
            store.create_tag(&spec(name, 1, 10, "")).await.unwrap();
        }
        for node in &cluster.nodes {
            let mut conn = node.connect().unwrap();
            let keys: Vec<String> =
                driver::cmd("KEYS").arg(format!("{prefix}tag:*")).query(&mut conn).unwrap();
            assert!(!keys.is_empty(), "node {} holds none of the 30 tags", node.port);
        }
        let listed: Vec<String> =
            store.list_tags().await.unwrap().iter().map(|r| r.tag.to_string()).collect();
        assert_eq!(listed, names);
    }
}

async fn query<T: driver::FromRedisValue>(cmd: &driver::Cmd, conn: &mut RedisConn) -> T {
    cmd.query_async(conn).await.unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
}

/// `Some` when `redis-server` is installed, so the Sentinel and Cluster deployments of the
/// checks' own can start; `None` after recording the skip.
fn private_servers_run() -> Option<()> {
    if idmint_testkit::servers::installed::redis().is_none() {
        idmint_testkit::skip(idmint_testkit::skip::NO_REDIS);
        return None;
    }
    Some(())
}
