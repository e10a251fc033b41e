//! A TCP relay in front of a database that a test can cut and restore: cut, it closes every
//! relayed connection and hangs up on new ones at once, as a database host that went away
//! (connection reset) looks to a client. Shared with the `idmint` crate's tests.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

/// A cuttable relay to one upstream `host:port`.
pub struct Gate {
    /// Where clients connect instead of the upstream.
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Gate {
    /// Relays `127.0.0.1:{free port}` to `upstream`.
    pub async fn start(upstream: &str) -> Gate {
        let upstream = upstream.to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let connections: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let (is_cut, open) = (Arc::clone(&cut), Arc::clone(&connections));
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if is_cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let upstream = upstream.clone();
                let task = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                open.lock().unwrap().push(task.abort_handle());
            }
        });
        Gate { addr, cut, connections }
    }

    /// Closes every relayed connection and hangs up on new ones until [`Gate::restore`].
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// Relays new connections again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// `url` (`scheme://[user@]host:port/…`) pointed at the relay instead of its host.
    pub fn url(&self, url: &str) -> String {
        let (scheme, rest) = url.split_once("://").unwrap();
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        let user = authority.rfind('@').map_or("", |at| &authority[..=at]);
        format!("{scheme}://{user}{}{}", self.addr, &rest[authority_end..])
    }
}

/// The `host:port` of `scheme://[user@]host:port/…`.
pub fn upstream(url: &str) -> String {
    let rest = url.split_once("://").unwrap().1;
    let authority = rest.split(['/', '?']).next().unwrap();
    authority.rsplit('@').next().unwrap().to_string()
}
