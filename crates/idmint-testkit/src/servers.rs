//! Private database servers: a MariaDB, a PostgreSQL and a Redis of a test's (or the chaos
//! harness's) own, each on a free loopback port with its own data directory, started from
//! the installed server binaries. The machine's shared servers are never touched: the faults
//! the chaos suite injects (stop, kill, flush, restore) hit these only.
//!
//! Every server has a [`Reaper`]: a small `sh` that holds the read end of a pipe from this
//! process and, when the pipe closes, stops the server and removes its directory. A server
//! dropped stops at once (the drop closes the pipe and waits); a server kept in a `static`
//! (libtest never runs their destructors) or a test process killed by a signal leaves
//! nothing behind either, because the pipe closes when the process ends, however it ends.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

/// How long a server may take to accept connections after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The reaper's script: `$1` is the directory to remove, `$2` the shell code that stops the
/// server. It ignores the terminal's signals (a Ctrl-C reaches the whole process group) and
/// waits for its stdin to close or to carry a line.
const REAPER_SCRIPT: &str = r#"trap '' INT TERM HUP; read _line; eval "$2"; rm -rf "$1""#;

/// Shell code the reapers' stop commands use: `stop_pid FILE SIGNAL` sends SIGNAL to the
/// process whose pid is the first line of FILE, waits up to 5 s for it to end (a zombie
/// counts as ended), then sends SIGKILL.
const STOP_PID: &str = r#"stop_pid() {
  pid=$(head -n 1 "$1" 2>/dev/null | tr -dc 0-9); [ -n "$pid" ] || return 0
  kill -s "$2" "$pid" 2>/dev/null || return 0; i=0
  while kill -0 "$pid" 2>/dev/null && [ "$(cut -d' ' -f3 /proc/$pid/stat 2>/dev/null)" != Z ] \
    && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
  kill -s KILL "$pid" 2>/dev/null; return 0; }
"#;

/// A free TCP port on 127.0.0.1 (bound, read, released).
pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("binding a free loopback port")?;
    Ok(listener.local_addr()?.port())
}

