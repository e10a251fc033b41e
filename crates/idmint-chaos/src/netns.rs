//! A network partition between one node and its store, leaving its clients and peers alone:
//! the node runs in a network namespace of its own, reached by two veth pairs. One carries
//! its clients and peers (the other nodes listen on this pair's outer address, so the node
//! reaches them too); the other carries only its store, through a TCP relay the harness runs
//! on that pair's outer address toward the private database on loopback. Taking the store
//! pair's outer end down drops the node's store packets (no reset, as a partition does) while
//! its HTTP and gRPC traffic flows.
//!
//! Needs root (CI runs the suite as root). Everything is named after the harness's process
//! id and removed on drop, whatever happened; namespaces left by a harness that was killed
//! (its process gone) are removed when the next one starts.

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};

/// The prefix of the namespaces this suite makes: `idmint-chaos-PID`.
const NETNS_PREFIX: &str = "idmint-chaos-";

/// A node's own network namespace and its two links (see the module doc).
pub struct Partition {
    netns: String,
    /// The outer ends of the client and store pairs, in the harness's namespace.
    client_link: String,
    store_link: String,
    /// The harness's address on the client pair: the other nodes listen here.
    pub outer_host: String,
    /// The namespace's address on the client pair: the partitioned node listens here.
    pub inner_host: String,
    /// The harness's address on the store pair: the relay listens here.
    store_host: String,
    relays: Vec<tokio::task::JoinHandle<()>>,
    runtime: tokio::runtime::Handle,
}

impl Partition {
    /// Makes the namespace and both pairs, up. Its name is `idmint-chaos-PID`; the subnets
    /// are `10.231.X.0/30` (clients) and `10.231.X.4/30` (store), `X` from the process id.
    pub fn new(runtime: &tokio::runtime::Handle) -> Result<Partition> {
        remove_stale_namespaces();
        let pid = std::process::id();
        let x = 16 + pid % 200;
        let partition = Partition {
            netns: format!("{NETNS_PREFIX}{pid}"),
            client_link: format!("idmc{}c", pid % 1_000_000),
            store_link: format!("idmc{}s", pid % 1_000_000),
            outer_host: format!("10.231.{x}.1"),
            inner_host: format!("10.231.{x}.2"),
            store_host: format!("10.231.{x}.5"),
            relays: Vec::new(),
            runtime: runtime.clone(),
        };
        // Dropped on any failure below: whatever was made is removed.
        ip(&["netns", "add", &partition.netns])?;
        ip(&["netns", "exec", &partition.netns, "ip", "link", "set", "lo", "up"])?;
        let pairs = [
            (&partition.client_link, &partition.outer_host, &partition.inner_host),
            (&partition.store_link, &partition.store_host, &format!("10.231.{x}.6")),
        ];
        for (link, outer, inner) in pairs {
            let peer = format!("{link}n");
            ip(&["link", "add", link, "type", "veth", "peer", "name", &peer])?;
            ip(&["link", "set", &peer, "netns", &partition.netns])?;
            ip(&["addr", "add", &format!("{outer}/30"), "dev", link])?;
            ip(&["link", "set", link, "up"])?;
            let inside = |args: &[&str]| {
                let mut all = vec!["netns", "exec", &partition.netns, "ip"];
                all.extend(args);
                ip(&all)
            };
            inside(&["addr", "add", &format!("{inner}/30"), "dev", &peer])?;
            inside(&["link", "set", &peer, "up"])?;
        }
        Ok(partition)
    }

    /// The namespace's name, for [`crate::node::Node::in_netns`].
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// Relays a TCP port of the store pair's outer address to `target` (a private database on
    /// loopback); returns the address the partitioned node connects to.
    pub fn relay(&mut self, target: SocketAddr) -> Result<SocketAddr> {
        let listener = std::net::TcpListener::bind((self.store_host.as_str(), 0))
            .with_context(|| format!("binding the store relay on {}", self.store_host))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let _enter = self.runtime.enter();
        let listener = tokio::net::TcpListener::from_std(listener)?;
        self.relays.push(self.runtime.spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        }));
        Ok(addr)
    }

    /// Takes the store pair down: the node's store packets are dropped from now on.
    pub fn cut_store(&self) -> Result<()> {
        ip(&["link", "set", &self.store_link, "down"])
    }

    /// Brings the store pair up again.
    pub fn heal_store(&self) -> Result<()> {
        ip(&["link", "set", &self.store_link, "up"])
    }
}

impl Drop for Partition {
    fn drop(&mut self) {
        for relay in &self.relays {
            relay.abort();
        }
        // Deleting an outer end deletes its pair; deleting the namespace deletes what is left.
        for link in [&self.client_link, &self.store_link] {
            let _ = quiet(&["link", "del", link]);
        }
        if !quiet(&["netns", "del", &self.netns]) {
            eprintln!("warning: could not delete the network namespace {}", self.netns);
        }
    }
}

/// Removes the namespaces of harnesses that are gone (killed before their drop ran).
fn remove_stale_namespaces() {
    let Ok(output) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(pid) = name.strip_prefix(NETNS_PREFIX) else { continue };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            quiet(&["netns", "del", name]);
        }
    }
}

/// Runs `ip ARGS` to success.
fn ip(args: &[&str]) -> Result<()> {
    let output = Command::new("ip").args(args).output().context("running ip(8)")?;
    ensure!(
        output.status.success(),
        "ip {}: {} (the partition scenario makes a network namespace and veth pairs: it needs \
         root, as CI has)",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// Runs `ip ARGS`, quietly: whether it succeeded.
fn quiet(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
