//! A `redis-server` of a test's own (own port, own directory, `--save ""`), for tests that
//! flush, kill or restart Redis: the shared server is never touched. Shared by the `idmint`
//! and `idmint-cli` tests (`#[path]`).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of the test's own, on a free port with its own directory; killed on drop.
pub struct PrivateRedis {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl PrivateRedis {
    pub fn start() -> PrivateRedis {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut redis = PrivateRedis { child: None, port, dir: tempfile::TempDir::new().unwrap() };
        redis.launch();
        redis
    }

    /// Starts the server on the same port and directory (it loads `dump.rdb` if there).
    pub fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "no", "--dir", path(self.dir.path())])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server is installed (Debian package redis-server)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "private redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// kill -9: whatever was not in the last snapshot is gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn cli(&self, args: &[&str]) {
        let status = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "redis-cli {args:?}");
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}
