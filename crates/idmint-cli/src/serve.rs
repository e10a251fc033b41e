//! `idmint serve`: open the store, bind (HTTP, and gRPC on its own port with
//! `--grpc-listen`), serve until SIGTERM/SIGINT, then shut down in order
//! (stop accepting, drain requests, freeze the generators, give unissued ids back to the
//! store, stop background tasks).

use anyhow::Context;
use idmint::{Segments, Snowflake};
use idmint_server::{AppState, SequenceSlot};

use crate::ServeArgs;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let settings = args.settings()?;
    let store = idmint_store::open(&settings.store)
        .await
        .with_context(|| format!("cannot open the store {}", settings.store))?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("cannot listen on {}", settings.listen))?;
    let addr = listener.local_addr().context("cannot read the bound address")?;
    let grpc_listener = match settings.grpc_listen {
        Some(grpc) => Some(
            tokio::net::TcpListener::bind(grpc)
                .await
                .with_context(|| format!("cannot listen for gRPC on {grpc}"))?,
        ),
        None => None,
    };
    // Beyond loopback without an admin token was refused when the settings were resolved.
    if settings.auth.has_admin_token() {
        tracing::info!(
            clients = settings.auth.clients().len(),
            "admin routes need the admin token"
        );
    } else {
        tracing::warn!(%addr, "no admin token configured: serving on loopback only, where every local process may create and delete tags; set IDMINT_ADMIN_TOKEN to require a token");
    }
    let segments =
        Segments::start(store, settings.segment.clone()).context("cannot start serving")?;
    let formats = claim_formats(&segments, &settings).await?;
    tracing::info!(%addr, store = %segments.store_description(), "idmint serving");
    // The one line scripts read to learn the address (e.g. with --listen 127.0.0.1:0).
    println!("idmint listening on http://{addr}");
    match &grpc_listener {
        Some(grpc) => {
            let grpc = grpc.local_addr().context("cannot read the bound gRPC address")?;
            tracing::info!(%grpc, "gRPC served on its own port");
            println!("idmint gRPC listening on http://{grpc}");
        }
        None => tracing::info!(%addr, "gRPC served on the HTTP port"),
    }
    let snowflake = start_snowflake(&settings, addr).await;
    let snowflake_cached = match (&snowflake, settings.snowflake_cached) {
        (Ok(generator), Some(ring)) => {
            let generator = std::sync::Arc::clone(generator);
            let cached = idmint::CachedSnowflake::start(generator, ring.capacity, ring.max_lead_ms)
                .context("cannot start the cached snowflake ring")?;
            tracing::info!(
                capacity = ring.capacity,
                max_lead_ms = ring.max_lead_ms,
                "snowflake ids served from a ring of pre-made ids"
            );
            Some(cached)
        }
        _ => None,
    };
    let sequences = start_sequences(&settings, addr).await;
    let state = AppState {
        segments,
        batch_count_max: settings.batch_count_max,
        snowflake,
        snowflake_cached,
        sequences,
        formats,
        uuids: std::sync::Arc::new(idmint::Uuids::new(std::sync::Arc::new(idmint::SystemClock))),
        auth: std::sync::Arc::new(settings.auth.clone()),
        http_limits: settings.http_limits,
        clients: std::sync::Arc::default(),
    };
    idmint_server::serve_split(listener, grpc_listener, state, shutdown_signal())
        .await
        .context("serving HTTP and gRPC")?;
    tracing::info!("idmint stopped");
    Ok(())
}

/// The tags' public id formats, each keyed one checked against the key recorded in the
/// store (and recorded there on first use) before any id is served: a changed key stops the
/// start with the reason.
async fn claim_formats(
    segments: &Segments,
    settings: &idmint_server::Settings,
) -> anyhow::Result<std::sync::Arc<idmint_server::TagFormats>> {
    let mut formats = idmint_server::TagFormats::new();
    for tag_format in &settings.formats {
        if let Some(permutation) = tag_format.format.permutation() {
            idmint::format::claim_key(
                segments,
                &tag_format.tag,
                permutation,
                tag_format.force_key_change,
            )
            .await
            .with_context(|| format!("cannot serve tag {} under its key", tag_format.tag))?;
        }
        tracing::info!(tag = %tag_format.tag, template = %tag_format.format, keyed = tag_format.format.permutation().is_some(), "public id format");
        formats.insert(tag_format.tag.clone(), tag_format.format.clone());
    }
    Ok(std::sync::Arc::new(formats))
}

