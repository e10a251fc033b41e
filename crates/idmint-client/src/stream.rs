//! [`IdStream`]: a tag's public ids in chunks, for bulk consumers.
//!
//! Over gRPC it reads one StreamIds call; a stream that breaks off (server gone, a chunk
//! late) is opened again, on the next server, for the ids still due, at most
//! [`STREAM_REOPENS_MAX`] times. Over HTTP it asks for batches of at most
//! `BATCH_COUNT_MAX` ids. Ids are unique across the whole stream, and increasing within what
//! one server sent. This file must not pick servers (`endpoints.rs` does).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use idmint_core::Tag;
use idmint_core::limits::BATCH_COUNT_MAX;
use tokio::time::Instant;

use crate::endpoints::Endpoints;
use crate::error::{ClientError, Failure, from_status};
use crate::ids::PublicIds;
use crate::limits::STREAM_REOPENS_MAX;
use crate::wire::{OpenStream, Opened, chunk_ids};

/// Public ids of a tag in chunks, from [`crate::Client::stream_ids`]. Ends after the count
/// asked for, or after the first error.
pub struct IdStream {
    inner: Pin<Box<dyn Stream<Item = Result<PublicIds, ClientError>> + Send>>,
}

impl std::fmt::Debug for IdStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdStream").finish_non_exhaustive()
    }
}

impl IdStream {
    pub(crate) fn new(
        endpoints: Arc<Endpoints>,
        tag: Tag,
        count: u64,
        deadline: Duration,
    ) -> IdStream {
        let state = State {
            endpoints,
            tag,
            remaining: count,
            open: None,
            reopens: 0,
            deadline,
            done: false,
        };
        IdStream { inner: Box::pin(futures_util::stream::unfold(state, State::step)) }
    }

    /// The next chunk, `None` once the stream ended.
    pub async fn next(&mut self) -> Option<Result<PublicIds, ClientError>> {
        self.inner.next().await
    }
}

impl Stream for IdStream {
    type Item = Result<PublicIds, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

struct State {
    endpoints: Arc<Endpoints>,
    tag: Tag,
    remaining: u64,
    open: Option<tonic::Streaming<idmint_proto::v1::StreamIdsResponse>>,
    reopens: u32,
    /// Bound on opening a stream, and on each chunk.
    deadline: Duration,
    done: bool,
}

impl State {
    async fn step(mut self) -> Option<(Result<PublicIds, ClientError>, State)> {
        loop {
            if self.done || self.remaining == 0 {
                return None;
            }
            let Some(stream) = self.open.as_mut() else {
                let op = OpenStream {
                    tag: self.tag.as_str(),
                    count: self.remaining,
                    batch: BATCH_COUNT_MAX,
                };
                match self.endpoints.call(&op, Instant::now() + self.deadline).await {
                    Ok((Opened::Grpc(stream), _)) => self.open = Some(stream),
                    Ok((Opened::Batch(ids), _)) => return Some(self.yielded(ids)),
                    Err(error) => return Some(self.failed(error)),
                }
                continue;
            };
            let broke = match tokio::time::timeout(self.deadline, stream.message()).await {
                Ok(Ok(Some(chunk))) => match chunk_ids(chunk) {
                    Ok(ids) if ids.len() as u64 <= self.remaining => {
                        return Some(self.yielded(ids));
                    }
                    Ok(ids) => format!("{} ids sent with {} due", ids.len(), self.remaining),
                    Err(Failure::Retry { reason, .. } | Failure::Protocol(reason)) => reason,
                    Err(Failure::Caller(error)) => return Some(self.failed(error)),
                },
                Ok(Ok(None)) => format!("the stream ended with {} ids due", self.remaining),
                Ok(Err(status)) => match from_status(&status, self.tag.as_str()) {
                    Failure::Caller(error) => return Some(self.failed(error)),
                    Failure::Retry { reason, .. } | Failure::Protocol(reason) => reason,
                },
                Err(_elapsed) => format!("no chunk within {} ms", self.deadline.as_millis()),
            };
            self.open = None;
            self.reopens += 1;
            if self.reopens > STREAM_REOPENS_MAX {
                let reason =
                    format!("the id stream broke off {} times; last: {broke}", self.reopens);
                return Some(self.failed(ClientError::Unavailable { reason }));
            }
            tracing::debug!(tag = %self.tag, reason = %broke, "id stream broke off; opening it again");
        }
    }

    fn yielded(mut self, ids: PublicIds) -> (Result<PublicIds, ClientError>, State) {
        self.remaining -= ids.len() as u64;
        (Ok(ids), self)
    }

    fn failed(mut self, error: ClientError) -> (Result<PublicIds, ClientError>, State) {
        self.done = true;
        self.open = None;
        (Err(error), self)
    }
}
