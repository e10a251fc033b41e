//! The wall clock the time-based generators read, injectable so tests and simulations can
//! step it forward and back ([`ManualClock`]) without touching the machine's clock.
//!
//! Only the snowflake family reads it. The segment engine measures durations with tokio's
//! monotonic clock instead, which a wall-clock step cannot disturb.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch; 0 for a clock set before it.
    fn now_ms(&self) -> u64;
}

/// The machine's clock (`SystemTime`).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that moves only when told to: forward, or back (a clock step, as NTP or an
/// operator makes one).
#[derive(Debug)]
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    /// A clock reading `ms`.
    pub fn new(ms: u64) -> ManualClock {
        ManualClock { ms: AtomicU64::new(ms) }
    }

    /// A clock reading the machine's time now.
    pub fn at_system_time() -> ManualClock {
        ManualClock::new(SystemClock.now_ms())
    }

    /// Sets the reading to `ms`, forward or back.
    pub fn set(&self, ms: u64) {
        self.ms.store(ms, Ordering::SeqCst);
    }

    /// Moves the reading forward by `ms`.
    pub fn advance(&self, ms: u64) {
        self.ms.fetch_add(ms, Ordering::SeqCst);
    }

    /// Moves the reading back by `ms` (not below 0).
    pub fn step_back(&self, ms: u64) {
        let _ = self
            .ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(v.saturating_sub(ms)));
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::SeqCst)
    }
}

/// The machine's clock is also the store's clock of a memory or SQLite store on this machine.
impl idmint_store::StoreClock for SystemClock {
    fn now_ms(&self) -> u64 {
        Clock::now_ms(self)
    }
}

/// A manual clock as a store's clock: tests move a memory or SQLite store's time with it, the
/// same clock as a node's or another.
impl idmint_store::StoreClock for ManualClock {
    fn now_ms(&self) -> u64 {
        Clock::now_ms(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_manual_clock_moves_only_when_told() {
        let clock = ManualClock::new(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.advance(5);
        clock.step_back(10);
        assert_eq!(clock.now_ms(), 995);
        clock.step_back(5_000);
        assert_eq!(clock.now_ms(), 0);
        clock.set(7);
        assert_eq!(clock.now_ms(), 7);
        assert!(SystemClock.now_ms() > 1_700_000_000_000, "the machine's clock is in ms");
    }
}
