//! Configuration: a TOML file, `IDMINT_*` environment variables and command-line flags,
//! resolved with the precedence flag > env > file > default.
//!
//! Every key `a.b` of the file can be set by the variable `IDMINT_A_B` ([`env_var`]), except
//! the keys of `[format.TAG]` sections. A variable named `IDMINT_…` that idmint does not read
//! is reported, with the nearest one it reads ([`Settings::load_checked`], `variables.rs`),
//! as an unknown file key is, with the nearest key. `docs/configuration.md` is the reference of every
//! key (type, default, limit); a test fails when a key is missing there.
//!
//! Problems are reported all at once, not the first one only: syntax errors with their line
//! and column, unknown keys with the keys allowed there, wrongly typed values, and values out
//! of range, each naming where it came from (a flag, a variable, `FILE:LINE`) and what is
//! accepted.
//!
//! Secrets are types: a [`Secret`] (a permutation key, a token) prints as `***`, and a
//! [`SecretUrl`] (`store`, `redis`) prints with its password as `***`, in `Display`, `Debug`
//! and `Serialize`. So no log line, error or printed configuration
//! ([`EffectiveConfig::to_toml`], `idmint config check`) shows one; a new secret key is a
//! field of type `Secret`.
//!
//! The parts: `keys.rs` describes every key once (its section field, variable, flag,
//! default and printed line come from that one line), but `[auth]`'s; `sections.rs` checks
//! the plain sections, `format.rs` the `[format.TAG]` tables, `auth.rs` declares and checks
//! `[auth]`; `origins.rs` layers the values
//! and records where each came from, and prints the effective configuration;
//! `diagnostics.rs` reads a file so that every problem is found; `secret.rs` holds the
//! secret types. This module puts them together in [`Settings::resolve`].
//!
//! Adding a key is one line in `keys.rs`, then its use in its section's resolver
//! (which destructures the section's keys, so a key nobody reads does not compile), and its
//! row in `docs/configuration.md`.
//!
//! This module opens no connection and reads no store: it parses and checks.

mod auth;
mod diagnostics;
mod effective;
mod errors;
mod format;
mod keys;
mod nearest;
mod origins;
mod secret;
mod sections;
#[cfg(test)]
mod tests;
mod variables;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use idmint::IdFormat;
use idmint::segment::SegmentConfig;
use idmint::snowflake::{CachedConfig, SnowflakeConfig};
use idmint_core::Tag;
use idmint_store::StoreUrl;

pub use auth::{ADMIN_TOKEN_ENV, AuthSection, ClientSection};
pub use effective::EffectiveConfig;
pub use errors::{ConfigError, ConfigErrors, FILE_PROBLEMS_MAX};
pub use keys::{
    FLAG_KEYS, FileConfig, FormatSection, LimitsSection, Overrides, SegmentSection,
    SnowflakeSection,
};
pub use origins::env_var;
pub use secret::{SECRET_MASK, Secret, SecretUrl};
pub use variables::{OTHER_VARIABLES, TEST_VARIABLE_PREFIX, VARIABLE_PREFIX};

use crate::auth::Auth;
use crate::limits::HttpLimits;
use diagnostics::read;
use origins::Layers;

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Address to serve HTTP on.
    pub listen: SocketAddr,
    /// Address to serve gRPC on; `None`: on the HTTP address.
    pub grpc_listen: Option<SocketAddr>,
    /// Where segment rows live.
    pub store: StoreUrl,
    /// The Redis that serves sequences; `None`: no sequences.
    pub redis: Option<SecretUrl>,
    /// The witness: a second store every allocation's end is raised in; `None`: none.
    pub witness: Option<StoreUrl>,
    /// This node's directory.
    pub data_dir: PathBuf,
    /// Segment serving tunables (with the state directory set, unless the store is
    /// `memory://`, which keeps nothing across restarts anyway).
    pub segment: SegmentConfig,
    /// Largest `count` of a batch request.
    pub batch_count_max: u64,
    /// The snowflake generator, unless disabled (holder, port and state directory are the
    /// server's to fill in).
    pub snowflake: Option<SnowflakeConfig>,
    /// Serve snowflake ids from a ring of pre-made ids (`snowflake.cached`).
    pub snowflake_cached: Option<CachedConfig>,
    /// Public id formats of segment tags (`[format.TAG]`).
    pub formats: Vec<TagFormat>,
    /// Didi Tinyid's routes on a Tinyid database (`[tinyid]`); `None`: not served.
    pub tinyid: Option<idmint::node::TinyidNodeConfig>,
    /// **Unsafe** (`strict.unsafe_ignore_lease_loss`, off by default): a strict tag's owner
    /// that can no longer prove its lease keeps serving from its window.
    pub strict_unsafe_ignore_lease_loss: bool,
    /// The engines `/ready` and gRPC health wait for (`ready_engines`).
    pub ready_engines: Vec<idmint::node::Engine>,
    /// The admin token and client tokens (`[auth]`, `IDMINT_ADMIN_TOKEN`).
    pub auth: Auth,
    /// Connection and request limits (`[limits]`).
    pub http_limits: HttpLimits,
    /// Every key as it was resolved, and where from: what `idmint config check` prints.
    pub effective: EffectiveConfig,
}

