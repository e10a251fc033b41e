//! `axum_counter`: the framework floor for `scripts/bench-http`. A bare axum router on the
//! runtime `idmint serve` builds (one worker per core) that answers Leaf's two routes with the
//! next value of an `AtomicU64` as `text/plain`, and `GET /v1/segment/{tag}?count=N` with
//! `{"tag": …, "ids": [...]}` of `N` consecutive values (at most 100 000): the shapes of
//! idmint's answers without limits, tokens, metrics, a tag lookup or a store.
//!
//! It must stay bare: anything added here is cost the comparison no longer shows.
//!
//! Run: `cargo run --release -p idmint-server --example axum_counter [ADDRESS]` (default
//! `127.0.0.1:0`); it prints `listening on http://ADDRESS` once it accepts.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Json};
use axum::routing::get;
use serde::Serialize;

/// Most ids one batch answer holds, as idmint's `/v1/segment/{tag}`.
const COUNT_MAX: u64 = 100_000;

fn main() -> std::io::Result<()> {
    let address = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".to_string());
    // As bare_counter: `idmint serve`'s runtime, honouring TOKIO_WORKER_THREADS.
    tokio::runtime::Runtime::new()?.block_on(serve(&address))
}

async fn serve(address: &str) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let counter = Arc::new(AtomicU64::new(0));
    let app = Router::new()
        .route("/api/segment/get/{tag}", get(one))
        .route("/api/snowflake/get/{key}", get(one))
        .route("/v1/segment/{tag}", get(batch))
        .with_state(counter);
    axum::serve(listener, app).await
}

/// One id as text, as Leaf's routes answer it.
async fn one(State(counter): State<Arc<AtomicU64>>, Path(_tag): Path<String>) -> String {
    (counter.fetch_add(1, Ordering::Relaxed) + 1).to_string()
}

/// The JSON batch answer.
#[derive(Serialize)]
struct Batch {
    tag: String,
    ids: Vec<u64>,
}

/// `count` consecutive ids (default 1) as JSON.
async fn batch(
    State(counter): State<Arc<AtomicU64>>,
    Path(tag): Path<String>,
    Query(query): Query<HashMap<String, u64>>,
) -> impl IntoResponse {
    let count = query.get("count").copied().unwrap_or(1).clamp(1, COUNT_MAX);
    let first = counter.fetch_add(count, Ordering::Relaxed) + 1;
    Json(Batch { tag, ids: (first..first + count).collect() })
}