/// Sends `signal` (`KILL`, `TERM`, `STOP`, `CONT`) to a process with `kill(1)`.
pub fn signal(pid: u32, signal: &str) -> Result<()> {
    let status = Command::new("kill")
        .args(["-s", signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .context("running kill(1)")?;
    ensure!(status.success(), "kill -s {signal} {pid} failed");
    Ok(())
}

/// The last lines of a log file, for error messages.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// The installed server programs, looked up on `PATH` and where the packages put them
/// (`/usr/sbin` for `mariadbd`, `/usr/lib/postgresql/N/bin` on Debian). `None`: a program
/// is missing.
pub mod installed {
    use std::path::{Path, PathBuf};

    /// `mariadbd` and the program that initialises its data directory.
    pub fn mariadb() -> Option<(PathBuf, PathBuf)> {
        let server = find("mariadbd")?;
        let install = find("mariadb-install-db").or_else(|| find("mysql_install_db"))?;
        Some((server, install))
    }

    /// The directory holding `initdb` and `pg_ctl`: the newest Debian
    /// `/usr/lib/postgresql/N/bin`, else the one on `PATH`, else Homebrew's.
    pub fn postgres_bin() -> Option<PathBuf> {
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .filter_map(|entry| {
                let entry = entry.ok()?;
                let version = entry.file_name().to_str()?.parse().ok()?;
                Some((version, entry.path().join("bin")))
            })
            .filter(|(_, bin)| bin.join("pg_ctl").exists() && bin.join("initdb").exists())
            .collect();
        versions.sort();
        if let Some((_, bin)) = versions.pop() {
            return Some(bin);
        }
        if let Some(bin) = find("pg_ctl").and_then(|p| p.parent().map(Path::to_path_buf))
            && bin.join("initdb").exists()
        {
            return Some(bin);
        }
        // Homebrew's versioned formulae are not always linked onto PATH.
        ["/opt/homebrew/opt", "/usr/local/opt"]
            .into_iter()
            .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
            .filter(|entry| entry.file_name().to_string_lossy().starts_with("postgresql"))
            .map(|entry| entry.path().join("bin"))
            .filter(|bin| is_program(&bin.join("pg_ctl")) && is_program(&bin.join("initdb")))
            .max()
    }

    /// `redis-server`.
    pub fn redis() -> Option<PathBuf> {
        find("redis-server")
    }

    /// `program` on `PATH`, or in `/usr/sbin` or `/usr/local/sbin` (not on a user's `PATH`
    /// on Debian).
    pub fn find(program: &str) -> Option<PathBuf> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/local/sbin")])
            .map(|dir| dir.join(program))
            .find(|candidate| is_program(candidate))
    }

    fn is_program(path: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        path.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }
}

/// The watchdog of one server: stops it and removes its directory when this process lets
/// go of it (dropped, or the process ended).
pub struct Reaper {
    child: Child,
    /// Closing it (or writing a line) starts the cleanup.
    lifeline: Option<ChildStdin>,
}

impl Reaper {
    /// Starts a reaper for `dir` that runs the shell code `stop` before removing it. `stop`
    /// may call `stop_pid FILE SIGNAL`.
    pub fn start(dir: &Path, stop: &str) -> Result<Reaper> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(REAPER_SCRIPT)
            .arg("sh")
            .arg(dir)
            .arg(format!("{STOP_PID}{stop}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group: a Ctrl-C of the test run does not end it first.
            .process_group(0)
            .spawn()
            .context("starting the reaper (sh)")?;
        let lifeline = child.stdin.take();
        Ok(Reaper { child, lifeline })
    }

    /// Stops the server, removes the directory, and waits until both are done.
    pub fn finish(&mut self) {
        if let Some(mut lifeline) = self.lifeline.take() {
            let _ = lifeline.write_all(b"\n");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Reaper {
    fn drop(&mut self) {
        self.finish();
    }
}

/// A directory of a server's own under the temporary directory, kept (its reaper removes it).
fn server_dir(prefix: &str) -> Result<PathBuf> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir().context("a temporary directory")?;
    Ok(dir.keep())
}

/// Waits until `port` accepts TCP connections and, when given, `socket` (the server's own
/// Unix socket) accepts too, or `child` exits, or the start timeout. The socket tells that the
/// listener on the port is this server: on a relaunch the freed port may meanwhile serve
/// another test's process, which alone would pass a port check.
fn wait_for_port(
    port: u16,
    socket: Option<&Path>,
    child: Option<&mut Child>,
    what: &str,
    log: &Path,
) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut child = child;
    let ours = || socket.is_none_or(|path| UnixStream::connect(path).is_ok());
    while !(ours() && TcpStream::connect(("127.0.0.1", port)).is_ok()) {
        if let Some(child) = child.as_deref_mut()
            && let Some(status) = child.try_wait()?
        {
            bail!("{what} exited ({status}) before it listened:\n{}", tail(log));
        }
        ensure!(Instant::now() < deadline, "{what} did not listen on {port}:\n{}", tail(log));
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Runs a command to completion; its stderr is the error when it fails.
fn run(command: &mut Command, what: &str) -> Result<String> {
    let output = command.output().with_context(|| format!("{what}: could not start"))?;
    ensure!(
        output.status.success(),
        "{what} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Is this process root (daemons that refuse root run as their own user then)?
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A `mariadbd` of its own: `mariadb-install-db` into a temporary directory, then the server
/// on a free port, root without a password, binary log off.
pub struct PrivateMariaDb {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    server: PathBuf,
    reaper: Reaper,
}

impl PrivateMariaDb {
    /// Initialises a data directory and starts the server.
    pub fn start() -> Result<PrivateMariaDb> {
        let (server, install_db) = installed::mariadb()
            .context("mariadbd or mariadb-install-db is not installed (package mariadb-server)")?;
        let dir = server_dir("idmint-mariadb-")?;
        let stop = format!("stop_pid '{}' KILL", dir.join("mariadbd.pid").display());
        let reaper = Reaper::start(&dir, &stop)?;
        let mut install = Command::new(install_db);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if is_root() {
            install.arg("--user=root");
        }
        let mut db = PrivateMariaDb { child: None, port: free_port()?, dir, server, reaper };
        run(&mut install, "mariadb-install-db (package mariadb-server)")?;
        db.launch()?;
        Ok(db)
    }

    /// Starts `mariadbd` on the same port and data directory.
    pub fn launch(&mut self) -> Result<()> {
        let d = &self.dir;
        let log = d.join("mariadbd.log");
        let mut command = Command::new(&self.server);
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--socket={}", d.join("mariadbd.sock").display()))
            .arg(format!("--pid-file={}", d.join("mariadbd.pid").display()))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-log-bin"])
            .args(["--innodb-buffer-pool-size=32M", "--max-connections=500"])
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(&log)?)
            .process_group(0);
        if is_root() {
            command.arg("--user=root");
        }
        let mut child = command.spawn().context("starting mariadbd (package mariadb-server)")?;
        let socket = d.join("mariadbd.sock");
        wait_for_port(self.port, Some(&socket), Some(&mut child), "mariadbd", &log)?;
        self.child = Some(child);
        Ok(())
    }

    /// Stops the server cleanly (SIGTERM, then waits for it to exit).
    pub fn stop(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "TERM")?;
            child.wait()?;
        }
        Ok(())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` for idmint.
    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    /// Runs SQL with the `mariadb` client.
    pub fn sql(&self, db: &str, sql: &str) -> Result<String> {
        run(self.client("mariadb", db).args(["-N", "-e", sql]), "mariadb client")
    }

    /// A logical backup of tables `tables` of database `db` (`mariadb-dump`, one consistent
    /// snapshot of them all), written as one `REPLACE` of every row per table: restoring it
    /// puts each row back as it was, a table at a time, while nodes keep using the tables.
    pub fn dump(&self, db: &str, tables: &[&str]) -> Result<PathBuf> {
        ensure!(!tables.is_empty(), "a backup of no table");
        let out = self
            .client("mariadb-dump", "")
            .args(["--single-transaction", "--no-create-info", "--replace", "--skip-add-locks"])
            .arg(db)
            .args(tables)
            .output()?;
        ensure!(out.status.success(), "mariadb-dump: {}", String::from_utf8_lossy(&out.stderr));
        static DUMPS: AtomicU32 = AtomicU32::new(0);
        let n = DUMPS.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("{db}-{}-{n}.sql", tables.join("+")));
        std::fs::write(&path, out.stdout)?;
        Ok(path)
    }

    /// Restores a backup made by [`PrivateMariaDb::dump`] into database `db`.
    pub fn restore(&self, db: &str, dump: &Path) -> Result<()> {
        let file = std::fs::File::open(dump)?;
        let out = self.client("mariadb", db).stdin(file).output()?;
        ensure!(out.status.success(), "restore: {}", String::from_utf8_lossy(&out.stderr));
        Ok(())
    }

    fn client(&self, program: &str, db: &str) -> Command {
        let mut command = Command::new(program);
        command.args(["--no-defaults", "-h", "127.0.0.1", "-u", "root"]);
        command.arg(format!("--port={}", self.port));
        if !db.is_empty() {
            command.arg(db);
        }
        command
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.reaper.finish();
    }
}

/// A PostgreSQL of its own: `initdb` into a temporary directory, `pg_ctl` to start and stop
/// it (as the `postgres` user when this process runs as root: PostgreSQL refuses root),
/// trust auth.
pub struct PrivatePostgres {
    bin: PathBuf,
    port: u16,
    dir: PathBuf,
    running: bool,
    reaper: Reaper,
}

impl PrivatePostgres {
    /// Initialises a cluster and starts it.
    pub fn start() -> Result<PrivatePostgres> {
        let bin = installed::postgres_bin()
            .context("initdb or pg_ctl is not installed (package postgresql)")?;
        let dir = server_dir("idmint-pg-")?;
        // Immediate shutdown (SIGQUIT to the postmaster): the data is thrown away anyway.
        let stop = format!("stop_pid '{}' QUIT", dir.join("data/postmaster.pid").display());
        let reaper = Reaper::start(&dir, &stop)?;
        let mut pg = PrivatePostgres { bin, port: free_port()?, dir, running: false, reaper };
        if is_root() {
            run(Command::new("chown").args(["-R", "postgres"]).arg(&pg.dir), "chown postgres")?;
        }
        let data = pg.data();
        run(
            pg.as_owner("initdb").arg("-D").arg(&data).args(["-A", "trust", "-U", "postgres"]),
            "initdb",
        )?;
        pg.launch()?;
        Ok(pg)
    }

    /// Starts the cluster (`pg_ctl start -w`).
    pub fn launch(&mut self) -> Result<()> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=300",
            self.port,
            self.dir.display()
        );
        let (data, log) = (self.data(), self.dir.join("postgres.log"));
        run(
            self.as_owner("pg_ctl")
                .arg("-D")
                .arg(&data)
                .args(["-o", &options, "-w", "-l"])
                .arg(&log)
                .arg("start"),
            "pg_ctl start",
        )
        .with_context(|| tail(&log))?;
        self.running = true;
        Ok(())
    }

    /// Stops the cluster (`pg_ctl stop -m fast`: clients are disconnected, data is kept).
    pub fn stop(&mut self) -> Result<()> {
        let data = self.data();
        run(
            self.as_owner("pg_ctl").arg("-D").arg(&data).args(["-m", "fast", "-w", "stop"]),
            "pg_ctl stop",
        )?;
        self.running = false;
        Ok(())
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` for idmint.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Runs SQL with `psql`.
    pub fn sql(&self, db: &str, sql: &str) -> Result<String> {
        let psql = self.bin.join("psql");
        let psql = if psql.exists() { psql } else { PathBuf::from("psql") };
        run(
            Command::new(psql)
                .args(["-h", "127.0.0.1", "-U", "postgres", "-At", "-v", "ON_ERROR_STOP=1"])
                .args(["-p", &self.port.to_string(), "-d", db, "-c", sql]),
            "psql",
        )
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn as_owner(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        // pg_ctl's postmaster inherits the group: a Ctrl-C of the test run leaves it to the
        // reaper.
        command.process_group(0);
        command
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.running {
            let data = self.data();
            let _ = self
                .as_owner("pg_ctl")
                .arg("-D")
                .arg(&data)
                .args(["-m", "immediate", "-w", "stop"])
                .output();
        }
        self.reaper.finish();
    }
}

/// A `redis-server` of its own, nothing saved to disk unless asked (`SAVE`): a restart loses
/// every key written since.
pub struct PrivateRedis {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    server: PathBuf,
    /// A configuration file in `dir`, given first on the command line.
    config: Option<PathBuf>,
    /// More command-line options, after the harness's own.
    extra: Vec<String>,
    reaper: Reaper,
}

impl PrivateRedis {
    /// Starts the server on a free port.
    pub fn start() -> Result<PrivateRedis> {
        PrivateRedis::start_with(free_port()?, None, &[])
    }

    /// Starts the server on `port`, with a configuration file of text `config` (written in
    /// its directory: a sentinel rewrites its own) and the command-line options `extra`
    /// (`--replicaof …`, `--cluster-enabled yes`, `--sentinel`).
    pub fn start_with(port: u16, config: Option<&str>, extra: &[&str]) -> Result<PrivateRedis> {
        let server =
            installed::redis().context("redis-server is not installed (package redis-server)")?;
        let dir = server_dir("idmint-redis-")?;
        let stop = format!("stop_pid '{}' KILL", dir.join("redis.pid").display());
        let reaper = Reaper::start(&dir, &stop)?;
        let config = match config {
            Some(text) => {
                let path = dir.join("redis.conf");
                std::fs::write(&path, text).with_context(|| format!("{}", path.display()))?;
                Some(path)
            }
            None => None,
        };
        let extra = extra.iter().map(ToString::to_string).collect();
        let mut redis = PrivateRedis { child: None, port, dir, server, config, extra, reaper };
        redis.launch()?;
        Ok(redis)
    }

    /// Starts `redis-server` on the same port and directory (it loads `dump.rdb` if there).
    pub fn launch(&mut self) -> Result<()> {
        let log = self.dir.join("redis.log");
        let mut child = Command::new(&self.server)
            .args(self.config.as_ref())
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--dir"])
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log)
            .arg("--pidfile")
            .arg(self.dir.join("redis.pid"))
            .arg("--unixsocket")
            .arg(self.dir.join("redis.sock"))
            .args(&self.extra)
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .context("starting redis-server (package redis-server)")?;
        let socket = self.dir.join("redis.sock");
        wait_for_port(self.port, Some(&socket), Some(&mut child), "redis-server", &log)?;
        self.child = Some(child);
        Ok(())
    }

    /// kill -9: every key not in the last `SAVE` is gone.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// Makes it a replica of the server on `port` (`REPLICAOF`): it keeps its data until its
    /// first sync with that server, which replaces it.
    pub fn replicate(&self, port: u16) -> Result<()> {
        self.cli(&["REPLICAOF", "127.0.0.1", &port.to_string()])?;
        Ok(())
    }

    /// Cuts a replica off its primary, keeping the data it has: it is made the replica of a
    /// port nobody listens on (no sync ever replaces its data).
    pub fn cut_off(&self) -> Result<()> {
        let dead = free_port()?;
        self.replicate(dead)
    }

    /// Promotes it to a primary (`REPLICAOF NO ONE`), with the data it has.
    pub fn promote(&self) -> Result<()> {
        self.cli(&["REPLICAOF", "NO", "ONE"])?;
        Ok(())
    }

    /// Waits until, as a replica, its link to its primary is up (the first sync done).
    pub fn wait_in_sync(&self) -> Result<()> {
        let started = Instant::now();
        loop {
            if self.info("replication")?.contains("master_link_status:up") {
                return Ok(());
            }
            ensure!(
                started.elapsed() < START_TIMEOUT,
                "redis on port {} did not sync with its primary within {START_TIMEOUT:?}:\n{}",
                self.port,
                tail(&self.dir.join("redis.log"))
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `INFO SECTION`'s text.
    pub fn info(&self, section: &str) -> Result<String> {
        self.cli(&["INFO", section])
    }

    /// `FLUSHALL`.
    pub fn flush(&self) -> Result<()> {
        self.cli(&["FLUSHALL"])?;
        Ok(())
    }

    /// Runs `redis-cli` with `args` against it; its output.
    pub fn cli(&self, args: &[&str]) -> Result<String> {
        run(Command::new("redis-cli").args(["-p", &self.port.to_string()]).args(args), "redis-cli")
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL for idmint.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.kill();
        self.reaper.finish();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "in tests, a panicking unwrap is a failed assertion")]

    use super::*;
    use crate::skip::{NO_MARIADB, NO_POSTGRES, NO_REDIS, skip};

    /// A server dropped is gone when the drop returns: its port refuses, its directory is
    /// removed.
    #[test]
    fn a_dropped_server_leaves_nothing_behind() {
        if installed::redis().is_none() {
            return skip(NO_REDIS);
        }
        let redis = PrivateRedis::start().unwrap();
        let (port, dir) = (redis.port(), redis.dir.clone());
        assert!(dir.exists() && listens(port));
        drop(redis);
        assert!(!dir.exists(), "{} is left", dir.display());
        assert!(!listens(port), "port {port} still answers");
    }

    /// When the process lets go of a reaper's pipe without dropping the server (a `static`,
    /// a test process that ends or is killed), the reaper stops the server and removes its
    /// directory: here the pipe is closed by hand and the server's drop is never run.
    #[test]
    fn each_reaper_stops_its_server_when_the_pipe_closes() {
        if installed::redis().is_some() {
            let mut redis = PrivateRedis::start().unwrap();
            let child = redis.child.take();
            let (port, dir) = (redis.port(), redis.dir.clone());
            abandon(&mut redis.reaper, child, port, &dir);
            std::mem::forget(redis);
        } else {
            skip(NO_REDIS);
        }
        if installed::mariadb().is_some() {
            let mut db = PrivateMariaDb::start().unwrap();
            let child = db.child.take();
            let (port, dir) = (db.port(), db.dir.clone());
            abandon(&mut db.reaper, child, port, &dir);
            std::mem::forget(db);
        } else {
            skip(NO_MARIADB);
        }
        if installed::postgres_bin().is_some() {
            let mut pg = PrivatePostgres::start().unwrap();
            pg.running = false;
            let (port, dir) = (pg.port(), pg.dir.clone());
            abandon(&mut pg.reaper, None, port, &dir);
            std::mem::forget(pg);
        } else {
            skip(NO_POSTGRES);
        }
    }

    /// Closes the reaper's pipe as a process ending would, waits for the reaper, reaps the
    /// server if it is this process's child, and checks that nothing is left.
    fn abandon(reaper: &mut Reaper, server: Option<Child>, port: u16, dir: &Path) {
        assert!(dir.exists() && listens(port));
        drop(reaper.lifeline.take());
        reaper.child.wait().unwrap();
        if let Some(mut server) = server {
            server.wait().unwrap();
        }
        assert!(!dir.exists(), "{} is left", dir.display());
        assert!(!listens(port), "port {port} still answers");
    }

    fn listens(port: u16) -> bool {
        TcpStream::connect(("127.0.0.1", port)).is_ok()
    }
}