/// A tag's public id format, resolved from its `[format.TAG]` section.
#[derive(Debug, Clone)]
pub struct TagFormat {
    /// The tag.
    pub tag: Tag,
    /// Template, time zone and permutation.
    pub format: IdFormat,
    /// Whether a key change is forced (`force_key_change`).
    pub force_key_change: bool,
}

impl Settings {
    /// Reads the config file (when given), then resolves and checks every value as
    /// [`Settings::resolve`] does. The problems of the file (syntax, unknown keys, types)
    /// and of the values are reported together. Connects to nothing.
    pub fn load(
        path: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
        flags: &Overrides,
    ) -> Result<Settings, ConfigErrors> {
        let (file, problems) = match path {
            Some(path) => FileConfig::parse_lenient(&read(path)?, &path.display().to_string()),
            None => (FileConfig::default(), Vec::new()),
        };
        Settings::checked(&file, problems, env, flags)
    }

    /// [`Settings::resolve`], with the `problems` reading the file found before.
    fn checked(
        file: &FileConfig,
        mut problems: Vec<ConfigError>,
        env: &dyn Fn(&str) -> Option<String>,
        flags: &Overrides,
    ) -> Result<Settings, ConfigErrors> {
        match Settings::resolve(file, env, flags) {
            Ok(settings) if problems.is_empty() => Ok(settings),
            Ok(_) => Err(ConfigErrors(problems)),
            Err(more) => {
                problems.extend(more.0);
                Err(ConfigErrors(problems))
            }
        }
    }

    /// [`Settings::load`], and the `IDMINT_*` variables among `names` (the environment's
    /// names) that idmint does not read: most likely misspelled, their values ignored. An
    /// invalid configuration has them among its problems; a valid one is returned with them
    /// (`None`: none), for the caller to refuse (`idmint config check`) or warn about
    /// (`idmint serve`).
    pub fn load_checked(
        path: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
        flags: &Overrides,
        names: impl IntoIterator<Item = String>,
    ) -> Result<(Settings, Option<ConfigErrors>), ConfigErrors> {
        let (file, problems) = match path {
            Some(path) => FileConfig::parse_lenient(&read(path)?, &path.display().to_string()),
            None => (FileConfig::default(), Vec::new()),
        };
        // The variables a file's `key_env` and `token_env` name are read: known.
        let unknown = variables::unknown_variables(names, &file);
        match Settings::checked(&file, problems, env, flags) {
            Ok(settings) => Ok((settings, Some(ConfigErrors(unknown)).filter(|u| !u.0.is_empty()))),
            Err(mut errors) => {
                errors.0.extend(unknown);
                Err(errors)
            }
        }
    }