/// Starts the snowflake generator on the configured store (worker ids and time marks) and
/// the node's data directory; a failure leaves segment serving up and the snowflake routes
/// answering 503 with the reason.
async fn start_snowflake(
    settings: &idmint_server::Settings,
    addr: std::net::SocketAddr,
) -> Result<std::sync::Arc<Snowflake>, String> {
    let Some(mut config) = settings.snowflake.clone() else {
        return Err("snowflake ids are disabled (snowflake.enabled = false)".to_string());
    };
    config.holder = format!("{}:{}", host_name(), addr.port());
    config.port = addr.port();
    if settings.store != idmint_store::StoreUrl::Memory {
        config.state_dir = Some(settings.data_dir.clone());
    }
    let store = match config.worker {
        idmint::snowflake::WorkerIdSource::Static(_)
        | idmint::snowflake::WorkerIdSource::Ordinal => None,
        _ => Some(idmint_store::open_workers(&settings.store).await.map_err(|e| e.to_string())?),
    };
    match Snowflake::start(store, config, std::sync::Arc::new(idmint::SystemClock)).await {
        Ok(generator) => {
            let status = generator.status();
            tracing::info!(layout = %status.space, worker = status.worker, "snowflake ids served");
            Ok(generator)
        }
        Err(error) => {
            tracing::error!(%error, "snowflake ids not served");
            Err(error.to_string())
        }
    }
}

/// Starts the sequence engine when `--redis` (or `redis`) is set: definitions and ceilings
/// in the store, counters in Redis. A store that cannot hold ceilings leaves the sequence
/// routes answering 503 with the reason; a Redis that does not answer yet is retried in the
/// background until it does.
async fn start_sequences(
    settings: &idmint_server::Settings,
    addr: std::net::SocketAddr,
) -> SequenceSlot {
    let Some(redis) = settings.redis.clone() else {
        return SequenceSlot::not_running(
            "sequences need Redis: start idmint serve with --redis redis://HOST:6379 (or set \
             redis in the config, or IDMINT_REDIS)",
        );
    };
    let store = match idmint_store::open_sequences(&settings.store).await {
        Ok(store) => store,
        Err(error) => {
            tracing::error!(%error, "sequences not served");
            return SequenceSlot::not_running(format!(
                "sequences are not served: their ceilings need one SQL store ({error})"
            ));
        }
    };
    let slot = SequenceSlot::not_running("connecting to Redis");
    let installed = slot.clone();
    let config = idmint::sequence::SequenceConfig {
        holder: format!("{}:{}", host_name(), addr.port()),
        ..idmint::sequence::SequenceConfig::default()
    };
    tokio::spawn(async move {
        loop {
            match idmint_store::open_counters(redis.expose()).await {
                Ok(counters) => {
                    let clock = std::sync::Arc::new(idmint::SystemClock);
                    let engine = idmint::Sequences::start(store, counters, clock, config);
                    tracing::info!(redis = %engine.describe(), "sequences served");
                    installed.set(engine);
                    return;
                }
                Err(idmint_store::StoreError::BadUrl { url, reason }) => {
                    tracing::error!(%url, %reason, "sequences not served: bad Redis URL");
                    installed.set_reason(format!("bad Redis URL {url}: {reason}"));
                    return;
                }
                Err(error) => {
                    tracing::warn!(%error, "Redis not reachable; retrying in 2 s");
                    installed.set_reason(format!("Redis is not reachable yet ({error})"));
                    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
                }
            }
        }
    });
    slot
}

/// This machine's host name, for the store's worker rows (`idmint` when unknown).
fn host_name() -> String {
    Some(idmint_store::host_name()).filter(|h| !h.is_empty()).unwrap_or_else(|| "idmint".into())
}

/// Completes on SIGTERM or SIGINT (Ctrl-C).
async fn shutdown_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => tracing::info!("SIGINT: shutting down"),
        () = terminate => tracing::info!("SIGTERM: shutting down"),
    }
}
