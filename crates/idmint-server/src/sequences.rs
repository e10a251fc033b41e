//! The sequence routes: `GET /v1/seq/{name}?count=N` (ids) and the definitions under
//! `/v1/seqs` (list, create, status, delete), over the node's [`SequenceSlot`].
//!
//! A formatted sequence answers its ids as JSON strings (`"20261122000001"`), a plain one as
//! numbers.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use axum::Json;
use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use idmint::{SEQ_COUNT_MAX, SequenceStatus, Sequences};
use idmint_core::Tag;
use idmint_store::{SequenceRecord, SequenceSpec};
use serde::{Deserialize, Serialize};

use crate::{ApiError, AppState};

/// The node's sequence engine once it runs, or why it does not (yet): it starts after the
/// server when Redis is not reachable at first.
#[derive(Clone, Default)]
pub struct SequenceSlot {
    engine: Arc<OnceLock<Arc<Sequences>>>,
    reason: Arc<Mutex<String>>,
}

impl SequenceSlot {
    /// A slot without an engine, saying why.
    pub fn not_running(reason: impl Into<String>) -> SequenceSlot {
        let slot = SequenceSlot::default();
        slot.set_reason(reason);
        slot
    }

    /// Installs the engine (once).
    pub fn set(&self, engine: Arc<Sequences>) {
        let _ = self.engine.set(engine);
    }

    /// Why there is no engine yet.
    pub fn set_reason(&self, reason: impl Into<String>) {
        *self.reason.lock().unwrap_or_else(PoisonError::into_inner) = reason.into();
    }

    /// The engine, or a 503 with the reason.
    pub fn get(&self) -> Result<&Arc<Sequences>, ApiError> {
        self.engine.get().ok_or_else(|| {
            let reason = self.reason.lock().unwrap_or_else(PoisonError::into_inner).clone();
            ApiError::SequencesNotRunning(reason)
        })
    }

    /// The engine if it runs.
    pub fn running(&self) -> Option<Arc<Sequences>> {
        self.engine.get().cloned()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SeqQuery {
    count: Option<String>,
    /// `number` (default) or `string`; formatted sequences are always strings.
    ids_as: Option<String>,
}

#[derive(Serialize)]
pub(crate) struct SeqIdsBody {
    name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    period: String,
    ids: Vec<serde_json::Value>,
}

/// `count` ids of a sequence.
pub(crate) async fn seq_ids(
    State(app): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<SeqQuery>, QueryRejection>,
) -> Result<Json<SeqIdsBody>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request("bad_query", e.body_text()))?;
    let name = Tag::parse(&name)?;
    let count =
        crate::routes::parse_count(query.count.as_deref(), app.batch_count_max.min(SEQ_COUNT_MAX))?;
    let ids_as = crate::formats::IdsAs::parse(query.ids_as.as_deref())?;
    let ids = app.sequences.get()?.next(&name, count.get()).await?;
    let values = match ids.formatted {
        Some(formatted) => formatted.into_iter().map(serde_json::Value::from).collect(),
        None => ids_as.values(ids.numbers),
    };
    Ok(Json(SeqIdsBody { name: ids.name.to_string(), period: ids.period, ids: values }))
}

#[derive(Serialize)]
pub(crate) struct SeqBody {
    name: String,
    daily: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<String>,
    time_zone: String,
    created_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    counter: Option<CounterBody>,
}

#[derive(Serialize)]
pub(crate) struct CounterBody {
    period: String,
    cur: u64,
    max: u64,
    room: u64,
    seqs_recently: u64,
    seqs_long_term: u64,
    waits: u64,
    reseeds: u64,
    raises: u64,
}

impl SeqBody {
    fn new(record: SequenceRecord, status: Option<SequenceStatus>) -> SeqBody {
        SeqBody {
            name: record.name.to_string(),
            daily: record.daily,
            format: record.format,
            time_zone: record.time_zone,
            created_ms: record.created_ms,
            counter: status.map(|s| CounterBody {
                period: s.period,
                cur: s.cur,
                max: s.max,
                room: s.max.saturating_sub(s.cur),
                seqs_recently: s.recent_per_s,
                seqs_long_term: s.long_term_per_s,
                waits: s.waits,
                reseeds: s.reseeds,
                raises: s.raises,
            }),
        }
    }
}

#[derive(Serialize)]
pub(crate) struct SeqsBody {
    sequences: Vec<SeqBody>,
}

/// Every sequence definition.
pub(crate) async fn list_seqs(State(app): State<AppState>) -> Result<Json<SeqsBody>, ApiError> {
    let records = app.sequences.get()?.list().await?;
    Ok(Json(SeqsBody { sequences: records.into_iter().map(|r| SeqBody::new(r, None)).collect() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateSeq {
    name: String,
    daily: Option<bool>,
    format: Option<String>,
    time_zone: Option<String>,
}

/// Defines a sequence.
pub(crate) async fn create_seq(
    State(app): State<AppState>,
    body: Result<Json<CreateSeq>, JsonRejection>,
) -> Result<impl IntoResponse, ApiError> {
    let Json(body) = body.map_err(|e| ApiError::bad_request("bad_body", e.body_text()))?;
    let spec = SequenceSpec {
        name: Tag::parse(&body.name)?,
        daily: body.daily.unwrap_or(false),
        format: body.format,
        time_zone: body.time_zone.unwrap_or_else(|| "UTC".to_string()),
        created_ms: idmint::Clock::now_ms(&idmint::SystemClock),
    };
    let record = app.sequences.get()?.create(spec).await?;
    tracing::info!(sequence = %record.name, daily = record.daily, "sequence created");
    Ok((StatusCode::CREATED, Json(SeqBody::new(record, None))))
}

/// A sequence's definition and current counter.
pub(crate) async fn get_seq(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<SeqBody>, ApiError> {
    let status = app.sequences.get()?.status(&Tag::parse(&name)?).await?;
    Ok(Json(SeqBody::new(status.spec.clone(), Some(status))))
}

/// Deletes a sequence and its Redis counters (its ceilings stay in the store).
pub(crate) async fn delete_seq(
    State(app): State<AppState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let name = Tag::parse(&name)?;
    app.sequences.get()?.delete(&name).await?;
    tracing::info!(sequence = %name, "sequence deleted");
    Ok(StatusCode::NO_CONTENT)
}
