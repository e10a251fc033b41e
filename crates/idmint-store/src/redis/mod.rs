//! Redis (feature `redis`): where a Redis server is ([`RedisUrl`]), one clonable async
//! connection to it ([`RedisConn`]), and the server's `run_id`, which changes whenever the
//! server restarts or another server takes over, so callers can tell that what Redis held
//! may be gone. (The counters' scripts also compare `master_replid`, which a fail-back to an
//! older copy changes while `run_id` stays: `counter.rs`.) [`RedisStore`] keeps segments (`segments.rs`), worker ids (`workers.rs`) and tag metadata (`meta.rs`)
//! there; [`RedisCounters`] the counters behind sequences (`counter.rs`).
//!
//! URLs, each with idmint's own option `prefix` (default [`REDIS_PREFIX_DEFAULT`]), which
//! starts every key idmint writes so one Redis can serve several deployments and test runs:
//! - `redis://[USER:PASSWORD@]HOST[:PORT][/DB][?prefix=P]`: one server, through redis-rs's
//!   reconnecting connection manager.
//! - `redis+sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTER[/DB][?prefix=P]`:
//!   the sentinels (port 26379 when omitted) name the master; the password and DB are the
//!   master's (the sentinels are asked without one). A connection error or a `READONLY`
//!   reply drops the master connection, and the next call asks the sentinels again, so the
//!   connection follows a failover. The failed call is not repeated.
//! - `redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT…][?prefix=P]`: a Redis
//!   Cluster discovered from these nodes (port 6379 when omitted), through redis-rs's
//!   cluster connection, which follows slot moves and failovers by itself.
//!
//! Durability: Redis acknowledges a write before it is on disk unless it runs with
//! `appendonly yes` and `appendfsync always`, and a Sentinel or Cluster failover promotes a
//! replica that may lack the master's latest writes. Either way a crash can bring back a
//! `max_id` below ranges already handed out. idmint's segment engine catches that: its
//! store-regression guard (the `idmint` crate) refuses a range below the highest id a node
//! reserved and moves `max_id` past it, and with a state directory the marks survive
//! restarts. Ranges reserved by another node since its last refill stay at risk: run Redis
//! with durable writes when that matters. The cluster connection may also resend a command
//! after a dropped connection; every script here is safe to run twice (an allocation then
//! skips a range, it never repeats one).
//!
//! Displaying a URL never shows a password.

mod counter;
mod meta;
mod segments;
mod sentinel;
mod workers;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;

use crate::StoreError;

/// The redis-rs crate this module is built on, for callers that send their own commands on a
/// [`RedisConn`] (the version must be the one it implements `ConnectionLike` of).
pub use ::redis as driver;
pub use segments::RedisStore;

pub use counter::{DAILY_COUNTER_TTL_S, RedisCounters};

/// Key prefix when the URL names none.
pub const REDIS_PREFIX_DEFAULT: &str = "idmint:";
/// Longest key prefix accepted.
pub const REDIS_PREFIX_LEN_MAX: usize = 64;
/// Bound on connecting and on each command, in ms: a Redis that does not answer is an
/// error, not a hang.
pub const REDIS_CALL_TIMEOUT_MS: u64 = 2_000;
/// Most sentinels or cluster nodes one URL may name.
pub const REDIS_NODES_MAX: usize = 16;
/// Times the cluster connection retries a command (after a slot move, a failover, a
/// dropped connection) within [`REDIS_CALL_TIMEOUT_MS`].
pub const REDIS_CLUSTER_RETRIES: u32 = 3;
/// Port of a sentinel named without one.
const SENTINEL_PORT_DEFAULT: u16 = 26379;
/// Port of a server or cluster node named without one.
const REDIS_PORT_DEFAULT: u16 = 6379;

const ACCEPTED: &str = "a Redis URL looks like redis://[USER:PASSWORD@]HOST[:PORT][/DB], \
                        redis+sentinel://[PASSWORD@]HOST:PORT[,HOST:PORT…]/MASTER[/DB] or \
                        redis+cluster://[PASSWORD@]HOST:PORT[,HOST:PORT…], each with an \
                        optional ?prefix=P (rediss:// TLS is not part of this build)";

/// Where a Redis server is, and the prefix of idmint's keys there.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl {
    target: Target,
    /// Every key idmint writes starts with it.
    prefix: String,
}

