//! `bare_counter`: the HTTP floor for scripts/bench-grpc-client.sh. A bare hyper 1 server
//! (HTTP/1.1, keep-alive) on the same tokio runtime as `idmint serve` (one worker per core)
//! that answers every request with the next value of an `AtomicU64` as `text/plain`: the
//! shape of Leaf's `GET /api/segment/get/{tag}` answer without routing, limits, tokens,
//! metrics or a tag lookup.
//!
//! It must stay bare: anything added here is cost the comparison no longer shows. It is not
//! a server to run for anything but that measurement (no limits, no shutdown but Ctrl-C).
//!
//! Run: `cargo run --release -p idmint-server --example bare_counter [ADDRESS]`
//! (default `127.0.0.1:0`); it prints `listening on http://ADDRESS` once it accepts.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

fn main() -> std::io::Result<()> {
    let address = std::env::args().nth(1).unwrap_or_else(|| "127.0.0.1:0".to_string());
    // The runtime `idmint serve` builds: multi-threaded, one worker per core this process may
    // run on, or TOKIO_WORKER_THREADS of them (scripts/bench-http's latency part sets 1).
    tokio::runtime::Runtime::new()?.block_on(serve(&address))
}

async fn serve(address: &str) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(address).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let counter = Arc::new(AtomicU64::new(0));
    loop {
        let (stream, _) = listener.accept().await?;
        // As idmint does: small answers go out at once.
        stream.set_nodelay(true)?;
        let counter = Arc::clone(&counter);
        tokio::spawn(async move {
            let service = service_fn(move |_request: Request<Incoming>| {
                let id = counter.fetch_add(1, Ordering::Relaxed) + 1;
                async move { Ok::<_, Infallible>(answer(id)) }
            });
            // A connection that breaks ends here; the benchmark's client counts its errors.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// The decimal id as `text/plain`, as Leaf's route answers it.
fn answer(id: u64) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(id.to_string())));
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}
