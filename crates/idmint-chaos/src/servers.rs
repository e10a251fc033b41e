//! Private database servers: a MariaDB, a PostgreSQL and a Redis of the harness's own, each
//! on a free loopback port with its own data directory, started from the installed Debian
//! packages and removed on drop. The shared servers of the machine are never touched: the
//! faults (stop, kill, flush, restore) hit these only.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

/// How long a server may take to accept connections after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Waits until `port` accepts TCP connections, or `child` exits, or the start timeout.
fn wait_for_port(port: u16, child: Option<&mut Child>, what: &str, log: &Path) -> Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let mut child = child;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
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

/// The last lines of a log file, for error messages.
pub fn tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
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

/// A `mariadbd` of the harness's own: `mariadb-install-db` into a temporary directory, then
/// the server on a free port, root without a password, binary log off.
pub struct PrivateMariaDb {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl PrivateMariaDb {
    /// Initialises a data directory and starts the server.
    pub fn start() -> Result<PrivateMariaDb> {
        let dir = tempfile::Builder::new().prefix("idmint-chaos-mariadb").tempdir()?;
        let mut install = Command::new("mariadb-install-db");
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.path().join("data").display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if is_root() {
            install.arg("--user=root");
        }
        run(&mut install, "mariadb-install-db (Debian package mariadb-server)")?;
        let mut db = PrivateMariaDb { child: None, port: free_port()?, dir };
        db.launch()?;
        Ok(db)
    }

    /// Starts `mariadbd` on the same port and data directory.
    pub fn launch(&mut self) -> Result<()> {
        let d = self.dir.path();
        let log = d.join("mariadbd.log");
        let mut command = Command::new("mariadbd");
        command
            .arg("--no-defaults")
            .arg(format!("--datadir={}", d.join("data").display()))
            .arg(format!("--socket={}", d.join("mariadbd.sock").display()))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve", "--skip-log-bin"])
            .args(["--innodb-buffer-pool-size=32M", "--max-connections=500"])
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(&log)?);
        if is_root() {
            command.arg("--user=root");
        }
        let mut child = command.spawn().context("starting mariadbd (Debian mariadb-server)")?;
        wait_for_port(self.port, Some(&mut child), "mariadbd", &log)?;
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

    /// The URL of database `db` for idmint.
    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.port)
    }

    /// Runs SQL with the `mariadb` client.
    pub fn sql(&self, db: &str, sql: &str) -> Result<String> {
        run(self.client("mariadb", db).args(["-N", "-e", sql]), "mariadb client")
    }

    /// A logical backup of table `table` of database `db` (`mariadb-dump`, one consistent
    /// snapshot), written as one `REPLACE` of every row: restoring it puts each row back as it
    /// was, atomically, while nodes keep using the table.
    pub fn dump(&self, db: &str, table: &str) -> Result<PathBuf> {
        let out = self
            .client("mariadb-dump", "")
            .args(["--single-transaction", "--no-create-info", "--replace", "--skip-add-locks"])
            .args([db, table])
            .output()?;
        ensure!(out.status.success(), "mariadb-dump: {}", String::from_utf8_lossy(&out.stderr));
        static DUMPS: AtomicU32 = AtomicU32::new(0);
        let n = DUMPS.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.path().join(format!("{db}-{table}-{n}.sql"));
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
    }
}

/// A PostgreSQL of the harness's own: `initdb` into a temporary directory, `pg_ctl` to start
/// and stop it (as the `postgres` user when the harness runs as root), trust auth.
pub struct PrivatePostgres {
    bin: PathBuf,
    port: u16,
    dir: tempfile::TempDir,
    running: bool,
}

impl PrivatePostgres {
    /// Initialises a cluster and starts it.
    pub fn start() -> Result<PrivatePostgres> {
        let bin = postgres_bin()?;
        let dir = tempfile::Builder::new().prefix("idmint-chaos-pg").tempdir()?;
        if is_root() {
            run(Command::new("chown").args(["-R", "postgres"]).arg(dir.path()), "chown postgres")?;
        }
        let mut pg = PrivatePostgres { bin, port: free_port()?, dir, running: false };
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
            self.dir.path().display()
        );
        let (data, log) = (self.data(), self.dir.path().join("postgres.log"));
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
        self.dir.path().join("data")
    }

    fn as_owner(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if is_root() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        }
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
                .args(["-m", "immediate", "stop"])
                .output();
        }
    }
}

/// The newest installed PostgreSQL's `bin` directory (`/usr/lib/postgresql/N/bin`).
fn postgres_bin() -> Result<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .context("PostgreSQL is not installed (Debian package postgresql)")?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| bin.join("pg_ctl").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).context("no pg_ctl under /usr/lib/postgresql/*/bin")
}

/// A `redis-server` of the harness's own, nothing saved to disk: a restart loses every key.
pub struct PrivateRedis {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl PrivateRedis {
    /// Starts the server on a free port.
    pub fn start() -> Result<PrivateRedis> {
        let dir = tempfile::Builder::new().prefix("idmint-chaos-redis").tempdir()?;
        let mut redis = PrivateRedis { child: None, port: free_port()?, dir };
        redis.launch()?;
        Ok(redis)
    }

    /// Starts `redis-server` on the same port.
    pub fn launch(&mut self) -> Result<()> {
        let log = self.dir.path().join("redis.log");
        let mut child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--dir"])
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .stdout(Stdio::null())
            .spawn()
            .context("starting redis-server (Debian package redis-server)")?;
        wait_for_port(self.port, Some(&mut child), "redis-server", &log)?;
        self.child = Some(child);
        Ok(())
    }

    /// kill -9: every key is gone (nothing is saved).
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// `FLUSHALL`.
    pub fn flush(&self) -> Result<()> {
        run(
            Command::new("redis-cli").args(["-p", &self.port.to_string(), "FLUSHALL"]),
            "redis-cli",
        )?;
        Ok(())
    }

    /// The URL for idmint.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