/// The servers a [`RedisUrl`] names.
#[derive(Clone, PartialEq, Eq)]
enum Target {
    /// One server: the URL handed to the driver (`redis://…`, without idmint's options).
    Server(String),
    /// Sentinels (`host:port`) that name the master `master`.
    Sentinel { sentinels: Vec<String>, master: String, auth: Auth, db: i64 },
    /// Nodes (`host:port`) to discover a cluster from.
    Cluster { nodes: Vec<String>, auth: Auth },
}

/// Credentials for the data nodes of a sentinel or cluster URL.
#[derive(Clone, PartialEq, Eq, Default)]
struct Auth {
    user: Option<String>,
    password: Option<String>,
}

impl RedisUrl {
    /// Parses `redis://…`, `redis+sentinel://…` or `redis+cluster://…`; refuses other
    /// schemes, bad node lists and bad prefixes with the fix.
    pub fn parse(url: &str) -> Result<RedisUrl, StoreError> {
        let url = url.trim();
        let bad = |reason: String| StoreError::BadUrl { url: redact(url), reason };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(bad(ACCEPTED.to_string()));
        };
        let (location, query) = rest.split_once('?').unwrap_or((rest, ""));
        if location.is_empty() {
            return Err(bad(format!("no host; {ACCEPTED}")));
        }
        let mut prefix = REDIS_PREFIX_DEFAULT.to_string();
        let mut passed = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("prefix", value)) => prefix = redis_prefix(value).map_err(&bad)?,
                _ => passed.push(pair),
            }
        }
        if scheme != "redis" && !passed.is_empty() {
            return Err(bad(format!(
                "{} is not an option of {scheme}://; only prefix=P is",
                passed.join("&")
            )));
        }
        let target = match scheme {
            "redis" => {
                let driver = if passed.is_empty() {
                    format!("redis://{location}")
                } else {
                    format!("redis://{location}?{}", passed.join("&"))
                };
                redis::Client::open(driver.as_str()).map_err(|e| bad(e.to_string()))?;
                Target::Server(driver)
            }
            "redis+sentinel" => {
                let (auth, rest) = auth(location);
                let (hosts, path) = rest.split_once('/').unwrap_or((rest, ""));
                let sentinels = nodes(hosts, SENTINEL_PORT_DEFAULT).map_err(&bad)?;
                let (master, db) = path.split_once('/').unwrap_or((path, "0"));
                let master_ok = !master.is_empty()
                    && master.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
                if !master_ok {
                    return Err(bad(format!(
                        "{master:?} is not a master name; name the master the sentinels \
                         monitor after the hosts: redis+sentinel://HOST:PORT/MASTER"
                    )));
                }
                let db =
                    db.parse::<i64>().ok().filter(|db| *db >= 0).ok_or_else(|| {
                        bad(format!("{db:?} is not a database number; use 0, 1, …"))
                    })?;
                Target::Sentinel { sentinels, master: master.to_string(), auth, db }
            }
            "redis+cluster" => {
                let (auth, hosts) = auth(location);
                if hosts.contains('/') {
                    return Err(bad("a cluster has only database 0; remove the /DB".to_string()));
                }
                Target::Cluster { nodes: nodes(hosts, REDIS_PORT_DEFAULT).map_err(&bad)?, auth }
            }
            _ => return Err(bad(ACCEPTED.to_string())),
        };
        Ok(RedisUrl { target, prefix })
    }

    /// The key prefix (`prefix=`, default [`REDIS_PREFIX_DEFAULT`]).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The same server with another key prefix (tests give each run its own).
    pub fn with_prefix(&self, prefix: &str) -> Result<RedisUrl, StoreError> {
        let prefix = redis_prefix(prefix)
            .map_err(|reason| StoreError::BadUrl { url: self.to_string(), reason })?;
        Ok(RedisUrl { target: self.target.clone(), prefix })
    }

    /// Connects; the connection reconnects by itself after the server drops it (and, for
    /// sentinel and cluster URLs, follows a failover).
    pub async fn connect(&self) -> Result<RedisConn, StoreError> {
        let bad = |e: redis::RedisError| StoreError::BadUrl {
            url: self.to_string(),
            reason: e.to_string(),
        };
        let timeout = Duration::from_millis(REDIS_CALL_TIMEOUT_MS);
        let link = match &self.target {
            Target::Server(driver) => {
                let client = redis::Client::open(driver.as_str()).map_err(bad)?;
                let config = redis::aio::ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(timeout))
                    .set_response_timeout(Some(timeout));
                let manager = ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(|e| unavailable(self, &e))?;
                Link::Server(manager)
            }
            Target::Sentinel { sentinels, master, auth, db } => {
                let mut info = redis::RedisConnectionInfo::default().set_db(*db);
                if let Some(user) = &auth.user {
                    info = info.set_username(user);
                }
                if let Some(password) = &auth.password {
                    info = info.set_password(password);
                }
                let urls = sentinels.iter().map(|node| format!("redis://{node}")).collect();
                let link = sentinel::SentinelLink::connect(urls, master, info, *db, timeout)
                    .await
                    .map_err(|e| unavailable(self, &e))?;
                Link::Sentinel(Arc::new(link))
            }
            Target::Cluster { nodes, auth } => {
                let urls = nodes.iter().map(|node| format!("redis://{node}"));
                let mut builder = redis::cluster::ClusterClient::builder(urls)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .overall_response_timeout(Some(timeout))
                    .retries(REDIS_CLUSTER_RETRIES);
                if let Some(user) = &auth.user {
                    builder = builder.username(user);
                }
                if let Some(password) = &auth.password {
                    builder = builder.password(password);
                }
                let client = builder.build().map_err(bad)?;
                let connected = tokio::time::timeout(timeout, client.get_async_connection());
                let cluster = connected
                    .await
                    .map_err(|_| {
                        StoreError::Unavailable(format!(
                            "redis {self}: no cluster node answered within {REDIS_CALL_TIMEOUT_MS} ms"
                        ))
                    })?
                    .map_err(|e| unavailable(self, &e))?;
                Link::Cluster(cluster)
            }
        };
        Ok(RedisConn { link, url: self.clone() })
    }
}

