//! Takes of strict tags another node owns, forwarded to it and coalesced: per peer and tag,
//! one call in flight at a time, carrying every take that arrived while the last one flew
//! (at most [`FORWARD_BATCH_MAX`] ids); its ids are split among them in arrival order. A
//! take sent after another was answered joins a later call, so it gets the greater ids.
//!
//! The flight runs on a task of its own: a caller that stops waiting never strands the
//! takes queued behind it. A queue leaves the map when its flight finds it empty, so the map
//! holds only the queues in use, however often owners and tokens change.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use idmint_core::{Count, IdRange, Tag};
use tokio::sync::oneshot;

use crate::peer::{FenceToken, Peer, PeerError, PeerLink, PublicIds};
use crate::segment::Error;

/// The most ids one forwarded call asks for (at most a node's default batch limit).
pub const FORWARD_BATCH_MAX: u64 = 1_000;

/// A take waiting for its ids.
type Waiter = (Count, oneshot::Sender<Result<IdRange, Error>>);

/// The forwards of one node.
pub(super) struct Forwards {
    peers: Option<Arc<dyn PeerLink>>,
    /// The most ids one call asks for.
    batch_max: u64,
    queues: Arc<Mutex<Queues>>,
}

/// The queues, by owner, tag and the owner's lease token.
type Queues = HashMap<(Peer, Tag, FenceToken), Arc<Queue>>;

/// The takes of one tag waiting for one peer.
#[derive(Default)]
struct Queue {
    state: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    takes: Vec<Waiter>,
    /// Whether a call is in flight (its task sends the next one).
    flying: bool,
}

impl Forwards {
    pub(super) fn new(peers: Option<Arc<dyn PeerLink>>, batch_max: u64) -> Forwards {
        Forwards { peers, batch_max: batch_max.max(1), queues: Arc::default() }
    }

    /// `count` ids of `tag` from `peer`, its owner under the lease row's token `fence`.
    pub(super) async fn take(
        &self,
        peer: &Peer,
        tag: &Tag,
        count: Count,
        fence: FenceToken,
    ) -> Result<IdRange, Error> {
        let unavailable =
            |reason: &str| Error::Unavailable { tag: tag.clone(), reason: reason.into() };
        let Some(link) = &self.peers else {
            return Err(unavailable(&format!(
                "the tag is owned by {} and this node has no way to its peers",
                peer.grpc_url
            )));
        };
        if count.get() > self.batch_max {
            return Err(unavailable(&format!(
                "a take of more than {} ids of a strict tag is served by its owner only ({}): \
                 ask it there",
                self.batch_max, peer.grpc_url
            )));
        }
        let queue = {
            let mut queues = self.queues.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(queues.entry((peer.clone(), tag.clone(), fence)).or_default())
        };
        let (sender, answer) = oneshot::channel();
        let lead = {
            let mut waiting = queue.state.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.takes.push((count, sender));
            !std::mem::replace(&mut waiting.flying, true)
        };
        if lead {
            let (link, peer, tag) = (Arc::clone(link), peer.clone(), tag.clone());
            let queues = Arc::clone(&self.queues);
            tokio::spawn(fly(link, (peer, tag, fence), (queues, queue), self.batch_max));
        }
        answer.await.unwrap_or_else(|_| Err(unavailable("the forwarded take was dropped")))
    }
}

/// Sends the queue's takes, a batch a call, until none waits; then takes the queue out of
/// the map unless a take came meanwhile (a take holding the queue already finds it not
/// flying and flies it itself; the next take makes a new one).
async fn fly(
    link: Arc<dyn PeerLink>,
    (peer, tag, fence): (Peer, Tag, FenceToken),
    (queues, queue): (Arc<Mutex<Queues>>, Arc<Queue>),
    batch_max: u64,
) {
    loop {
        let batch = {
            let mut waiting = queue.state.lock().unwrap_or_else(PoisonError::into_inner);
            if waiting.takes.is_empty() {
                waiting.flying = false;
                drop(waiting);
                // The map's lock before the queue's: `take` never holds both.
                let mut map = queues.lock().unwrap_or_else(PoisonError::into_inner);
                let key = (peer, tag, fence);
                let idle = map.get(&key).is_some_and(|held| {
                    let waiting = held.state.lock().unwrap_or_else(PoisonError::into_inner);
                    Arc::ptr_eq(held, &queue) && waiting.takes.is_empty() && !waiting.flying
                });
                if idle {
                    map.remove(&key);
                }
                return;
            }
            let mut total = 0;
            let fits = waiting
                .takes
                .iter()
                .take_while(|(count, _)| {
                    total += count.get();
                    total <= batch_max
                })
                .count()
                .max(1);
            waiting.takes.drain(..fits).collect::<Vec<_>>()
        };
        let total: u64 = batch.iter().map(|(count, _)| count.get()).sum();
        let count = Count::new(total).expect("a batch of at least one id");
        let answer = if tag == super::tso_tag() {
            link.timestamps(&peer, count, Some(fence))
                .await
                .map_err(|error| refusal(&tag, error))
                .and_then(|first| {
                    IdRange::new(first, first.saturating_add(total)).ok_or_else(|| {
                        let reason = format!("{} answered {first}: not a timestamp", peer.grpc_url);
                        Error::Unavailable { tag: tag.clone(), reason }
                    })
                })
        } else {
            numbers(&tag, &peer, total, link.next_ids(&peer, &tag, count, Some(fence)).await)
        };
        answer_in_order(batch, answer);
    }
}

