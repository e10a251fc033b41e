//! The process's own series for `/metrics`, under the names every Prometheus client library
//! uses (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`,
//! `process_max_fds`, `process_virtual_memory_bytes`, `process_start_time_seconds`,
//! `process_threads`), so the dashboards and alerts written for them work unchanged.
//!
//! Read from Linux's `/proc` at scrape time (a few small files, no dependency); on other
//! systems the series are absent. The numbers are the kernel's own: CPU time in clock ticks
//! of `USER_HZ` (100 per second on every Linux architecture: the kernel converts to it for
//! `/proc`), resident memory from `VmRSS` (so the page size does not matter).
//!
//! This file reads the process's own state only; it decides nothing.

use std::fmt::Write as _;

/// Clock ticks per second in `/proc/self/stat` (`USER_HZ`, what `sysconf(_SC_CLK_TCK)`
/// answers on Linux).
const USER_HZ: f64 = 100.0;

/// What the kernel says of this process now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ProcessStats {
    /// User and system CPU time, seconds.
    pub(crate) cpu_seconds: f64,
    /// Resident memory, bytes.
    pub(crate) resident_bytes: u64,
    /// Virtual memory, bytes.
    pub(crate) virtual_bytes: u64,
    /// Open file descriptors (sockets included).
    pub(crate) open_fds: u64,
    /// The soft limit on open file descriptors (`None`: unlimited).
    pub(crate) max_fds: Option<u64>,
    /// When the process started, seconds since the Unix epoch.
    pub(crate) start_time_seconds: f64,
    /// Threads.
    pub(crate) threads: u64,
}

/// Appends the process series to a scrape's `out`; nothing where `/proc` cannot be read.
pub(crate) fn render(out: &mut String) {
    let Some(stats) = read() else { return };
    let mut family = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n");
    };
    family(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        stats.cpu_seconds,
    );
    family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        stats.resident_bytes as f64,
    );
    family(
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        stats.virtual_bytes as f64,
    );
    family("process_open_fds", "gauge", "Number of open file descriptors.", stats.open_fds as f64);
    if let Some(max) = stats.max_fds {
        family("process_max_fds", "gauge", "Maximum number of open file descriptors.", max as f64);
    }
    family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
        stats.start_time_seconds,
    );
    family(
        "process_threads",
        "gauge",
        "Number of OS threads in the process.",
        stats.threads as f64,
    );
}

/// The process's numbers from `/proc`, or `None` where it cannot be read (not Linux, or
/// `/proc` not mounted).
pub(crate) fn read() -> Option<ProcessStats> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let boot = std::fs::read_to_string("/proc/stat").ok()?;
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    parse(&stat, &status, &limits, &boot, open_fds)
}

/// The numbers out of the files' texts (`open_fds` counted apart).
fn parse(
    stat: &str,
    status: &str,
    limits: &str,
    boot: &str,
    open_fds: u64,
) -> Option<ProcessStats> {
    // The command name (field 2) is in parentheses and may hold spaces or parentheses: the
    // fields that follow start after the last `)`, with the state (field 3).
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 1..)?.split_whitespace().collect();
    let field = |n: usize| -> Option<u64> { fields.get(n.checked_sub(3)?)?.parse().ok() };
    let ticks = field(14)? + field(15)?;
    let start_ticks = field(22)?;
    let virtual_bytes = field(23)?;
    // The first number after `key` on the line of `text` that starts with it: `VmRSS:\t10240
    // kB`, `Max open files            1024                 1048576              files`.
    let number_after = |text: &str, key: &str| -> Option<u64> {
        let line = text.lines().find(|line| line.starts_with(key))?;
        line[key.len()..].split_whitespace().next()?.parse().ok()
    };
    let boot_seconds: u64 = boot
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())?;
    let max_fds = number_after(limits, "Max open files");
    Some(ProcessStats {
        cpu_seconds: ticks as f64 / USER_HZ,
        resident_bytes: number_after(status, "VmRSS:")? * 1024,
        virtual_bytes,
        open_fds,
        max_fds,
        start_time_seconds: boot_seconds as f64 + start_ticks as f64 / USER_HZ,
        threads: number_after(status, "Threads:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_spaces_and_parentheses_in_the_name_parses() {
        let stat = "4242 (idmint (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 250 50 0 0 20 0 \
                    7 0 123456 104857600 2560 18446744073709551615";
        let status = "Name:\tidmint\nThreads:\t7\nVmRSS:\t   10240 kB\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 1048576              files\n";
        let boot = "cpu  1 2 3\nbtime 1700000000\nprocesses 9\n";
        let stats = parse(stat, status, limits, boot, 12).expect("parses");
        assert_eq!(stats.cpu_seconds, 3.0);
        assert_eq!(stats.resident_bytes, 10 * 1024 * 1024);
        assert_eq!(stats.virtual_bytes, 104_857_600);
        assert_eq!(stats.open_fds, 12);
        assert_eq!(stats.max_fds, Some(1024));
        assert_eq!(stats.start_time_seconds, 1_700_000_000.0 + 1234.56);
        assert_eq!(stats.threads, 7);
        let unlimited = limits.replace("1024 ", "unlimited ");
        assert_eq!(parse(stat, status, &unlimited, boot, 12).unwrap().max_fds, None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_numbers_follow_what_the_process_does() {
        let before = read().expect("/proc is readable");
        // Open files: the count follows.
        let files: Vec<std::fs::File> =
            (0..20).map(|_| std::fs::File::open("/proc/self/stat").unwrap()).collect();
        let opened = read().unwrap();
        assert!(opened.open_fds >= before.open_fds + 20, "{before:?} -> {opened:?}");
        drop(files);
        // Memory touched: resident memory follows.
        let block = vec![1_u8; 64 << 20];
        let touched = read().unwrap();
        assert!(touched.resident_bytes >= before.resident_bytes + (48 << 20), "{touched:?}");
        drop(block);
        // CPU burnt: CPU time follows (a quarter second of work, ticks are 10 ms).
        let spin = std::time::Instant::now();
        let mut x = 0_u64;
        while spin.elapsed() < std::time::Duration::from_millis(250) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        let busy = read().unwrap();
        assert!(busy.cpu_seconds >= before.cpu_seconds + 0.1, "{before:?} -> {busy:?}");
        // Started a moment ago: since boot, the process began within the last hour and not
        // after now (the machine's uptime; no wall clock read).
        let boot = std::fs::read_to_string("/proc/stat").unwrap();
        let btime: f64 =
            boot.lines().find_map(|l| l.strip_prefix("btime ")).unwrap().trim().parse().unwrap();
        let uptime: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let since_boot = busy.start_time_seconds - btime;
        assert!(since_boot <= uptime + 1.0 && since_boot > uptime - 3600.0, "{busy:?} {uptime}");
        assert!(busy.threads >= 1 && busy.max_fds.is_none_or(|max| max >= busy.open_fds));
    }
}