impl fmt::Display for RedisUrl {
    /// The URL with any password replaced by `***`, and the prefix.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown_auth = |auth: &Auth| match (&auth.user, &auth.password) {
            (Some(user), Some(_)) => format!("{user}:***@"),
            (None, Some(_)) => "***@".to_string(),
            _ => String::new(),
        };
        match &self.target {
            Target::Server(driver) => write!(f, "{}", redact(driver))?,
            Target::Sentinel { sentinels, master, auth, db } => write!(
                f,
                "redis+sentinel://{}{}/{master}/{db}",
                shown_auth(auth),
                sentinels.join(",")
            )?,
            Target::Cluster { nodes, auth } => {
                write!(f, "redis+cluster://{}{}", shown_auth(auth), nodes.join(","))?;
            }
        }
        write!(f, "?prefix={}", self.prefix)
    }
}

impl fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisUrl({self})")
    }
}

/// One connection to a Redis server (or to the master its sentinels name, or to a cluster),
/// shared by clones (requests are multiplexed on it).
#[derive(Clone)]
pub struct RedisConn {
    link: Link,
    url: RedisUrl,
}

/// How a [`RedisConn`] reaches its server.
#[derive(Clone)]
enum Link {
    Server(ConnectionManager),
    Sentinel(Arc<sentinel::SentinelLink>),
    Cluster(ClusterConnection),
}

impl RedisConn {
    /// The URL it was opened with.
    pub fn url(&self) -> &RedisUrl {
        &self.url
    }

    /// `prefix` + `rest`: a key of idmint's.
    pub fn key(&self, rest: &str) -> String {
        format!("{}{rest}", self.url.prefix)
    }

    /// The server's `run_id` (`INFO server`): a new value means the server restarted or
    /// another server took over, and anything it held may be older than what was served.
    /// For a cluster, the primaries' run ids, sorted and joined by commas.
    pub async fn run_id(&mut self) -> Result<String, StoreError> {
        let info: redis::Value = redis::cmd("INFO")
            .arg("server")
            .query_async(self)
            .await
            .map_err(|e| unavailable(&self.url, &e))?;
        let mut ids = Vec::new();
        run_ids(&info, &mut ids);
        if ids.is_empty() {
            return Err(StoreError::Unavailable(format!(
                "{}: INFO server has no run_id",
                self.url
            )));
        }
        ids.sort_unstable();
        Ok(ids.join(","))
    }

    /// Checks that the server (every cluster primary) answers.
    pub async fn ping(&mut self) -> Result<(), StoreError> {
        let _: redis::Value =
            redis::cmd("PING").query_async(self).await.map_err(|e| unavailable(&self.url, &e))?;
        Ok(())
    }
}

