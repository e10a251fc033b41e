//! One idmint node: the real `idmint serve` binary as a child process, on a fixed loopback
//! port and its own data directory, so a restart (after `kill -9` or SIGTERM) is the same node
//! coming back. A node may run under libfaketime, whose offset file the harness rewrites to
//! step the node's wall clock: the server has no code path of its own for it. A node's data
//! directory may be a small tmpfs of its own ([`SmallDisk`]), which the harness fills to the
//! last byte and frees again. A node may listen on another address than loopback and run in
//! a network namespace of its own ([`crate::netns`]), so the harness can cut it off from its
//! store and not from its clients.

use std::io::{BufRead, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};

use crate::servers::{free_port, signal, tail};

/// Debian's libfaketime (package `libfaketime`), the multi-threaded build.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

/// How long a node may take to announce its address.
const NODE_START_TIMEOUT: Duration = Duration::from_secs(30);

/// A node's wall-clock offset, read by libfaketime from a file (re-read at most once a
/// second); the monotonic clock is left alone, as a stepped NTP clock leaves it.
pub struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    /// An offset file in `dir`, starting at real time.
    pub fn new(dir: &Path) -> Result<FakeClock> {
        let clock = FakeClock { file: dir.join("faketime.offset") };
        clock.set_offset_s(0)?;
        Ok(clock)
    }

    /// Sets the offset from real time, in seconds (negative: behind).
    pub fn set_offset_s(&self, offset_s: i64) -> Result<()> {
        // Written whole through a rename, so libfaketime never reads half a line.
        let tmp = self.file.with_extension("tmp");
        std::fs::write(&tmp, format!("{offset_s:+}s\n"))?;
        std::fs::rename(&tmp, &self.file)?;
        Ok(())
    }
}

/// An `idmint serve` process with its arguments, port and data directory.
pub struct Node {
    /// The node's name in reports (`n1`, …).
    pub name: String,
    idmint: PathBuf,
    dir: PathBuf,
    host: String,
    port: u16,
    /// The network namespace it runs in (`ip netns exec`), if any.
    netns: Option<String>,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    faketime: Option<PathBuf>,
    child: Option<Child>,
    /// How many times the node was started.
    pub starts: u32,
}

impl Node {
    /// A node named `name` (not started): `idmint serve` with `args` and `envs` (no `IDMINT_*`
    /// variable of the harness's own environment), its directory under `work`.
    pub fn new(
        idmint: &Path,
        work: &Path,
        name: &str,
        args: &[String],
        envs: &[(&str, String)],
    ) -> Result<Node> {
        let dir = work.join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(Node {
            name: name.to_string(),
            idmint: idmint.to_path_buf(),
            dir,
            host: "127.0.0.1".to_string(),
            port: free_port()?,
            netns: None,
            args: args.to_vec(),
            envs: envs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
            faketime: None,
            child: None,
            starts: 0,
        })
    }

    /// Runs the node under libfaketime with `clock`'s offset file.
    pub fn with_fake_clock(mut self, clock: &FakeClock) -> Node {
        self.faketime = Some(clock.file.clone());
        self
    }

    /// Listens on `host` (an address of this machine or of the node's namespace) instead of
    /// 127.0.0.1: its peers reach its gRPC API there too.
    pub fn with_host(mut self, host: &str) -> Node {
        self.host = host.to_string();
        self
    }

    /// Runs the node in the network namespace `netns` (`ip netns exec`: the same process,
    /// so signals reach it).
    pub fn in_netns(mut self, netns: &str) -> Node {
        self.netns = Some(netns.to_string());
        self
    }

