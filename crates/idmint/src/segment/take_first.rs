//! [`TakeFirst`]: the future of a single-id take (`TagGenerator::next_id`,
//! `Segments::next_id`, `Segments::next_id_by_name`, and the node's take as text). Its poll tries the synchronous take
//! first and answers `Ready(Ok(id))` from it; only when the take comes up empty does it build
//! the waiting future (boxed) and poll that.
//!
//! Why not an `async fn` with the take first: its poll is a function of its own that the
//! optimiser does not inline into the caller's (it also holds the waiting states and their
//! drops), and it writes its whole `Poll<Result<u64, Error>>` (56 bytes and more) out on every
//! id, which the caller then copies: that cost `next_id().await` about 10 ns an id, four times
//! the take itself (docs/PERFORMANCE.md, "Segment ids: the take in process"). Here the poll is
//! `#[inline(always)]` and the fast path is a take and a `u64`: the caller sees `Ok(id)` and
//! nothing else is moved. The waiting path is out of line and unchanged.
//!
//! Must not: take more than once per id it answers (the take runs only until it gives an id or
//! the waiting future is built), or take before its first poll (it is lazy, as an `async fn`
//! is: a future never polled takes nothing).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The waiting half of a take, boxed so [`TakeFirst`] stays small. `T` is what a take
/// answers: the id, or the node's text of it.
pub(crate) type Waiting<'a, E, T = u64> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'a>>;

/// A future that answers from `take` when it gives an id, else from the future `wait` makes.
pub(crate) struct TakeFirst<'a, E, Take, Wait, T = u64> {
    take: Take,
    wait: Option<Wait>,
    waiting: Option<Waiting<'a, E, T>>,
}

impl<'a, E, Take, Wait, T> TakeFirst<'a, E, Take, Wait, T>
where
    Take: FnMut() -> Option<T>,
    Wait: FnOnce() -> Waiting<'a, E, T>,
{
    /// Nothing runs until the first poll.
    #[inline(always)]
    pub(crate) fn new(take: Take, wait: Wait) -> Self {
        TakeFirst { take, wait: Some(wait), waiting: None }
    }
}

impl<'a, E, Take, Wait, T> Future for TakeFirst<'a, E, Take, Wait, T>
where
    Take: FnMut() -> Option<T> + Unpin,
    Wait: FnOnce() -> Waiting<'a, E, T> + Unpin,
{
    type Output = Result<T, E>;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        let this = self.get_mut();
        if this.waiting.is_none()
            && let Some(id) = (this.take)()
        {
            return Poll::Ready(Ok(id));
        }
        poll_waiting(&mut this.waiting, &mut this.wait, cx)
    }
}

/// The slow path: builds the waiting future on the first call and polls it.
#[inline(never)]
#[cold]
fn poll_waiting<'a, E, Wait, T>(
    waiting: &mut Option<Waiting<'a, E, T>>,
    wait: &mut Option<Wait>,
    cx: &mut Context<'_>,
) -> Poll<Result<T, E>>
where
    Wait: FnOnce() -> Waiting<'a, E, T>,
{
    let future = match waiting {
        Some(future) => future,
        None => {
            // `wait` is consumed only here, and `waiting` is set right after: once `waiting`
            // is `None` for good, `wait` is still there.
            let Some(make) = wait.take() else {
                unreachable!("TakeFirst: the waiting future was made and then dropped")
            };
            waiting.insert(make())
        }
    };
    future.as_mut().poll(cx)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
        Pin::new(future).poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[test]
    fn takes_lazily_and_once_then_waits_only_when_empty() {
        let takes = AtomicU64::new(0);
        let take = || {
            let n = takes.fetch_add(1, Ordering::Relaxed);
            (n == 0).then_some(7)
        };
        let mut hit =
            TakeFirst::new(take, || -> Waiting<'static, ()> { panic!("waited on a hit") });
        assert_eq!(takes.load(Ordering::Relaxed), 0, "took before the first poll");
        assert_eq!(poll_once(&mut hit), Poll::Ready(Ok(7)));
        assert_eq!(takes.load(Ordering::Relaxed), 1);

        let mut made = 0;
        let mut miss = TakeFirst::new(take, || -> Waiting<'static, ()> {
            made += 1;
            let mut pending_once = true;
            Box::pin(std::future::poll_fn(move |_| match std::mem::take(&mut pending_once) {
                true => Poll::Pending,
                false => Poll::Ready(Ok(9)),
            }))
        });
        assert_eq!(poll_once(&mut miss), Poll::Pending);
        assert_eq!(poll_once(&mut miss), Poll::Ready(Ok(9)));
        drop(miss);
        assert_eq!(made, 1);
        assert_eq!(takes.load(Ordering::Relaxed), 2, "took again while waiting");
    }
}
