//! The server's resolved [`Settings`] as the library's typed [`NodeConfig`]: what a node
//! runs, plus what only the serving process knows (who it is in the store's worker and
//! sequence rows, `host:port`, and where its data directory is). The one place settings
//! become a node; `config.rs` resolves the settings, this file holds no precedence rules.

use std::net::SocketAddr;

use idmint::NodeConfig;
use idmint::node::{FormatConfig, Peer, SequencesConfig};
use idmint::sequence::SequenceConfig;
use idmint::strict::StrictConfig;
use idmint_store::StoreUrl;

use crate::config::Settings;

/// The node `settings` describe, serving on `addr`: the snowflake generator and the
/// sequences named as this host and port, the generator's time marks and the sequences'
/// marks in the data directory (unless the store is `memory://`, which keeps nothing across
/// restarts anyway).
pub fn node_config(settings: &Settings, addr: SocketAddr) -> NodeConfig {
    let holder = format!("{}:{}", host_name(), addr.port());
    let snowflake = match settings.snowflake.clone() {
        Some(mut config) => {
            config.holder = holder.clone();
            config.port = addr.port();
            if settings.store != StoreUrl::Memory {
                config.state_dir = Some(settings.data_dir.clone());
            }
            Ok(config)
        }
        None => Err("snowflake ids are disabled (snowflake.enabled = false)".to_string()),
    };
    let sequences = match &settings.redis {
        Some(redis) => Ok(SequencesConfig {
            redis: redis.expose().to_string(),
            engine: SequenceConfig {
                holder,
                state_dir: (settings.store != StoreUrl::Memory).then(|| settings.data_dir.clone()),
                ..SequenceConfig::default()
            },
        }),
        None => Err("sequences need Redis: start idmint serve with --redis redis://HOST:6379 (or \
                     set redis in the config, or IDMINT_REDIS)"
            .to_string()),
    };
    NodeConfig {
        store: settings.store.clone(),
        segment: settings.segment.clone(),
        batch_count_max: settings.batch_count_max,
        snowflake,
        snowflake_cached: settings.snowflake_cached,
        formats: settings
            .formats
            .iter()
            .map(|f| FormatConfig {
                tag: f.tag.clone(),
                format: f.format.clone(),
                force_key_change: f.force_key_change,
            })
            .collect(),
        sequences,
        tinyid: settings.tinyid.clone(),
        strict: Some(StrictConfig {
            unsafe_ignore_lease_loss: settings.strict_unsafe_ignore_lease_loss,
            ..StrictConfig::new(Peer { grpc_url: peer_url(settings, addr) })
        }),
        ready_engines: settings.ready_engines.clone(),
        witness: settings.witness.clone(),
    }
}

/// Where the node's peers reach its gRPC API: its own port (or `grpc_listen`'s), at the
/// address it listens on, or at this machine's host name when it listens on every address.
fn peer_url(settings: &Settings, addr: SocketAddr) -> String {
    let grpc = settings.grpc_listen.filter(|g| g.port() != 0).unwrap_or(addr);
    let host = if grpc.ip().is_unspecified() { host_name() } else { grpc.ip().to_string() };
    let host =
        if grpc.is_ipv6() && !grpc.ip().is_unspecified() { format!("[{host}]") } else { host };
    format!("http://{host}:{}", grpc.port())
}

/// This machine's host name, for the store's worker rows (`idmint` when unknown).
fn host_name() -> String {
    Some(idmint_store::host_name()).filter(|h| !h.is_empty()).unwrap_or_else(|| "idmint".into())
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::{FileConfig, Overrides};

    fn strict_of(file: &str, vars: &[(&str, &str)]) -> StrictConfig {
        let vars: HashMap<String, String> =
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let file = FileConfig::parse(file, "t.toml").unwrap();
        let settings =
            Settings::resolve(&file, &|name| vars.get(name).cloned(), &Overrides::default())
                .unwrap();
        let addr = "127.0.0.1:8080".parse().unwrap();
        node_config(&settings, addr).strict.expect("strict tags are served")
    }

    /// The fence of strict tags is on unless the unsafe key turns it off, by file or variable.
    #[test]
    fn the_strict_fence_is_on_by_default_and_off_only_when_asked() {
        assert!(!strict_of("", &[]).unsafe_ignore_lease_loss);
        assert!(
            !StrictConfig::new(Peer { grpc_url: "http://x:1".into() }).unsafe_ignore_lease_loss
        );
        assert!(
            strict_of("[strict]\nunsafe_ignore_lease_loss = true\n", &[]).unsafe_ignore_lease_loss
        );
        let vars = [("IDMINT_STRICT_UNSAFE_IGNORE_LEASE_LOSS", "true")];
        assert!(strict_of("", &vars).unsafe_ignore_lease_loss);
        let printed = {
            let file = FileConfig::default();
            let s = Settings::resolve(&file, &|_| None, &Overrides::default()).unwrap();
            s.effective.to_toml()
        };
        assert!(printed.contains("unsafe_ignore_lease_loss = false"), "{printed}");
    }
}