/// A forwarded take's answer of `total` ids as one range.
fn numbers(
    tag: &Tag,
    peer: &Peer,
    total: u64,
    answer: Result<PublicIds, PeerError>,
) -> Result<IdRange, Error> {
    let unavailable = |reason: String| Error::Unavailable { tag: tag.clone(), reason };
    match answer {
        Ok(PublicIds::Numbers(ids)) => contiguous(&ids, total).ok_or_else(|| {
            unavailable(format!(
                "{} answered {} ids that are not one increasing run: it does not serve the tag \
                 as strict",
                peer.grpc_url,
                ids.len()
            ))
        }),
        Ok(PublicIds::Texts(_)) => {
            Err(unavailable(format!("{} answered texts for a strict tag", peer.grpc_url)))
        }
        Err(error) => Err(refusal(tag, error)),
    }
}

/// A peer's refusal as this node answers it.
fn refusal(tag: &Tag, error: PeerError) -> Error {
    match error {
        PeerError::Refused { code, .. } if code == "unknown_tag" => Error::UnknownTag(tag.clone()),
        // Final on the owner, final here: the tag's ids are spent.
        PeerError::Refused { code, .. } if code == "tag_exhausted" => {
            let (max_id, step) = (super::STRICT_ID_MAX, 1);
            Error::Store(idmint_store::StoreError::Exhausted { tag: tag.clone(), max_id, step })
        }
        error => Error::Unavailable { tag: tag.clone(), reason: error.to_string() },
    }
}

/// Splits a forwarded answer among `batch` in arrival order.
fn answer_in_order(batch: Vec<Waiter>, range: Result<IdRange, Error>) {
    let mut start = match range {
        Ok(range) => range.start(),
        Err(error) => {
            for (_, sender) in batch {
                let _ = sender.send(Err(error.clone()));
            }
            return;
        }
    };
    for (count, sender) in batch {
        let range = IdRange::new(start, start + count.get()).expect("a non-empty range");
        start += count.get();
        let _ = sender.send(Ok(range));
    }
}

/// `ids` as one range, when they are `total` consecutive ids.
fn contiguous(ids: &[u64], total: u64) -> Option<IdRange> {
    let first = *ids.first()?;
    let consecutive = ids.iter().enumerate().all(|(i, id)| *id == first + i as u64);
    (consecutive && ids.len() as u64 == total).then(|| IdRange::new(first, first + total))?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer answering every take with the next ids of one counter.
    #[derive(Default)]
    struct Counter(std::sync::atomic::AtomicU64);

    #[async_trait::async_trait]
    impl PeerLink for Counter {
        async fn next_ids(
            &self,
            _: &Peer,
            _: &Tag,
            count: Count,
            _: Option<FenceToken>,
        ) -> Result<PublicIds, PeerError> {
            tokio::task::yield_now().await;
            let first = self.0.fetch_add(count.get(), std::sync::atomic::Ordering::SeqCst) + 1;
            Ok(PublicIds::Numbers((first..first + count.get()).collect()))
        }

        async fn timestamps(
            &self,
            _: &Peer,
            _: Count,
            _: Option<FenceToken>,
        ) -> Result<u64, PeerError> {
            unreachable!("no oracle here")
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_queues_leave_the_map_once_idle() {
        let forwards = Arc::new(Forwards::new(Some(Arc::new(Counter::default())), 1_000));
        let tag = Tag::parse("feed").unwrap();
        // Many owners' tokens (as after failovers), many takes each, all at once.
        let takes: Vec<_> = (0..64_u64)
            .map(|i| {
                let (forwards, tag) = (Arc::clone(&forwards), tag.clone());
                tokio::spawn(async move {
                    let peer = Peer { grpc_url: format!("http://n{}", i % 4) };
                    let mut last = 0;
                    for _ in 0..20 {
                        let range =
                            forwards.take(&peer, &tag, Count::ONE, 1 + i % 8).await.unwrap();
                        assert!(range.start() > last);
                        last = range.start();
                    }
                })
            })
            .collect();
        for take in takes {
            take.await.unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !forwards.queues.lock().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "idle queues stayed in the map");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}
