//! The shutdown's give-back: every served tag's unissued tail returned to the store, in
//! batches of at most `GIVE_BACK_BATCH_MAX` tags (one store call each, one transaction on
//! SQLite), at most `GIVE_BACK_CONCURRENCY_MAX` batches at once, within the configured bound
//! (`SegmentConfig::give_back`, at most `GIVE_BACK_MS_MAX`), and one summary line in the
//! log.
//!
//! What the bound cuts off is only skipped, never served again: a tail is given back by a
//! compare-and-set on the store first, and its high-water mark is lowered only after that
//! answered `true`. Cut off before the store applied it, the row keeps this node's `max_id`
//! (the tail is a gap); cut off after, the mark stays above the tail, so this node's next
//! start jumps past it (a gap again). Another node never saw those ids.
//!
//! It must not hand out ids or touch a buffer beyond taking its tail (`tail_to_give_back`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use idmint_core::IdRange;
use idmint_core::limits::{GIVE_BACK_BATCH_MAX, GIVE_BACK_CONCURRENCY_MAX};
use idmint_store::MaxIdChange;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::generator::{Shared, TagGenerator};

/// One batch: each generator with the tail it gives back.
type Batch = Vec<(Arc<TagGenerator>, IdRange)>;

/// Gives every generator's unissued tail back (each generator is frozen and its refills
/// have landed), within `shared.config.give_back()`, and logs one line saying how it went.
pub(crate) async fn give_back_all(shared: &Arc<Shared>, generators: &[Arc<TagGenerator>]) {
    let started = Instant::now();
    let tails: Batch =
        generators.iter().filter_map(|g| Some((Arc::clone(g), g.tail_to_give_back()?))).collect();
    if tails.is_empty() {
        return;
    }
    let ids: u64 = tails.iter().map(|(_, tail)| tail.len()).sum();
    if !shared.store.gives_back() {
        // Not another node's doing: this store's ids are consumed when taken.
        tracing::info!(tags = tails.len(), ids, store = %shared.store.describe(), "unissued ids not given back: this store (Flicker tickets or several databases) takes no ids back; they are skipped");
        return;
    }
    let tags = tails.len() as u64;
    let mut batches: VecDeque<Batch> = VecDeque::new();
    let mut tails = tails.into_iter().peekable();
    while tails.peek().is_some() {
        batches.push_back(tails.by_ref().take(GIVE_BACK_BATCH_MAX).collect());
    }
    let workers_count = batches.len().min(GIVE_BACK_CONCURRENCY_MAX);
    let queue = Arc::new(Mutex::new(batches));
    let tally = Arc::new(Tally::default());
    let mut workers = JoinSet::new();
    for _ in 0..workers_count {
        workers.spawn(work(Arc::clone(shared), Arc::clone(&queue), Arc::clone(&tally)));
    }
    let deadline = started + shared.config.give_back();
    let all_done = async { while workers.join_next().await.is_some() {} };
    let in_time = tokio::time::timeout_at(deadline, all_done).await.is_ok();
    // Past the bound: the workers are stopped where they are (see the file's comment).
    workers.abort_all();
    let given_back = tally.given_back.load(Ordering::Acquire);
    let moved_on = tally.moved_on.load(Ordering::Acquire);
    let failed = tally.failed.load(Ordering::Acquire);
    // Each tag is counted once at most: the rest were cut off.
    let cut_off = tags.saturating_sub(given_back + moved_on + failed);
    let ids_given_back = tally.ids.load(Ordering::Acquire);
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let bound_ms = shared.config.give_back().as_millis() as u64;
    if in_time && failed == 0 {
        tracing::info!(
            tags,
            given_back,
            ids_given_back,
            moved_on,
            cut_off,
            elapsed_ms,
            "unissued ids given back to the store"
        );
    } else {
        tracing::warn!(
            tags,
            given_back,
            ids_given_back,
            moved_on,
            failed,
            cut_off,
            elapsed_ms,
            bound_ms,
            "unissued ids given back to the store in part: the ids of the tags failed or cut \
             off by the bound are skipped, never served again"
        );
    }
}

/// What the workers did, counted in tags (and ids given back).
#[derive(Default)]
struct Tally {
    /// Tags whose tail the store took back.
    given_back: AtomicU64,
    /// Ids the store took back.
    ids: AtomicU64,
    /// Tags another node allocated since (or whose row is gone): nothing to give back.
    moved_on: AtomicU64,
    /// Tags of batches the store refused or failed.
    failed: AtomicU64,
}

/// Takes batches off `queue` until it is empty: the store's compare-and-set of the batch,
/// then the marks of the tails it took back lowered in one write.
async fn work(shared: Arc<Shared>, queue: Arc<Mutex<VecDeque<Batch>>>, tally: Arc<Tally>) {
    loop {
        let batch = queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front();
        let Some(batch) = batch else { return };
        let changes: Vec<MaxIdChange> = batch
            .iter()
            .map(|(g, tail)| MaxIdChange {
                tag: g.tag().clone(),
                expected: tail.end(),
                new: tail.start(),
            })
            .collect();
        let applied = match shared.store.compare_and_set_max_ids(&changes).await {
            Ok(applied) if applied.len() == batch.len() => applied,
            Ok(applied) => {
                tracing::warn!(
                    tags = batch.len(),
                    answers = applied.len(),
                    "unissued ids not given back: the store answered a batch with the wrong number of answers"
                );
                tally.failed.fetch_add(batch.len() as u64, Ordering::AcqRel);
                continue;
            }
            Err(error) => {
                tracing::warn!(tags = batch.len(), %error, "unissued ids not given back");
                tally.failed.fetch_add(batch.len() as u64, Ordering::AcqRel);
                continue;
            }
        };
        let mut lowered = Vec::new();
        for ((generator, tail), applied) in batch.iter().zip(&applied) {
            if *applied {
                lowered.push((generator.tag().clone(), tail.start()));
                tally.ids.fetch_add(tail.len(), Ordering::AcqRel);
            }
        }
        if let Some(marks) = &shared.high_water
            && let Err(error) = marks.lower_many(lowered.clone()).await
        {
            // The old, higher marks stay: the next start jumps past the given-back ids
            // instead of serving them. Wasteful, never a repeat.
            tracing::warn!(tags = lowered.len(), %error, "high-water marks not lowered");
        }
        tally.given_back.fetch_add(lowered.len() as u64, Ordering::AcqRel);
        for ((generator, _), applied) in batch.iter().zip(&applied) {
            if !applied {
                generator.leave_store_above_mark().await;
                tally.moved_on.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
}
