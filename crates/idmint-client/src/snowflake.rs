//! The local cache of snowflake ids: batches fetched with NextSnowflakeIds, handed out one at
//! a time, fetched again in the background when the cache runs low.
//!
//! The batch size adapts to use within [`SNOWFLAKE_BATCH_MIN`]..=[`SNOWFLAKE_BATCH_MAX`]: a
//! batch used up within a quarter of [`SNOWFLAKE_TTL_MS`] doubles the next one, a batch that
//! expires unused halves it. Ids older than the TTL are dropped unserved, so a snowflake id's
//! time stays close to when it is handed out. At most two batches are held, and one fetch
//! runs at a time. This file must not pick servers (`endpoints.rs` does).

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::endpoints::Endpoints;
use crate::error::ClientError;
use crate::limits::{SNOWFLAKE_BATCH_MAX, SNOWFLAKE_BATCH_MIN, SNOWFLAKE_TTL_MS};
use crate::wire::NextSnowflake;

/// Batches held at once: the one being served and the one fetched ahead.
const BATCHES_MAX: usize = 2;

/// Snowflake ids fetched ahead of use.
#[derive(Debug)]
pub(crate) struct SnowflakeCache {
    state: Mutex<CacheState>,
    /// One fetch at a time (the background prefetch or a caller that found the cache empty).
    fetching: tokio::sync::Mutex<()>,
}

#[derive(Debug)]
struct CacheState {
    batches: VecDeque<Batch>,
    /// The size of the next fetch.
    batch: u64,
    last_fetch: Option<Instant>,
    /// A batch expired with ids unserved since the last fetch.
    expired_unused: bool,
    /// A background prefetch is under way.
    prefetching: bool,
}

#[derive(Debug)]
struct Batch {
    fetched_at: Instant,
    ids: std::vec::IntoIter<u64>,
}

impl SnowflakeCache {
    pub(crate) fn new() -> SnowflakeCache {
        SnowflakeCache {
            state: Mutex::new(CacheState {
                batches: VecDeque::with_capacity(BATCHES_MAX),
                batch: SNOWFLAKE_BATCH_MIN,
                last_fetch: None,
                expired_unused: false,
                prefetching: false,
            }),
            fetching: tokio::sync::Mutex::new(()),
        }
    }

    /// The next cached id, and whether a background prefetch should start now (the caller
    /// starts it; the flag is set, so exactly one caller is told).
    pub(crate) fn take(&self) -> (Option<u64>, bool) {
        let mut state = self.state();
        let id = state.pop();
        let remaining: u64 = state.batches.iter().map(|b| b.ids.len() as u64).sum();
        let due =
            !state.prefetching && state.batches.len() < BATCHES_MAX && remaining <= state.batch / 4;
        if due {
            state.prefetching = true;
        }
        (id, due)
    }

    /// The background prefetch: one fetch, unless the cache filled meanwhile.
    pub(crate) async fn prefetch(&self, endpoints: &Endpoints, deadline: Duration) {
        let _one = self.fetching.lock().await;
        let needed = {
            let state = self.state();
            let remaining: u64 = state.batches.iter().map(|b| b.ids.len() as u64).sum();
            state.batches.len() < BATCHES_MAX && remaining <= state.batch / 4
        };
        if needed && let Err(error) = self.fetch(endpoints, Instant::now() + deadline).await {
            tracing::debug!(%error, "snowflake prefetch failed; the next request fetches");
        }
        self.state().prefetching = false;
    }

    /// The next id, fetching a batch when the cache is empty (waiting for a fetch under way
    /// first), within `deadline`.
    pub(crate) async fn next_waiting(
        &self,
        endpoints: &Endpoints,
        deadline: Duration,
    ) -> Result<u64, ClientError> {
        let deadline = Instant::now() + deadline;
        let Ok(_one) = tokio::time::timeout_at(deadline, self.fetching.lock()).await else {
            return Err(ClientError::Unavailable {
                reason: "no snowflake ids arrived in time".to_string(),
            });
        };
        if let Some(id) = self.state().pop() {
            return Ok(id);
        }
        self.fetch(endpoints, deadline).await?;
        self.state().pop().ok_or_else(|| ClientError::Unavailable {
            reason: "the snowflake batch expired before use".to_string(),
        })
    }

    /// Fetches one batch, sized by how the last one was used. Call with `fetching` held.
    async fn fetch(&self, endpoints: &Endpoints, deadline: Instant) -> Result<(), ClientError> {
        let count = {
            let mut state = self.state();
            let quick = state
                .last_fetch
                .is_some_and(|at| at.elapsed() < Duration::from_millis(SNOWFLAKE_TTL_MS / 4));
            if state.expired_unused {
                state.batch = (state.batch / 2).max(SNOWFLAKE_BATCH_MIN);
            } else if quick {
                state.batch = (state.batch * 2).min(SNOWFLAKE_BATCH_MAX);
            }
            state.expired_unused = false;
            state.last_fetch = Some(Instant::now());
            state.batch
        };
        let (ids, _server) = endpoints.call(&NextSnowflake { count }, deadline).await?;
        let mut state = self.state();
        if state.batches.len() == BATCHES_MAX {
            state.batches.pop_front();
        }
        state.batches.push_back(Batch { fetched_at: Instant::now(), ids: ids.into_iter() });
        Ok(())
    }

    fn state(&self) -> MutexGuard<'_, CacheState> {
        // Plain data, consistent after every statement.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl CacheState {
    /// The next id of the oldest batch still fresh; drops expired and spent batches.
    fn pop(&mut self) -> Option<u64> {
        let ttl = Duration::from_millis(SNOWFLAKE_TTL_MS);
        loop {
            let batch = self.batches.front_mut()?;
            if batch.fetched_at.elapsed() >= ttl {
                self.expired_unused |= batch.ids.len() > 0;
            } else if let Some(id) = batch.ids.next() {
                return Some(id);
            }
            self.batches.pop_front();
        }
    }
}
