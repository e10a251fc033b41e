//! Private Redis deployments for the sentinel and cluster checks: the test kit's
//! `PrivateRedis` servers (free loopback ports, a temporary directory each, no persistence),
//! set up as a master with replicas and a sentinel, or as a cluster.
//!
//! Each server's reaper stops it and removes its directory when the test process lets go of
//! it, so a deployment shared by many checks through a `static`, which is never dropped,
//! still goes away with the test binary.

use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ::redis as driver;
use idmint_testkit::servers::PrivateRedis;

/// How long a server, a sentinel or a cluster may take to come up.
const READY_WAIT: Duration = Duration::from_secs(15);
/// Between two readiness probes.
const PROBE_INTERVAL: Duration = Duration::from_millis(50);
/// The name the sentinels monitor.
pub const MASTER_NAME: &str = "idmint-master";

/// One `redis-server` process (a data node or a sentinel).
pub struct Server {
    /// The loopback port it listens on.
    pub port: u16,
    redis: PrivateRedis,
}

impl Server {
    /// Starts a data node with `extra` arguments and waits until it answers `PING`.
    pub fn start(port: u16, extra: &[&str]) -> Result<Server, String> {
        let redis = PrivateRedis::start_with(port, None, extra).map_err(|e| format!("{e:#}"))?;
        let server = Server { port, redis };
        server.wait_until("PING answered", |conn| {
            driver::cmd("PING").query::<String>(conn).is_ok()
        })?;
        Ok(server)
    }

    /// Starts a sentinel monitoring the master on `master_port` (quorum 1, a failover after
    /// one second of silence) and waits until it names that master.
    pub fn sentinel(port: u16, master_port: u16) -> Result<Server, String> {
        let config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 1\n\
             sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n"
        );
        let redis = PrivateRedis::start_with(port, Some(&config), &["--sentinel"])
            .map_err(|e| format!("{e:#}"))?;
        let sentinel = Server { port, redis };
        sentinel.wait_until("the sentinel named its master", |conn| {
            master_port_of(conn).is_some_and(|p| p == master_port)
        })?;
        Ok(sentinel)
    }

    /// Kills the server now (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        self.redis.kill().unwrap();
    }

    /// A blocking connection to it.
    pub fn connect(&self) -> driver::RedisResult<driver::Connection> {
        let client = driver::Client::open(format!("redis://127.0.0.1:{}", self.port))?;
        client.get_connection_with_timeout(Duration::from_secs(2))
    }

    /// Polls `ready` on a fresh connection until it holds, at most [`READY_WAIT`].
    pub fn wait_until(
        &self,
        what: &str,
        mut ready: impl FnMut(&mut driver::Connection) -> bool,
    ) -> Result<(), String> {
        let started = Instant::now();
        while started.elapsed() < READY_WAIT {
            if self.connect().is_ok_and(|mut conn| ready(&mut conn)) {
                return Ok(());
            }
            std::thread::sleep(PROBE_INTERVAL);
        }
        Err(format!(
            "redis-server on port {} not ready ({what}) within {READY_WAIT:?}; is redis-server \
             installed?",
            self.port
        ))
    }
}

/// A master and a sentinel watching it.
pub struct SentinelSet {
    /// The master, then its replicas.
    pub nodes: Vec<Server>,
    /// The sentinel.
    pub sentinel: Server,
}

impl SentinelSet {
    /// A master, `replicas` replicas of it, and a sentinel.
    pub fn start(replicas: usize) -> Result<SentinelSet, String> {
        let master = Server::start(free_port(false)?, &[])?;
        let replica_of = master.port.to_string();
        let mut nodes = vec![master];
        for _ in 0..replicas {
            let replica =
                Server::start(free_port(false)?, &["--replicaof", "127.0.0.1", &replica_of])?;
            replica.wait_until("in sync with its master", |conn| {
                let info: String =
                    driver::cmd("INFO").arg("replication").query(conn).unwrap_or_default();
                info.contains("master_link_status:up")
            })?;
            nodes.push(replica);
        }
        let sentinel = Server::sentinel(free_port(false)?, nodes[0].port)?;
        Ok(SentinelSet { nodes, sentinel })
    }

    /// The store URL of this deployment with `prefix`.
    pub fn url(&self, prefix: &str) -> String {
        format!("redis+sentinel://127.0.0.1:{}/{MASTER_NAME}?prefix={prefix}", self.sentinel.port)
    }

    /// The port of the master the sentinel names now.
    pub fn master_port(&self) -> Option<u16> {
        self.sentinel.connect().ok().and_then(|mut conn| master_port_of(&mut conn))
    }
}

/// A Redis Cluster of three masters, no replicas.
pub struct Cluster {
    /// Its nodes.
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Starts three cluster-enabled servers, joins them with `redis-cli --cluster create`,
    /// and waits until every node reports `cluster_state:ok`.
    pub fn start() -> Result<Cluster, String> {
        let mut nodes = Vec::new();
        for _ in 0..3 {
            let args = ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"];
            nodes.push(Server::start(free_port(true)?, &args)?);
        }
        let addresses: Vec<String> =
            nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addresses)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run redis-cli: {e}"))?;
        if !created.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&created.stdout)
            ));
        }
        for node in &nodes {
            node.wait_until("cluster_state:ok", |conn| {
                let info: String =
                    driver::cmd("CLUSTER").arg("INFO").query(conn).unwrap_or_default();
                info.contains("cluster_state:ok")
            })?;
        }
        Ok(Cluster { nodes })
    }

    /// The store URL of this cluster with `prefix`, naming its first node only (the others
    /// are discovered).
    pub fn url(&self, prefix: &str) -> String {
        format!("redis+cluster://127.0.0.1:{}?prefix={prefix}", self.nodes[0].port)
    }
}

/// What `SENTINEL get-master-addr-by-name` answers, as a port.
fn master_port_of(conn: &mut driver::Connection) -> Option<u16> {
    let addr: Option<(String, String)> =
        driver::cmd("SENTINEL").arg("get-master-addr-by-name").arg(MASTER_NAME).query(conn).ok()?;
    addr?.1.parse().ok()
}

/// A loopback port nothing listens on (and, for a cluster node, its bus port + 10000 too).
fn free_port(with_bus: bool) -> Result<u16, String> {
    for _ in 0..100 {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free port: {e}"))?
            .port();
        if !with_bus {
            return Ok(port);
        }
        if port < u16::MAX - 10_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Ok(port);
        }
    }
    Err("no free port pair for a cluster node after 100 tries".to_string())
}
