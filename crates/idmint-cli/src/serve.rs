//! `idmint serve`: settings -> [`idmint::Node`] -> transports. Resolve the settings, bind
//! (HTTP, and gRPC on its own port with `--grpc-listen`), start the node from the typed
//! configuration the settings convert into (`idmint_server::node_config`), serve until
//! SIGTERM/SIGINT, then shut down in order (stop accepting, drain requests, then the node:
//! freeze the generators, give unissued ids back to the store, close the snowflake ring,
//! stop the snowflake generator, the node's loops and the sequences). It spawns nothing
//! itself.

use std::sync::Arc;

use anyhow::Context;
use idmint::NodeBuilder;
use idmint_server::AppState;

use crate::ServeArgs;

pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let (settings, unknown_variables) = args.settings()?;
    // Warned, not refused: a variable of another tool's may share the prefix.
    for problem in unknown_variables.iter().flat_map(|unknown| unknown.problems()) {
        if let idmint_server::ConfigError::UnknownVariable { name, nearest, key } = problem {
            let (nearest, key) = (nearest.as_deref(), key.as_deref());
            tracing::warn!(
                variable = %name,
                nearest = nearest.unwrap_or_default(),
                key = key.unwrap_or_default(),
                "{problem}"
            );
        }
    }
    let http_limits = fit_descriptors(&settings)?;
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
    let peers = idmint_server::GrpcPeerLink::new(settings.auth.admin_token().cloned());
    let node = NodeBuilder::new(idmint_server::node_config(&settings, addr))
        .peer_link(Arc::new(peers))
        .start()
        .await?;
    tracing::info!(%addr, store = %node.store_description(), "idmint serving");
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
    let mut state = AppState::new(Arc::new(node));
    state.auth = Arc::new(settings.auth.clone());
    state.http_limits = http_limits;
    idmint_server::serve_split(listener, grpc_listener, state, shutdown_signal())
        .await
        .context("serving HTTP and gRPC")?;
    tracing::info!("idmint stopped");
    Ok(())
}

/// Raises the file descriptor limit to the hard one, and lowers `limits.connections_max` to
/// what it leaves the stores, marks files and logs, with a warning: the HTTP limits to serve
/// with. Too little room refuses the start.
fn fit_descriptors(
    settings: &idmint_server::Settings,
) -> anyhow::Result<idmint_server::HttpLimits> {
    let mut limits = settings.http_limits;
    let Some(descriptors) = crate::fds::raise_to_hard() else { return Ok(limits) };
    let reserved = settings.descriptors_reserved();
    let fitted = limits.fit_descriptors(descriptors, reserved, settings.listeners());
    if let Some(configured) = fitted.map_err(anyhow::Error::msg)? {
        tracing::warn!(
            configured,
            connections_max = limits.connections_max,
            client_connections_max = limits.client_connections_max,
            descriptors,
            reserved,
            "limits.connections_max lowered to what the file descriptor limit (RLIMIT_NOFILE) \
             leaves after the stores, marks files and logs; raise the limit to serve more \
             connections (docs/operations.md, \"File descriptors\")"
        );
    }
    Ok(limits)
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
