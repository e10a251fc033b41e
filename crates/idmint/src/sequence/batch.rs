//! Coalescing of concurrent takes of one sequence counter on one node: the requests that
//! arrive while a counter call is in flight wait in the counter's [`TakeQueue`], and the next
//! call takes one block for all of them (the sum of their counts), split among them in
//! arrival order by [`split`]. The Redis round trip is then paid per batch, not per request.
//!
//! This file owns the queue and the arithmetic only (no store, no clock): the batch runner
//! that calls the counters lives with the engine (`engine.rs`). Every bound is a named
//! constant: waiters per batch, ids per batch, waiters queued per counter.

use std::collections::VecDeque;
use std::ops::RangeInclusive;
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;

use super::error::SequenceError;

/// Most ids one request may take.
pub const SEQ_COUNT_MAX: u64 = 100_000;
/// Most requests one counter call serves.
pub const SEQ_BATCH_WAITERS_MAX: usize = 1_024;
/// Most ids one counter call takes for a batch (a single request may take
/// [`SEQ_COUNT_MAX`], so a batch always holds at least one).
pub const SEQ_BATCH_IDS_MAX: u64 = 1_000_000;
const _: () = assert!(SEQ_BATCH_IDS_MAX >= SEQ_COUNT_MAX);
/// Most requests that may wait for one counter on one node; past it a request is refused
/// (503) rather than queued without bound.
pub const SEQ_QUEUE_MAX: usize = 16_384;
const _: () = assert!(SEQ_QUEUE_MAX >= SEQ_BATCH_WAITERS_MAX);

/// What a waiting request gets: its numbers (contiguous, increasing) or why not.
pub(crate) type Reply = Result<RangeInclusive<u64>, SequenceError>;

/// One request waiting for numbers of a counter.
#[derive(Debug)]
pub(crate) struct Waiter {
    /// How many numbers it asked for (1..=[`SEQ_COUNT_MAX`]).
    pub(crate) count: u64,
    /// When it stops waiting for room below the ceiling.
    pub(crate) deadline: tokio::time::Instant,
    /// Where its answer goes.
    pub(crate) reply: oneshot::Sender<Reply>,
}

impl Waiter {
    /// Answers the request (a request that went away meanwhile is not asked).
    pub(crate) fn answer(self, reply: Reply) {
        // The receiver is gone only when the request was dropped (its client left): numbers
        // it would have got are a gap, never handed to anyone else.
        let _ = self.reply.send(reply);
    }
}

/// The requests waiting for one counter on this node, and whether a runner serves them.
#[derive(Debug, Default)]
pub(crate) struct TakeQueue {
    state: Mutex<QueueState>,
}

#[derive(Debug, Default)]
struct QueueState {
    pending: VecDeque<Waiter>,
    /// A runner is serving this queue: it takes the next batch when its call returns.
    running: bool,
}

/// Whether the caller of [`TakeQueue::push`] must start a runner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// No runner served the queue: the caller starts one (it is now marked running).
    StartRunner,
    /// A runner is serving the queue and will take this request in a coming batch.
    Queued,
}

impl TakeQueue {
    /// Queues `waiter`, in arrival order; refuses it (handing it back) when
    /// [`SEQ_QUEUE_MAX`] requests already wait.
    pub(crate) fn push(&self, waiter: Waiter) -> Result<Pushed, Waiter> {
        let mut state = self.lock();
        if state.pending.len() >= SEQ_QUEUE_MAX {
            return Err(waiter);
        }
        state.pending.push_back(waiter);
        if state.running {
            return Ok(Pushed::Queued);
        }
        state.running = true;
        Ok(Pushed::StartRunner)
    }

    /// The next batch, oldest first, within [`SEQ_BATCH_WAITERS_MAX`] and
    /// [`SEQ_BATCH_IDS_MAX`]; `None` when nothing waits, and then the runner is done (the
    /// next [`push`](TakeQueue::push) starts a new one).
    pub(crate) fn next_batch(&self) -> Option<Vec<Waiter>> {
        let mut state = self.lock();
        let len = batch_len(state.pending.iter().map(|w| w.count));
        if len == 0 {
            state.running = false;
            return None;
        }
        Some(state.pending.drain(..len).collect())
    }

