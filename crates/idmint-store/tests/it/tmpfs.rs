//! A small private tmpfs for tests that must run out of disk space for real: mounted at a
//! fresh temporary directory, filled on demand, unmounted when dropped (also when the test
//! panics). Mounting needs root, which CI has; elsewhere the test fails saying so, unless
//! `IDMINT_TEST_SKIP_TMPFS` is set, in which case it is skipped (recorded for the run's
//! summary). Shared with the `idmint` crate's tests.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// Set to skip (recorded for the run's summary) the tests that need to mount a tmpfs.
pub const SKIP_VAR: &str = "IDMINT_TEST_SKIP_TMPFS";

/// A mounted tmpfs; unmounted on drop.
pub struct Tmpfs {
    dir: TempDir,
    filler: PathBuf,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size_kib` KiB. `None` (after a line on stderr) when mounting is
    /// not possible and [`SKIP_VAR`] is set; without it, that panics with the reason.
    pub fn mount(size_kib: u64) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_kib}k,mode=0700"), "tmpfs"])
            .arg(dir.path())
            .output();
        let failure = match output {
            Ok(out) if out.status.success() => None,
            // On one line: mount's message spans two.
            Ok(out) => Some(
                String::from_utf8_lossy(&out.stderr)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            Err(e) => Some(format!("cannot run mount: {e}")),
        };
        if let Some(reason) = failure {
            if std::env::var_os(SKIP_VAR).is_some() {
                eprintln!("cannot mount a tmpfs: {reason}");
                idmint_testkit::skip(idmint_testkit::skip::NO_TMPFS);
                return None;
            }
            panic!(
                "this test mounts a {size_kib} KiB tmpfs to fill a disk for real, which needs \
                 root (CI runs as root): {reason}. Run it as root, or set {SKIP_VAR}=1 to skip it"
            );
        }
        let filler = dir.path().join("filler");
        Some(Tmpfs { dir, filler })
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a filler file until the disk is full; returns its size in bytes.
    pub fn fill(&self) -> u64 {
        let mut file = File::options().create(true).append(true).open(&self.filler).unwrap();
        let chunk = [0xA5u8; 4096];
        let mut written = 0;
        // Bounded by the mount's size: every chunk takes a page until none is left.
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(n) => written += n as u64,
                Err(e) if e.raw_os_error() == Some(28) => break, // ENOSPC
                Err(e) => panic!("filling the tmpfs: {e}"),
            }
        }
        let _ = file.sync_all();
        written
    }

    /// Deletes the filler file: the space it took is free again.
    pub fn free(&self) {
        std::fs::remove_file(&self.filler).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = Command::new("umount").arg(self.dir.path()).status();
        if !unmounted.is_ok_and(|s| s.success()) {
            // Something still holds a file open: detach now, freed once it closes.
            let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
        }
    }
}
