//! The cached snowflake generator (Baidu uid-generator's CachedUidGenerator): a fixed ring of
//! pre-made ids, filled a whole unit of borrowed time at a time, so a take is one atomic step
//! on the ring and never reads the clock.
//!
//! Borrowed time is the [`Snowflake`]'s own state: a unit is reserved under its lock (the
//! first unit above the last one issued, or the clock), only within the persisted time mark
//! and at most `max_lead_ms` ahead of the wall clock, so cached and uncached ids of one
//! generator never collide and a restart never reuses borrowed time. A background task
//! refills the ring when it falls below half full; a take that finds the ring empty fills
//! one unit itself instead of being rejected. A take is refused only when the lead bound or
//! the mark stops borrowing, i.e. when demand outruns the layout's limit for longer than the
//! lead.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use idmint_core::Ring;
use idmint_core::limits::RING_PADDING_PERMILLE_DEFAULT;
use tokio_util::sync::CancellationToken;

use crate::snowflake::{Snowflake, SnowflakeError};

/// Longest a take on an empty ring waits for borrowing to resume before it is refused.
pub const TAKE_WAIT_MS_MAX: u64 = 1_000;

/// Default ring capacity (ids).
pub const CACHED_RING_CAPACITY_DEFAULT: u64 = 1 << 16;

/// A ring of pre-made snowflake ids over a [`Snowflake`].
#[derive(Debug)]
pub struct CachedSnowflake {
    generator: Arc<Snowflake>,
    ring: Ring,
    max_lead_ms: u64,
    wake: tokio::sync::Notify,
    /// Held by whoever is putting a unit (the filler task or a taker on an empty ring): one
    /// putter at a time keeps units whole and in order.
    filling: std::sync::Mutex<()>,
    rejected: AtomicU64,
    cancel: CancellationToken,
}

impl CachedSnowflake {
    /// A ring of `capacity` ids (a power of two) over `generator`, borrowing at most
    /// `max_lead_ms` ahead of the clock, with its filler task spawned on the current runtime.
    pub fn start(
        generator: Arc<Snowflake>,
        capacity: u64,
        max_lead_ms: u64,
    ) -> Result<Arc<CachedSnowflake>, SnowflakeError> {
        let ring = Ring::new(capacity).map_err(|e| SnowflakeError::Config(e.to_string()))?;
        let cached = Arc::new(CachedSnowflake {
            generator,
            ring,
            max_lead_ms,
            wake: tokio::sync::Notify::new(),
            filling: std::sync::Mutex::new(()),
            rejected: AtomicU64::new(0),
            cancel: CancellationToken::new(),
        });
        let weak = Arc::downgrade(&cached);
        let cancel = cached.cancel.clone();
        tokio::spawn(async move {
            loop {
                let Some(cached) = weak.upgrade() else { return };
                if let Err(error) = cached.fill().await {
                    tracing::warn!(%error, "cached snowflake ring not filled");
                }
                // Held for at most the 10 ms wait: dropping the last other handle still
                // stops the task at the next round.
                tokio::select! {
                    () = cancel.cancelled() => return,
                    () = cached.wake.notified() => {}
                    () = tokio::time::sleep(Duration::from_millis(10)) => {}
                }
            }
        });
        Ok(cached)
    }

    /// The next id: one atomic step on the ring; on an empty ring the caller fills one unit.
    /// `None` only when borrowing is stopped by the lead bound or the time mark (counted).
    pub fn take(&self) -> Result<Option<u64>, SnowflakeError> {
        if let Some(id) = self.ring.take() {
            if self.ring.needs_fill(RING_PADDING_PERMILLE_DEFAULT) {
                self.wake.notify_one();
            }
            return Ok(Some(id));
        }
        self.take_slow()
    }

    /// A take that found no id: the ring is empty, or a put is still writing the front slot.
    /// One thread at a time fills a unit in place (the others take what it puts); a unit is
    /// reserved only when the whole of it fits, so no borrowed time is wasted. If borrowing
    /// is stopped (the mark being moved), the filler gets a bounded moment.
    fn take_slow(&self) -> Result<Option<u64>, SnowflakeError> {
        let unit_ids = self.generator.layout().max_sequence() + 1;
        let deadline = std::time::Instant::now() + Duration::from_millis(TAKE_WAIT_MS_MAX);
        loop {
            if let Some(id) = self.ring.take() {
                return Ok(Some(id));
            }
            let room = self.ring.capacity() - self.ring.len();
            match if room >= unit_ids { self.fill_unit_alone()? } else { None } {
                Some(true) => continue,
                Some(false) => {
                    // Sleep rather than spin: on a busy machine the filler (which moves the
                    // mark) needs this core.
                    self.wake.notify_one();
                    std::thread::sleep(Duration::from_micros(100));
                }
                // Another thread is putting ids: they arrive within nanoseconds each.
                None => std::thread::yield_now(),
            }
            if std::time::Instant::now() >= deadline {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                self.wake.notify_one();
                return Ok(None);
            }
        }
    }

    /// Takes refused so far.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }

    /// Ids in the ring now.
    pub fn len(&self) -> u64 {
        self.ring.len()
    }

    /// Whether the ring is empty now.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Reserves one unit and puts its ids in the ring; `false` when no unit may be borrowed
    /// now. Ids of the unit that do not fit are dropped (wasted, never reused).
    fn fill_unit(&self) -> Result<bool, SnowflakeError> {
        let Some((unit, worker)) = self.generator.reserve_unit(self.max_lead_ms)? else {
            return Ok(false);
        };
        let layout = self.generator.layout();
        let ids = layout
            .ids_of_unit(worker, unit)
            .ok_or_else(|| SnowflakeError::Exhausted(layout.to_string()))?;
        for id in ids {
            if !self.ring.put(id) {
                break;
            }
        }
        Ok(true)
    }

    /// Fills the ring up while a whole unit fits, extending the time mark when borrowing
    /// reaches it.
    async fn fill(&self) -> Result<(), SnowflakeError> {
        let unit_ids = self.generator.layout().max_sequence() + 1;
        if self.generator.mark_due() {
            self.generator.extend_mark_now().await?;
        }
        while self.ring.capacity() - self.ring.len() >= unit_ids {
            if self.generator.mark_due() {
                self.generator.extend_mark_now().await?;
            }
            match self.fill_unit_alone()? {
                Some(true) => {}
                // A taker is putting a unit: let it finish.
                None => tokio::task::yield_now().await,
                Some(false) => {
                    // The mark (or the lead) stops borrowing: move the mark, then retry once.
                    self.generator.extend_mark_now().await?;
                    if self.fill_unit_alone()? == Some(false) {
                        return Ok(());
                    }
                }
            }
        }
        Ok(())
    }

    /// [`Self::fill_unit`] unless another thread is putting a unit (`None`).
    fn fill_unit_alone(&self) -> Result<Option<bool>, SnowflakeError> {
        let Ok(_filling) = self.filling.try_lock() else { return Ok(None) };
        self.fill_unit().map(Some)
    }
}

impl Drop for CachedSnowflake {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}