    /// Starts the node and waits for the line that announces its address.
    pub fn start(&mut self) -> Result<()> {
        let log = self.log_path();
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&log)?;
        let mut command = match &self.netns {
            Some(netns) => {
                let mut command = Command::new("ip");
                command.args(["netns", "exec", netns]).arg(&self.idmint);
                command
            }
            None => Command::new(&self.idmint),
        };
        command
            .current_dir(&self.dir)
            .arg("serve")
            .args(["--listen", &format!("{}:{}", self.host, self.port)])
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        for (name, _) in std::env::vars() {
            if name.starts_with("IDMINT_") || name == "RUST_LOG" || name.starts_with("FAKETIME") {
                command.env_remove(name);
            }
        }
        command.envs(self.envs.iter().map(|(k, v)| (k, v)));
        if let Some(file) = &self.faketime {
            command
                .env("LD_PRELOAD", LIBFAKETIME)
                .env("FAKETIME_TIMESTAMP_FILE", file)
                .env("FAKETIME_CACHE_DURATION", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        }
        let mut child =
            command.spawn().with_context(|| format!("starting {}", self.idmint.display()))?;
        let stdout = child.stdout.take().context("the node's stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next().and_then(|l| l.ok()).unwrap_or_default();
            let _ = tx.send(first);
            // Keep reading so the node never blocks on a full pipe.
            for _ in lines {}
        });
        let line = rx.recv_timeout(NODE_START_TIMEOUT).unwrap_or_default();
        if !line.starts_with("idmint listening on ") {
            let _ = child.kill();
            let _ = child.wait();
            bail!("node {} did not start: {line:?}\n{}", self.name, tail(&log));
        }
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    /// `kill -9`: no shutdown, no give-back, nothing flushed.
    pub fn kill9(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// SIGTERM and wait (at most 30 s, then `kill -9`): the node leaves the cluster in order,
    /// giving its leases back.
    pub fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        signal(child.id(), "TERM")?;
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while child.try_wait()?.is_none() {
            if std::time::Instant::now() > deadline {
                child.kill()?;
                child.wait()?;
                bail!("node {} did not stop within 30 s of SIGTERM", self.name);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// SIGSTOP: the process is frozen (timers, leases and connections as they were).
    pub fn pause(&self) -> Result<()> {
        signal(self.pid()?, "STOP")
    }

    /// SIGCONT after [`Node::pause`].
    pub fn resume(&self) -> Result<()> {
        signal(self.pid()?, "CONT")
    }

    /// The base URL, `http://HOST:PORT` (127.0.0.1 unless [`Node::with_host`]); also where
    /// its peers reach its gRPC API, as the node records it as a lease's holder.
    pub fn url(&self) -> String {
        format!("http://{}:{}", self.host, self.port)
    }

    /// Is the process running (started and not exited)?
    pub fn running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The node's data directory (`--data-dir`: marks, lock file, SQLite store).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The node's log (its stderr over every start).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("serve.log")
    }

    fn pid(&self) -> Result<u32> {
        self.child.as_ref().map(Child::id).context("node not running")
    }
}

/// A tmpfs of a few MiB mounted on a directory (a node's data directory): a disk that the
/// harness can fill to the last byte with a filler file and free again. Needs root (CI runs
/// the suite as root); unmounted on drop. Drop the nodes that use it first: declare it before
/// them, so it outlives them.
pub struct SmallDisk {
    mount_point: PathBuf,
    filler: PathBuf,
}

impl SmallDisk {
    /// Mounts a tmpfs of `size_bytes` on `dir` (created when absent).
    pub fn mount(dir: &Path, size_bytes: u64) -> Result<SmallDisk> {
        std::fs::create_dir_all(dir)?;
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_bytes},mode=0755"), "tmpfs"])
            .arg(dir)
            .output()
            .context("running mount(8)")?;
        ensure!(
            output.status.success(),
            "could not mount a {size_bytes}-byte tmpfs on {} ({}): this scenario fills a small \
             disk and needs root (CI runs the suite as root; run it with sudo, or in a container \
             allowed to mount tmpfs)",
            dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(SmallDisk { mount_point: dir.to_path_buf(), filler: dir.join("chaos.filler") })
    }

    /// Appends to the filler file until the disk refuses a single byte more; returns the bytes
    /// written by this call. Called again, it takes whatever the node freed meanwhile.
    pub fn fill(&self) -> Result<u64> {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&self.filler)?;
        let mut written = 0u64;
        // Big chunks first, then smaller ones down to a byte, so no tail of free space is left.
        let zeros = vec![0u8; 64 * 1024];
        let mut chunk = zeros.len();
        while chunk > 0 {
            match file.write(&zeros[..chunk]) {
                Ok(0) => chunk /= 2,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => chunk /= 2, // ENOSPC
                Err(e) => return Err(e).context("writing the filler file"),
            }
        }
        Ok(written)
    }

    /// Deletes the filler file: the disk has room again.
    pub fn free(&self) -> Result<()> {
        match std::fs::remove_file(&self.filler) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let umount = |lazy: bool| {
            let mut command = Command::new("umount");
            if lazy {
                command.arg("-l");
            }
            command.arg(&self.mount_point).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
        };
        // A process still holding a file there makes a plain umount fail; a lazy one detaches
        // the mount at once and frees it when the last file closes.
        if !umount(false) && !umount(true) {
            eprintln!("warning: could not unmount the tmpfs on {}", self.mount_point.display());
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            // A paused node must be resumed to die of SIGTERM; SIGKILL needs no resume.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