/// Commands, pipelines and scripts run on a [`RedisConn`] like on any redis-rs connection.
impl redis::aio::ConnectionLike for RedisConn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match &mut self.link {
            Link::Server(manager) => manager.req_packed_command(cmd),
            Link::Sentinel(link) => Box::pin(link.command(cmd)),
            Link::Cluster(cluster) => cluster.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match &mut self.link {
            Link::Server(manager) => manager.req_packed_commands(cmd, offset, count),
            Link::Sentinel(link) => Box::pin(link.commands(cmd, offset, count)),
            Link::Cluster(cluster) => cluster.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Server(manager) => manager.get_db(),
            Link::Sentinel(link) => link.db(),
            Link::Cluster(cluster) => cluster.get_db(),
        }
    }
}

impl fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RedisConn({})", self.url)
    }
}

/// A driver error as [`StoreError::Unavailable`], naming the server.
pub fn unavailable(url: &RedisUrl, error: &redis::RedisError) -> StoreError {
    StoreError::Unavailable(format!("redis {url}: {error}"))
}

/// Lua helpers every script of the stores starts with. Numbers cross scripts as decimal text:
/// Lua's numbers are doubles, exact only up to 2^53, and ids go up to `i64::MAX`.
///
/// - `lt(a, b)`: `a < b` for two canonical decimals, compared digit by digit.
/// - `uint(s)`: `s` is a canonical decimal (no sign, no leading zero) in `0..=i64::MAX`.
/// - `shown(v)`: a field's value for a message, `missing` when absent.
/// - `now_ms()`: the server's clock (`TIME`) in milliseconds, as text.
/// - `now_us()`: the server's clock in microseconds, as text.
const LUA_PRELUDE: &str = r"
local function lt(a, b)
    if #a ~= #b then return #a < #b end
    for i = 1, #a do
        local x, y = string.byte(a, i), string.byte(b, i)
        if x ~= y then return x < y end
    end
    return false
end
local function uint(s)
    if type(s) ~= 'string' or #s == 0 or #s > 19 then return false end
    if s ~= '0' and not string.find(s, '^[1-9][0-9]*$') then return false end
    return #s < 19 or not lt('9223372036854775807', s)
end
local function shown(v)
    if v then return v end
    return 'missing'
end
local function now_ms()
    local t = redis.call('TIME')
    return t[1] .. string.sub(string.format('%06d', tonumber(t[2])), 1, 3)
end
local function now_us()
    local t = redis.call('TIME')
    return t[1] .. string.format('%06d', tonumber(t[2]))
end
";

/// A server-side script: [`LUA_PRELUDE`], then `body`.
fn script(body: &str) -> redis::Script {
    redis::Script::new(&format!("{LUA_PRELUDE}{body}"))
}

/// Collects the `run_id:` lines of `INFO server` replies (one per cluster primary).
fn run_ids(value: &redis::Value, ids: &mut Vec<String>) {
    let mut from_text = |text: &str| {
        let found = text.lines().filter_map(|line| line.strip_prefix("run_id:"));
        ids.extend(found.map(|id| id.trim().to_string()));
    };
    match value {
        redis::Value::BulkString(bytes) => from_text(&String::from_utf8_lossy(bytes)),
        redis::Value::SimpleString(text) | redis::Value::VerbatimString { text, .. } => {
            from_text(text);
        }
        redis::Value::Array(items) | redis::Value::Set(items) => {
            items.iter().for_each(|item| run_ids(item, ids));
        }
        redis::Value::Map(pairs) => pairs.iter().for_each(|(_, item)| run_ids(item, ids)),
        _ => {}
    }
}

/// The `[[USER]:PASSWORD@]` part of a sentinel or cluster location, and the rest.
fn auth(location: &str) -> (Auth, &str) {
    let Some((credentials, rest)) = location.rsplit_once('@') else {
        return (Auth::default(), location);
    };
    let auth = match credentials.split_once(':') {
        Some(("", password)) => Auth { user: None, password: Some(password.to_string()) },
        Some((user, password)) => {
            Auth { user: Some(user.to_string()), password: Some(password.to_string()) }
        }
        None => Auth { user: None, password: Some(credentials.to_string()) },
    };
    (auth, rest)
}

/// `HOST[:PORT],…` as `host:port` strings: 1 to [`REDIS_NODES_MAX`] of them.
fn nodes(list: &str, port_default: u16) -> Result<Vec<String>, String> {
    let hosts: Vec<&str> = list.split(',').collect();
    if hosts.len() > REDIS_NODES_MAX {
        return Err(format!("{} hosts given; name at most {REDIS_NODES_MAX}", hosts.len()));
    }
    hosts
        .into_iter()
        .map(|host| {
            let (name, port) = match host.rsplit_once(':') {
                Some((name, port)) => (name, port.parse::<u16>().ok().filter(|p| *p > 0)),
                None => (host, Some(port_default)),
            };
            let name_ok = !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
            match port {
                Some(port) if name_ok => Ok(format!("{name}:{port}")),
                _ => Err(format!("{host:?} is not HOST:PORT (e.g. 127.0.0.1:26379)")),
            }
        })
        .collect()
}

