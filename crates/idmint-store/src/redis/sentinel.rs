//! The connection behind a `redis+sentinel://` URL: a multiplexed connection to the master
//! the sentinels name, replaced after it fails.
//!
//! A call that fails on the connection itself (I/O, timeout, a dropped connection) or is
//! refused by a server that is no longer the master (`READONLY`, `MASTERDOWN`) drops the
//! connection; the next call asks the sentinels for the master again (redis-rs checks its
//! `ROLE`). The failed call is returned as failed, never repeated: it may have run.
//! Connections are made one at a time; calls meanwhile wait for that one.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisConnectionInfo, RedisError, RedisResult,
    ServerErrorKind, Value,
};

/// The master's connection, found and refound through the sentinels.
pub(super) struct SentinelLink {
    /// Asks the sentinels; held while connecting, so one caller connects at a time.
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The current connection, numbered so that a failure drops only the one it happened on.
    current: Mutex<Held>,
    config: AsyncConnectionConfig,
    /// Bound on asking the sentinels and connecting to the master.
    timeout: Duration,
    db: i64,
}

#[derive(Default)]
struct Held {
    generation: u64,
    conn: Option<MultiplexedConnection>,
}

impl SentinelLink {
    /// Asks the sentinels (`redis://host:port` each) for `master` and connects to it with
    /// `info` (its database and credentials).
    pub(super) async fn connect(
        sentinels: Vec<String>,
        master: &str,
        info: RedisConnectionInfo,
        db: i64,
        timeout: Duration,
    ) -> RedisResult<SentinelLink> {
        let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(info);
        let client = SentinelClient::build(
            sentinels,
            master.to_string(),
            Some(node),
            SentinelServerType::Master,
        )?;
        let link = SentinelLink {
            sentinels: tokio::sync::Mutex::new(client),
            current: Mutex::new(Held::default()),
            config: AsyncConnectionConfig::new()
                .set_connection_timeout(Some(timeout))
                .set_response_timeout(Some(timeout)),
            timeout,
            db,
        };
        link.master().await?;
        Ok(link)
    }

    /// The master's database number.
    pub(super) fn db(&self) -> i64 {
        self.db
    }

    /// Sends one command to the master.
    pub(super) async fn command(&self, cmd: &Cmd) -> RedisResult<Value> {
        let (generation, mut conn) = self.master().await?;
        let result = conn.req_packed_command(cmd).await;
        self.check(generation, result.as_ref().err());
        result
    }

    /// Sends a pipeline to the master.
    pub(super) async fn commands(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let (generation, mut conn) = self.master().await?;
        let result = conn.req_packed_commands(pipeline, offset, count).await;
        self.check(generation, result.as_ref().err());
        result
    }

    /// The current connection, or a new one to the master the sentinels name now.
    async fn master(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(held) = self.held() {
            return Ok(held);
        }
        let mut sentinels = self.sentinels.lock().await;
        // Another caller may have connected while this one waited.
        if let Some(held) = self.held() {
            return Ok(held);
        }
        let connecting = sentinels.get_async_connection_with_config(&self.config);
        let conn = tokio::time::timeout(self.timeout, connecting).await.map_err(|_| {
            RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!(
                    "the sentinels named no reachable master within {} ms",
                    self.timeout.as_millis()
                ),
            ))
        })??;
        let mut held = self.lock();
        held.generation += 1;
        held.conn = Some(conn.clone());
        Ok((held.generation, conn))
    }

    fn held(&self) -> Option<(u64, MultiplexedConnection)> {
        let held = self.lock();
        held.conn.clone().map(|conn| (held.generation, conn))
    }

    /// Drops connection `generation` if `error` shows it no longer reaches the master.
    fn check(&self, generation: u64, error: Option<&RedisError>) {
        if error.is_some_and(lost_master) {
            let mut held = self.lock();
            if held.generation == generation && held.conn.take().is_some() {
                tracing::warn!(error = ?error, "redis master connection lost; asking the sentinels again on the next call");
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Every change is one assignment, so a poisoned lock still holds a consistent value.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether `error` means the connection no longer reaches a writable master: anything but
/// an ordinary reply error from the server.
fn lost_master(error: &RedisError) -> bool {
    match error.kind() {
        ErrorKind::Server(kind) => matches!(
            kind,
            ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading
        ),
        _ => true,
    }
}