    /// Ends a runner that stopped before the queue was empty (it panicked, or its task was
    /// dropped with the runtime): the waiting requests are dropped, so each is answered
    /// with an error rather than left waiting, and the next request starts a new runner.
    pub(crate) fn abandon(&self) {
        let mut state = self.lock();
        state.running = false;
        state.pending.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        // Every critical section is one queue update, consistent if interrupted.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// How many of the waiting counts, oldest first, the next batch takes: as many as fit
/// [`SEQ_BATCH_WAITERS_MAX`] and [`SEQ_BATCH_IDS_MAX`], at least one when any waits.
pub(crate) fn batch_len(counts: impl Iterator<Item = u64>) -> usize {
    let mut ids = 0u64;
    let mut len = 0;
    for count in counts.take(SEQ_BATCH_WAITERS_MAX) {
        if len > 0 && ids + count > SEQ_BATCH_IDS_MAX {
            break;
        }
        ids += count;
        len += 1;
    }
    len
}

/// Splits the block `last - sum(counts) + 1 ..= last` among `counts` in order: the first
/// count gets the lowest numbers, each range is contiguous, the ranges are disjoint and
/// cover the block exactly. `None` when the block would start below 1 (a counter that
/// answered less than it was asked for).
pub(crate) fn split(last: u64, counts: &[u64]) -> Option<Vec<RangeInclusive<u64>>> {
    let total: u64 = counts.iter().sum();
    let first = last.checked_sub(total.checked_sub(1)?)?;
    if first == 0 {
        return None;
    }
    let mut offset = 0;
    let ranges = counts
        .iter()
        .map(|&count| {
            // `first + offset + count - 1 <= last`: no overflow.
            let range = first + offset..=first + offset + (count - 1);
            offset += count;
            range
        })
        .collect::<Vec<_>>();
    // Crash before duplicating: the ranges end exactly where the counter said.
    assert!(
        ranges.last().is_some_and(|r| *r.end() == last),
        "a split that does not end at the block's end"
    );
    Some(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn waiter(count: u64) -> (Waiter, oneshot::Receiver<Reply>) {
        let (reply, rx) = oneshot::channel();
        (Waiter { count, deadline: tokio::time::Instant::now(), reply }, rx)
    }

    proptest! {
        /// A seeded simulation of one node's counter: requests of random counts arrive in
        /// random bursts while batches are taken; whatever the interleaving, every request
        /// gets exactly its count of contiguous numbers, no number twice, the numbers of
        /// each batch increase in arrival order and follow the previous batch's, and the
        /// counter moved by the sum of the counts.
        #[test]
        fn batches_hand_every_request_its_own_contiguous_increasing_numbers(
            start in 0u64..1_000_000,
            arrivals in prop::collection::vec(
                (prop::collection::vec(1u64..=SEQ_COUNT_MAX, 0..40), any::<bool>()),
                1..60,
            ),
        ) {
            let queue = TakeQueue::default();
            let mut counter = start;
            let mut receivers = VecDeque::new();
            let mut asked = 0u64;
            let mut served: Vec<(usize, RangeInclusive<u64>)> = Vec::new();
            let mut arrival = 0usize;
            let mut previous_last = start;
            let mut serve = |queue: &TakeQueue, counter: &mut u64,
                             receivers: &mut VecDeque<(usize, u64, oneshot::Receiver<Reply>)>,
                             served: &mut Vec<(usize, RangeInclusive<u64>)>| {
                let Some(batch) = queue.next_batch() else { return Ok(false) };
                prop_assert!(batch.len() <= SEQ_BATCH_WAITERS_MAX);
                let counts: Vec<u64> = batch.iter().map(|w| w.count).collect();
                let total: u64 = counts.iter().sum();
                prop_assert!(total <= SEQ_BATCH_IDS_MAX);
                *counter += total;
                let ranges = split(*counter, &counts).expect("split");
                prop_assert_eq!(*ranges[0].start(), previous_last + 1);
                previous_last = *counter;
                for (waiter, range) in batch.into_iter().zip(ranges) {
                    waiter.answer(Ok(range));
                }
                for _ in 0..counts.len() {
                    let (order, count, mut rx) = receivers.pop_front().expect("a receiver");
                    let range = rx.try_recv().expect("answered").expect("numbers");
                    prop_assert_eq!(range.end() - range.start() + 1, count);
                    served.push((order, range));
                }
                Ok(true)
            };
            for (burst, serve_now) in arrivals {
                for count in burst {
                    let (w, rx) = waiter(count);
                    asked += count;
                    let _ = queue.push(w).expect("room in the queue");
                    receivers.push_back((arrival, count, rx));
                    arrival += 1;
                }
                if serve_now {
                    serve(&queue, &mut counter, &mut receivers, &mut served)?;
                }
            }
            while serve(&queue, &mut counter, &mut receivers, &mut served)? {}
            prop_assert!(receivers.is_empty());
            prop_assert_eq!(counter - start, asked);
            // Arrival order is number order, ranges disjoint and gapless.
            served.sort_by_key(|(order, _)| *order);
            let mut next = start + 1;
            for (_, range) in &served {
                prop_assert_eq!(*range.start(), next);
                next = range.end() + 1;
            }
            prop_assert_eq!(next - 1, counter);
        }
    }

    #[test]
    fn a_batch_stops_at_its_bounds_and_always_takes_one() {
        assert_eq!(batch_len([].into_iter()), 0);
        assert_eq!(batch_len([SEQ_COUNT_MAX].into_iter()), 1);
        assert_eq!(batch_len(std::iter::repeat_n(1, 5_000)), SEQ_BATCH_WAITERS_MAX);
        let big = std::iter::repeat_n(SEQ_COUNT_MAX, 50);
        assert_eq!(batch_len(big), (SEQ_BATCH_IDS_MAX / SEQ_COUNT_MAX) as usize);
    }

    #[test]
    fn a_runner_is_started_once_and_ends_when_the_queue_is_empty() {
        let queue = TakeQueue::default();
        let (a, _ra) = waiter(1);
        let (b, _rb) = waiter(2);
        assert_eq!(queue.push(a).unwrap(), Pushed::StartRunner);
        assert_eq!(queue.push(b).unwrap(), Pushed::Queued);
        assert_eq!(queue.next_batch().map(|b| b.len()), Some(2));
        assert!(queue.next_batch().is_none());
        let (c, _rc) = waiter(1);
        assert_eq!(queue.push(c).unwrap(), Pushed::StartRunner);
        let (d, mut rd) = waiter(1);
        assert_eq!(queue.push(d).unwrap(), Pushed::Queued);
        // A runner that died: the waiter is answered (its sender dropped), a new one starts.
        queue.abandon();
        assert!(rd.try_recv().is_err());
        let (e, _re) = waiter(1);
        assert_eq!(queue.push(e).unwrap(), Pushed::StartRunner);
    }

    #[test]
    fn a_full_queue_refuses_instead_of_growing() {
        let queue = TakeQueue::default();
        let mut receivers = Vec::new();
        for _ in 0..SEQ_QUEUE_MAX {
            let (w, rx) = waiter(1);
            queue.push(w).unwrap();
            receivers.push(rx);
        }
        let (w, _rx) = waiter(1);
        assert!(queue.push(w).is_err());
    }

    #[test]
    fn a_split_of_a_short_block_is_refused() {
        assert_eq!(split(5, &[3, 2]), Some(vec![1..=3, 4..=5]));
        assert_eq!(split(4, &[3, 2]), None);
        assert_eq!(split(u64::MAX, &[1]), Some(vec![u64::MAX..=u64::MAX]));
    }
}