    /// Resolves flag > env > file > default and checks every value; `env` looks a variable
    /// up (`std::env::var` in the binary, a map in tests). Every problem is reported.
    pub fn resolve(
        file: &FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
        flags: &Overrides,
    ) -> Result<Settings, ConfigErrors> {
        let mut l = Layers::new(env, &file.source);
        let mut eff = file.clone();
        let top = eff.layer(&mut l, flags);
        let segment = eff.segment.layer(&mut l);
        let segment = sections::segment_config(&mut l, segment);
        let batch = eff.limits.layer_batch(&mut l);
        let keys::TopKeys { listen, grpc_listen, store, redis, witness, data_dir, ready_engines } =
            top;

        let listen_addr = l.check(
            &listen.origin,
            socket_addr(&listen.value).map_err(|reason| {
                format!("{reason}; use e.g. 127.0.0.1:8080, localhost:8080 or 0.0.0.0:8080")
            }),
        );
        // Empty: gRPC on the HTTP port.
        let grpc_listen_addr = match grpc_listen.value.trim() {
            "" => Some(None),
            text => l
                .check(
                    &grpc_listen.origin,
                    socket_addr(text).map_err(|reason| {
                        format!(
                            "{reason}; use e.g. 127.0.0.1:9090 or localhost:9090, or leave it \
                             empty to serve gRPC on the HTTP port"
                        )
                    }),
                )
                .map(Some),
        };
        if let (Some(http), Some(Some(grpc))) = (listen_addr, grpc_listen_addr)
            && http.port() != 0
            && http.port() == grpc.port()
        {
            l.refuse(
                &grpc_listen.origin,
                format!(
                    "{grpc} is the HTTP address's port too; leave grpc_listen empty to serve \
                     gRPC on the HTTP port, or name another port"
                ),
            );
        }
        let store_url = l.check(&store.origin, StoreUrl::parse(store.value.expose()));
        let witness_url = sections::witness_url(&mut l, &witness, store_url.as_ref());
        if data_dir.value.trim().is_empty() {
            l.refuse(&data_dir.origin, "the data directory is empty; name a directory");
        }
        let data_dir_path = PathBuf::from(&data_dir.value);
        let segment = match store_url {
            Some(StoreUrl::Memory) => segment,
            _ => segment.with_state_dir(&data_dir_path),
        };
        let batch_count_max = sections::batch_count_max(&mut l, &batch);
        // An empty URL is none: no sequences.
        let redis = Some(redis.value).filter(|url| !url.expose().trim().is_empty());
        let snowflake_keys = eff.snowflake.layer(&mut l);
        let snowflake_set = snowflake_keys.any_set();
        let snowflake_enabled = snowflake_keys.enabled.value;
        let (snowflake, snowflake_cached) = sections::snowflake_config(&mut l, snowflake_keys);
        let formats = format::tag_formats(&mut l, &mut eff.format);
        let tinyid_keys = eff.tinyid.layer(&mut l);
        let tinyid_enabled = tinyid_keys.enabled.value;
        let tinyid = sections::tinyid_config(&mut l, tinyid_keys, store_url.as_ref(), &segment);
        let used = sections::EnginesUsed {
            snowflake_set,
            snowflake: snowflake_enabled,
            tinyid: tinyid_enabled,
            sequences: redis.is_some(),
        };
        let ready_engines = sections::ready_engines(&mut l, &ready_engines, &used);
        let keys::StrictKeys { unsafe_ignore_lease_loss } = eff.strict.layer(&mut l);
        if unsafe_ignore_lease_loss.value {
            tracing::warn!(
                "strict.unsafe_ignore_lease_loss is set: strict tags lose real-time order when \
                 an owner loses its lease (a test control only)"
            );
        }
        let auth = auth::auth_config(&mut l, &mut eff.auth);
        let http_keys = eff.limits.layer_http(&mut l);
        let http_limits = sections::http_limits(&mut l, http_keys);
        if let (Some(addr), Some(auth)) = (listen_addr, &auth)
            && let Err(reason) = crate::auth::check_exposure(addr, auth)
        {
            l.refuse(&listen.origin, reason);
        }
        // gRPC on its own port serves ids as HTTP does: loopback only without a token too.
        if let (Some(Some(addr)), Some(auth)) = (grpc_listen_addr, &auth)
            && let Err(reason) = crate::auth::check_exposure(addr, auth)
        {
            l.refuse(&grpc_listen.origin, format!("grpc_listen: {reason}"));
        }
        let Layers { origins, problems, .. } = l;
        match (listen_addr, grpc_listen_addr, store_url, auth, http_limits) {
            (Some(listen), Some(grpc_listen), Some(store), Some(auth), Some(http_limits))
                if problems.is_empty() =>
            {
                Ok(Settings {
                    listen,
                    grpc_listen,
                    store,
                    redis,
                    witness: witness_url.flatten(),
                    data_dir: data_dir_path,
                    segment,
                    batch_count_max,
                    snowflake,
                    snowflake_cached,
                    formats,
                    tinyid,
                    strict_unsafe_ignore_lease_loss: unsafe_ignore_lease_loss.value,
                    ready_engines,
                    auth,
                    http_limits,
                    effective: EffectiveConfig { file: eff, origins },
                })
            }
            _ => Err(ConfigErrors(problems)),
        }
    }
}

impl Settings {
    /// The file descriptors a node with these settings keeps beside its connections:
    /// `DESCRIPTORS_RESERVED_BASE`, its store's and Tinyid's (`pool_max` connections of a
    /// database, `SQLITE_DESCRIPTORS`, `REDIS_DESCRIPTORS`), and the sequences' Redis.
    pub fn descriptors_reserved(&self) -> u64 {
        let tinyid = self.tinyid.as_ref().map_or(0, |t| t.store.descriptors_reserved());
        let redis = if self.redis.is_some() { idmint_store::REDIS_DESCRIPTORS } else { 0 };
        crate::limits::DESCRIPTORS_RESERVED_BASE
            + self.store.descriptors_reserved()
            + tinyid
            + redis
    }

    /// How many listeners serve: HTTP, and gRPC on its own port when `grpc_listen` is set.
    pub fn listeners(&self) -> u64 {
        if self.grpc_listen.is_some() { 2 } else { 1 }
    }
}

/// An address to listen on: an IP address and port (`127.0.0.1:8080`, `[::1]:8080`), or a
/// host name and port (`localhost:8080`) resolved now, once, through the system's resolver
/// (`/etc/hosts`, then DNS). A name with several addresses listens on its first IPv4 one (on
/// its first one when it has no IPv4 address): one socket, the address `serve` announces.
fn socket_addr(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("{text:?} has no port: write HOST:PORT"));
    };
    if host.is_empty() || port.parse::<u16>().is_err() {
        return Err(format!("{text:?} is not HOST:PORT with a port from 0 to 65535"));
    }
    let addrs: Vec<SocketAddr> = text
        .to_socket_addrs()
        .map_err(|e| format!("the host name {host:?} of {text:?} does not resolve: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|addr| addr.is_ipv4())
        .or_else(|| addrs.first())
        .copied()
        .ok_or_else(|| format!("the host name {host:?} of {text:?} resolves to no address"))
}