/// A key prefix: 1 to [`REDIS_PREFIX_LEN_MAX`] of `[A-Za-z0-9_.:-]`.
fn redis_prefix(value: &str) -> Result<String, String> {
    let ok = !value.is_empty()
        && value.len() <= REDIS_PREFIX_LEN_MAX
        && value.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b));
    if ok {
        Ok(value.to_string())
    } else {
        Err(format!(
            "prefix={value:?} is not a key prefix; use 1 to {REDIS_PREFIX_LEN_MAX} of \
             A-Z a-z 0-9 _ . : -"
        ))
    }
}

/// `redis://user:secret@host` → `redis://user:***@host`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let (authority, path) = rest.split_once('/').map_or((rest, None), |(a, p)| (a, Some(p)));
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            // A lone name is a user for redis://, a password for sentinels and clusters.
            None if scheme == "redis" => format!("{user_info}@{host}"),
            None => format!("***@{host}"),
        },
        None => authority.to_string(),
    };
    match path {
        Some(path) => format!("{scheme}://{authority}/{path}"),
        None => format!("{scheme}://{authority}"),
    }
}

/// `name` as the Redis Cluster hash tag of its keys: `{NAME}`, or `%{HEX}` (its UTF-8 bytes
/// in hex) when it holds a brace. A brace inside would end the hash tag early (a name
/// starting with `}` would give an empty hash tag, so its keys would hash whole and land in
/// different slots, breaking the multi-key scripts); the `%` form cannot be mistaken for the
/// plain form, so no two names share a key.
pub(crate) fn hash_tag(name: &str) -> String {
    if !name.contains(['{', '}']) {
        return format!("{{{name}}}");
    }
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    format!("%{{{hex}}}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_their_prefix_and_never_show_a_password() {
        let url = RedisUrl::parse("redis://:s3cret@127.0.0.1:6379/2?prefix=t1:").unwrap();
        assert_eq!(url.prefix(), "t1:");
        let shown = url.to_string();
        assert!(!shown.contains("s3cret") && shown.contains("***"), "{shown}");
        assert_eq!(RedisUrl::parse("redis://h").unwrap().prefix(), REDIS_PREFIX_DEFAULT);
        for bad in ["rediss://h", "redis://", "redis://h?prefix=a%20b", "http://h"] {
            assert!(RedisUrl::parse(bad).is_err(), "{bad} accepted");
        }
        let err = RedisUrl::parse("redis://h?prefix=").unwrap_err().to_string();
        assert!(err.contains("is not a key prefix"), "{err}");
    }

    #[test]
    fn sentinel_and_cluster_urls_parse_and_never_show_a_password() {
        let url = "redis+sentinel://s3cret@10.0.0.1:26379,db-2/mymaster/3?prefix=p:";
        assert_eq!(
            RedisUrl::parse(url).unwrap().to_string(),
            "redis+sentinel://***@10.0.0.1:26379,db-2:26379/mymaster/3?prefix=p:"
        );
        assert_eq!(
            RedisUrl::parse("redis+cluster://app:s3cret@a:7000,b").unwrap().to_string(),
            "redis+cluster://app:***@a:7000,b:6379?prefix=idmint:"
        );
        let many = vec!["h:1"; REDIS_NODES_MAX + 1].join(",");
        for (bad, reason) in [
            ("redis+sentinel://s3cret@h:1".to_string(), "not a master name"),
            ("redis+sentinel://s3cret@h:0/m".to_string(), "not HOST:PORT"),
            ("redis+sentinel://s3cret@h:1/m/x".to_string(), "not a database number"),
            ("redis+cluster://s3cret@h:1/0".to_string(), "only database 0"),
            ("redis+cluster://s3cret@h:1?timeout=3".to_string(), "not an option"),
            (format!("redis+cluster://s3cret@{many}"), "at most 16"),
            ("redis+unknown://s3cret@h:1".to_string(), "redis+sentinel://"),
        ] {
            let err = RedisUrl::parse(&bad).unwrap_err().to_string();
            assert!(err.contains(reason) && !err.contains("s3cret"), "{bad}: {err}");
        }
    }
}
