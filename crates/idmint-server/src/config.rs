//! Configuration: a TOML file, `IDMINT_*` environment variables and command-line flags,
//! resolved with the precedence flag > env > file > default. Unknown keys are errors, and
//! every error names where the bad value came from and what is accepted.
//!
//! | file key                          | env variable                          | default |
//! |-----------------------------------|---------------------------------------|---------|
//! | `listen`                          | `IDMINT_LISTEN`                       | `127.0.0.1:8080` |
//! | `store`                           | `IDMINT_STORE`                        | `sqlite://./idmint-data/idmint.db` |
//! | `data_dir`                        | `IDMINT_DATA_DIR`                     | `./idmint-data` |
//! | `redis`                           | `IDMINT_REDIS`                        | none (no sequences) |
//! | `segment.preload_ratio`           | `IDMINT_SEGMENT_PRELOAD_RATIO`        | `0.1` |
//! | `segment.refill_wait_ms`          | `IDMINT_SEGMENT_REFILL_WAIT_MS`       | `1000` |
//! | `segment.store_call_timeout_ms`   | `IDMINT_SEGMENT_STORE_CALL_TIMEOUT_MS`| `3000` |
//! | `segment.tag_refresh_ms`          | `IDMINT_SEGMENT_TAG_REFRESH_MS`       | `60000` |
//! | `segment.segment_duration_s`      | `IDMINT_SEGMENT_SEGMENT_DURATION_S`   | `900` |
//! | `segment.adaptive_step`           | `IDMINT_SEGMENT_ADAPTIVE_STEP`        | `true` |
//! | `limits.batch_count_max`          | `IDMINT_LIMITS_BATCH_COUNT_MAX`       | `100000` |
//! | `snowflake.enabled`               | `IDMINT_SNOWFLAKE_ENABLED`            | `true` |
//! | `snowflake.layout`                | `IDMINT_SNOWFLAKE_LAYOUT`             | `snowflake` |
//! | `snowflake.worker`                | `IDMINT_SNOWFLAKE_WORKER`             | `lease` |
//! | `snowflake.tolerance_ms`          | `IDMINT_SNOWFLAKE_TOLERANCE_MS`       | `10` |
//! | `snowflake.borrow_max_lead_ms`    | `IDMINT_SNOWFLAKE_BORROW_MAX_LEAD_MS` | none (no borrowing) |
//! | `snowflake.max_vibration`         | `IDMINT_SNOWFLAKE_MAX_VIBRATION`      | `0` |
//! | `snowflake.time_window_ms`        | `IDMINT_SNOWFLAKE_TIME_WINDOW_MS`     | `3000` |
//! | `snowflake.lease_ttl_ms`          | `IDMINT_SNOWFLAKE_LEASE_TTL_MS`       | `10000` |
//! | `snowflake.lease_margin_ms`       | `IDMINT_SNOWFLAKE_LEASE_MARGIN_MS`    | `10000` |
//! | `snowflake.refuse_expiring`       | `IDMINT_SNOWFLAKE_REFUSE_EXPIRING`    | `false` (warn only) |
//! | `snowflake.cached`                | `IDMINT_SNOWFLAKE_CACHED`             | `false` |
//! | `snowflake.ring_capacity`         | `IDMINT_SNOWFLAKE_RING_CAPACITY`      | `65536` |
//! | `snowflake.ring_max_lead_ms`      | `IDMINT_SNOWFLAKE_RING_MAX_LEAD_MS`   | `10000` |
//! | `format.TAG.template`             | —                                     | `{id}` |
//! | `format.TAG.time_zone`            | —                                     | `UTC` |
//! | `format.TAG.key` / `key_env`      | the variable `key_env` names          | none (ids not permuted) |
//! | `format.TAG.bits`                 | —                                     | required with a key |
//! | `format.TAG.force_key_change`     | —                                     | `false` |
//! | `auth.admin_token`                | `IDMINT_ADMIN_TOKEN`                  | none (loopback only) |
//! | `auth.clients.NAME.token` / `token_env` | the variable `token_env` names  | none |
//! | `auth.clients.NAME.tags`          | —                                     | required |
//! | `limits.client_in_flight_max`     | `IDMINT_LIMITS_CLIENT_IN_FLIGHT_MAX`  | `64` |
//! | `limits.request_timeout_ms`       | `IDMINT_LIMITS_REQUEST_TIMEOUT_MS`    | `15000` |
//! | `limits.idle_timeout_ms`          | `IDMINT_LIMITS_IDLE_TIMEOUT_MS`       | `30000` |
//! | `limits.connections_max`          | `IDMINT_LIMITS_CONNECTIONS_MAX`       | `4096` |

use std::collections::BTreeMap;
use std::fmt::Display;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use idmint::{CachedConfig, IdFormat, SegmentConfig, SnowflakeConfig, WorkerIdSource};
use idmint_core::limits::TAG_COUNT_MAX;
use idmint_core::limits::{
    BATCH_COUNT_MAX, REFILL_WAIT_MS_DEFAULT, SEGMENT_DURATION_S_DEFAULT,
    STORE_CALL_TIMEOUT_MS_DEFAULT, TAG_REFRESH_MS_DEFAULT,
};
use idmint_core::permute::{Permutation, PermuteKey};
use idmint_core::snowflake::Layout;
use idmint_core::{PreloadRatio, Tag};
use idmint_store::{DEFAULT_STORE_URL, StoreUrl};

use crate::auth::{Auth, CLIENTS_MAX, Client, SecretText, Token};
use crate::limits::HttpLimits;
use serde::Deserialize;

/// The address `idmint serve` listens on by default: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The node's own directory by default: the SQLite store's file (by default) and the
/// high-water marks of the store-regression guard.
pub const DEFAULT_DATA_DIR: &str = "./idmint-data";

/// The config file as written; every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `listen`: address and port to serve HTTP on.
    pub listen: Option<String>,
    /// `store`: store URL.
    pub store: Option<String>,
    /// `redis`: the Redis that serves sequences (`redis://HOST:PORT[/DB][?prefix=P]`).
    pub redis: Option<String>,
    /// `data_dir`: this node's directory (high-water marks; one node per directory).
    pub data_dir: Option<String>,
    /// `[segment]`: segment serving.
    #[serde(default)]
    pub segment: SegmentSection,
    /// `[limits]`: request limits.
    #[serde(default)]
    pub limits: LimitsSection,
    /// `[snowflake]`: the snowflake generator.
    #[serde(default)]
    pub snowflake: SnowflakeSection,
    /// `[format.TAG]`: public id formats of segment tags, by tag.
    #[serde(default)]
    pub format: BTreeMap<String, FormatSection>,
    /// `[auth]`: the admin token and client tokens.
    #[serde(default)]
    pub auth: AuthSection,
}

/// The `[auth]` section. Tokens are checked when the file is read and never printed.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// The admin token (prefer the `IDMINT_ADMIN_TOKEN` variable: a token in a file is
    /// easier to leak).
    pub admin_token: Option<SecretText>,
    /// `[auth.clients.NAME]`: clients with their own token, for the tags they name.
    #[serde(default)]
    pub clients: BTreeMap<String, ClientSection>,
}

/// An `[auth.clients.NAME]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// The client's token.
    pub token: Option<SecretText>,
    /// The name of an environment variable holding the client's token.
    pub token_env: Option<String>,
    /// The tags (and sequences) whose ids need this client's token (or the admin token).
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A `[format.TAG]` section: how the tag's ids are shown to clients.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormatSection {
    /// Output template, e.g. `ORD-{date:%Y%m%d}-{id:base36:8}` (default `{id}`).
    pub template: Option<String>,
    /// Time zone of `{date}`: `UTC`, `+08:00` or an IANA name (default UTC).
    pub time_zone: Option<String>,
    /// The permutation key, 32 hex digits. Prefer `key_env`: a key in a file is easier to
    /// leak.
    pub key: Option<String>,
    /// The name of an environment variable holding the key.
    pub key_env: Option<String>,
    /// Width of the permuted public ids in bits (16 to 63); required with a key.
    pub bits: Option<u32>,
    /// Serve under a key other than the one recorded for the tag (or a first key on a tag
    /// that already allocated ids). Only for tags whose ids were never published.
    pub force_key_change: Option<bool>,
}

/// The `[snowflake]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnowflakeSection {
    /// Whether the node serves snowflake ids.
    pub enabled: Option<bool>,
    /// A preset: `snowflake`, `sonyflake`, `uid`, `js-safe`.
    pub layout: Option<String>,
    /// `lease`, `store-assigned`, `ordinal` or `static:N`.
    pub worker: Option<String>,
    /// A clock step back up to this is waited out, in ms.
    pub tolerance_ms: Option<u64>,
    /// Borrowed time: run at most this far ahead of the clock instead of waiting, in ms.
    pub borrow_max_lead_ms: Option<u64>,
    /// Sequence vibration: a new unit's first sequence cycles `0..=max_vibration`.
    pub max_vibration: Option<u64>,
    /// How far ahead of the clock the time mark is persisted, in ms.
    pub time_window_ms: Option<u64>,
    /// Worker-lease TTL, in ms.
    pub lease_ttl_ms: Option<u64>,
    /// Wait after a lease expired before its worker id may be reused, in ms.
    pub lease_margin_ms: Option<u64>,
    /// Refuse (rather than warn about) a layout whose time runs out within 10 years.
    pub refuse_expiring: Option<bool>,
    /// Serve snowflake ids from a ring of pre-made ids on borrowed time (uid-generator's
    /// CachedUidGenerator).
    pub cached: Option<bool>,
    /// Ring capacity in ids (a power of two holding one whole time unit).
    pub ring_capacity: Option<u64>,
    /// How far the ring's borrowed time may run ahead of the clock, in ms.
    pub ring_max_lead_ms: Option<u64>,
}

/// The `[segment]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentSection {
    /// Share of a segment used before the next one is requested, in (0, 1].
    pub preload_ratio: Option<f64>,
    /// How long a request waits for a refill when both segments are spent, in ms.
    pub refill_wait_ms: Option<u64>,
    /// Bound on one store call, in ms.
    pub store_call_timeout_ms: Option<u64>,
    /// How often tags deleted from the store are dropped, in ms.
    pub tag_refresh_ms: Option<u64>,
    /// How long one segment should last at the forecast rate, in seconds.
    pub segment_duration_s: Option<u64>,
    /// Whether the step follows the consumption rate (else: always the tag's step).
    pub adaptive_step: Option<bool>,
}

/// The `[limits]` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Largest `count` of a batch request (at most 100 000).
    pub batch_count_max: Option<u64>,
    /// Requests one client address may have in flight (at most 1 024).
    pub client_in_flight_max: Option<u32>,
    /// How long one request may take, in ms (100 to 60 000).
    pub request_timeout_ms: Option<u64>,
    /// How long a connection may stay without a byte read or written, in ms (above the
    /// request timeout, at most 600 000).
    pub idle_timeout_ms: Option<u64>,
    /// Connections open at once (at most 65 536).
    pub connections_max: Option<usize>,
}

/// Values given as command-line flags (highest precedence).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--store`.
    pub store: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<String>,
    /// `--redis`.
    pub redis: Option<String>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Address to serve HTTP on.
    pub listen: SocketAddr,
    /// Where segment rows live.
    pub store: StoreUrl,
    /// The Redis that serves sequences; `None`: no sequences.
    pub redis: Option<String>,
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
    /// The admin token and client tokens (`[auth]`, `IDMINT_ADMIN_TOKEN`).
    pub auth: Auth,
    /// Connection and request limits (`[limits]`).
    pub http_limits: HttpLimits,
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

/// A configuration that cannot be used; the message names its origin and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {reason}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        reason: String,
    },
    /// The config file is not valid TOML or has unknown keys or wrongly typed values.
    #[error("config file {path} is invalid: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// The parser's message, with line and column.
        reason: String,
    },
    /// A value is out of range or malformed.
    #[error("{origin}: {reason}")]
    Invalid {
        /// Where the value came from: a flag, an environment variable or a file key.
        origin: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
}

impl FileConfig {
    /// Reads and parses a config file.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        FileConfig::parse(&text, &path.display().to_string())
    }

    /// Parses config text; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<FileConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_string(),
            reason: parse_error(text, &e),
        })
    }
}

/// The parser's message, which quotes the offending line, unless that line may hold a
/// secret (a token or a key): then only its position and the message.
fn parse_error(text: &str, error: &toml::de::Error) -> String {
    let Some(span) = error.span() else { return error.to_string() };
    let line_start = text[..span.start.min(text.len())].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[line_start..].find('\n').map_or(text.len(), |i| line_start + i);
    let line = text[line_start..line_end].to_ascii_lowercase();
    if line.contains("token") || line.contains("key") {
        let number = text[..line_start].matches('\n').count() + 1;
        format!("line {number}: {} (the line is not shown: it may hold a secret)", error.message())
    } else {
        error.to_string()
    }
}

/// A value and where it came from, for error messages.
struct Sourced<T> {
    value: T,
    origin: String,
}

impl Settings {
    /// Resolves flag > env > file > default. `env` looks a variable up (`std::env::var` in
    /// the binary, a map in tests).
    pub fn resolve(
        file: &FileConfig,
        env: &dyn Fn(&str) -> Option<String>,
        flags: &Overrides,
    ) -> Result<Settings, ConfigError> {
        let listen = layered(
            flags.listen.as_deref().map(|v| (v, "--listen")),
            env,
            "IDMINT_LISTEN",
            file.listen.clone(),
            "listen",
            DEFAULT_LISTEN.to_string(),
        )?;
        let store = layered(
            flags.store.as_deref().map(|v| (v, "--store")),
            env,
            "IDMINT_STORE",
            file.store.clone(),
            "store",
            DEFAULT_STORE_URL.to_string(),
        )?;
        let data_dir = layered(
            flags.data_dir.as_deref().map(|v| (v, "--data-dir")),
            env,
            "IDMINT_DATA_DIR",
            file.data_dir.clone(),
            "data_dir",
            DEFAULT_DATA_DIR.to_string(),
        )?;
        let redis = match flags.redis.as_deref() {
            Some(url) => Some(url.to_string()),
            None => env("IDMINT_REDIS").or_else(|| file.redis.clone()),
        }
        .filter(|url| !url.trim().is_empty());
        let seg = &file.segment;
        let preload = layered(
            None,
            env,
            "IDMINT_SEGMENT_PRELOAD_RATIO",
            seg.preload_ratio,
            "segment.preload_ratio",
            0.1,
        )?;
        let refill_wait = layered(
            None,
            env,
            "IDMINT_SEGMENT_REFILL_WAIT_MS",
            seg.refill_wait_ms,
            "segment.refill_wait_ms",
            REFILL_WAIT_MS_DEFAULT,
        )?;
        let store_timeout = layered(
            None,
            env,
            "IDMINT_SEGMENT_STORE_CALL_TIMEOUT_MS",
            seg.store_call_timeout_ms,
            "segment.store_call_timeout_ms",
            STORE_CALL_TIMEOUT_MS_DEFAULT,
        )?;
        let refresh = layered(
            None,
            env,
            "IDMINT_SEGMENT_TAG_REFRESH_MS",
            seg.tag_refresh_ms,
            "segment.tag_refresh_ms",
            TAG_REFRESH_MS_DEFAULT,
        )?;
        let duration = layered(
            None,
            env,
            "IDMINT_SEGMENT_SEGMENT_DURATION_S",
            seg.segment_duration_s,
            "segment.segment_duration_s",
            SEGMENT_DURATION_S_DEFAULT,
        )?;
        let adaptive = layered(
            None,
            env,
            "IDMINT_SEGMENT_ADAPTIVE_STEP",
            seg.adaptive_step,
            "segment.adaptive_step",
            true,
        )?;
        let batch = layered(
            None,
            env,
            "IDMINT_LIMITS_BATCH_COUNT_MAX",
            file.limits.batch_count_max,
            "limits.batch_count_max",
            BATCH_COUNT_MAX,
        )?;

        let invalid = |origin: &str, reason: &dyn Display| ConfigError::Invalid {
            origin: origin.to_string(),
            reason: reason.to_string(),
        };
        let listen_addr = listen.value.parse::<SocketAddr>().map_err(|_| {
            invalid(
                &listen.origin,
                &format_args!(
                    "{:?} is not an IP address and port; use e.g. 127.0.0.1:8080 or 0.0.0.0:8080",
                    listen.value
                ),
            )
        })?;
        let store_url = StoreUrl::parse(&store.value).map_err(|e| invalid(&store.origin, &e))?;
        let ratio = PreloadRatio::new(preload.value).map_err(|e| invalid(&preload.origin, &e))?;
        let segment = SegmentConfig::default()
            .with_preload_ratio(ratio)
            .with_refill_wait_ms(refill_wait.value)
            .map_err(|e| invalid(&refill_wait.origin, &e))?
            .with_store_call_timeout_ms(store_timeout.value)
            .map_err(|e| invalid(&store_timeout.origin, &e))?
            .with_tag_refresh_ms(refresh.value)
            .map_err(|e| invalid(&refresh.origin, &e))?
            .with_segment_duration_s(duration.value)
            .map_err(|e| invalid(&duration.origin, &e))?
            .with_adaptive_step(adaptive.value);
        if data_dir.value.trim().is_empty() {
            return Err(invalid(
                &data_dir.origin,
                &"the data directory is empty; name a directory",
            ));
        }
        let data_dir_path = PathBuf::from(&data_dir.value);
        let segment = match store_url {
            StoreUrl::Memory => segment,
            _ => segment.with_state_dir(&data_dir_path),
        };
        if !(1..=BATCH_COUNT_MAX).contains(&batch.value) {
            return Err(invalid(
                &batch.origin,
                &format_args!(
                    "batch_count_max = {} is out of range; use 1 to {BATCH_COUNT_MAX} \
                     (configuration may lower a limit, never raise it)",
                    batch.value
                ),
            ));
        }
        let snowflake = snowflake_config(&file.snowflake, env)?;
        let snowflake_cached = match &snowflake {
            Some(config) => cached_config(&file.snowflake, env, &config.layout)?,
            None => None,
        };
        let formats = tag_formats(&file.format, env)?;
        let auth = auth_config(&file.auth, env)?;
        let http_limits = http_limits(&file.limits, env)?;
        if let Err(reason) = crate::auth::check_exposure(listen_addr, &auth) {
            return Err(invalid(&listen.origin, &reason));
        }
        Ok(Settings {
            listen: listen_addr,
            store: store_url,
            redis,
            data_dir: data_dir_path,
            segment,
            batch_count_max: batch.value,
            snowflake,
            snowflake_cached,
            formats,
            auth,
            http_limits,
        })
    }
}

/// The `[format.TAG]` sections resolved: tag names, templates, time zones and keys checked.
/// The key is read from the file or from the variable `key_env` names, and appears in no
/// error message.
fn tag_formats(
    sections: &BTreeMap<String, FormatSection>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<TagFormat>, ConfigError> {
    if sections.len() > TAG_COUNT_MAX {
        return Err(ConfigError::Invalid {
            origin: "config key format".to_string(),
            reason: format!("{} formats; at most {TAG_COUNT_MAX}", sections.len()),
        });
    }
    let mut formats = Vec::with_capacity(sections.len());
    for (name, section) in sections {
        let origin = format!("config key format.{name}");
        let invalid = |reason: String| ConfigError::Invalid { origin: origin.clone(), reason };
        let tag = Tag::parse(name).map_err(|e| invalid(e.to_string()))?;
        let zone =
            idmint::time_zone(section.time_zone.as_deref().unwrap_or("UTC")).map_err(&invalid)?;
        let key = match (&section.key, &section.key_env) {
            (Some(_), Some(_)) => {
                return Err(invalid("give key or key_env, not both".to_string()));
            }
            (Some(text), None) => {
                Some(PermuteKey::parse_hex(text).map_err(|e| invalid(e.to_string()))?)
            }
            (None, Some(var)) => {
                let text = env(var).ok_or_else(|| {
                    invalid(format!(
                        "key_env names {var:?}, which is not set; export it with the tag's key \
                         (32 hex digits)"
                    ))
                })?;
                let key = PermuteKey::parse_hex(&text)
                    .map_err(|e| invalid(format!("the key in {var}: {e}")))?;
                Some(key)
            }
            (None, None) => None,
        };
        let permutation = match (key, section.bits) {
            (Some(key), Some(bits)) => {
                Some(Permutation::new(&key, bits).map_err(|e| invalid(e.to_string()))?)
            }
            (Some(_), None) => {
                return Err(invalid(
                    "a key needs bits, the width of public ids (16 to 63), e.g. bits = 41 \
                     for ids up to 2.2 × 10^12"
                        .to_string(),
                ));
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "bits is the width of permuted ids and needs a key or key_env".to_string(),
                ));
            }
            (None, None) => None,
        };
        let template = section.template.as_deref().unwrap_or(idmint::TEMPLATE_DEFAULT);
        let format =
            IdFormat::new(template, zone, permutation).map_err(|e| invalid(e.to_string()))?;
        let force_key_change = section.force_key_change.unwrap_or(false);
        formats.push(TagFormat { tag, format, force_key_change });
    }
    Ok(formats)
}

/// The `[auth]` section resolved: `IDMINT_ADMIN_TOKEN` beats `admin_token`; each client's
/// token from `token` or the variable `token_env` names. No error shows a token.
fn auth_config(
    section: &AuthSection,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Auth, ConfigError> {
    let invalid =
        |origin: &str, reason: String| ConfigError::Invalid { origin: origin.to_string(), reason };
    let admin = match env("IDMINT_ADMIN_TOKEN").filter(|t| !t.is_empty()) {
        Some(text) => Some(Token::parse(&text).map_err(|e| invalid("IDMINT_ADMIN_TOKEN", e))?),
        None => match &section.admin_token {
            Some(text) => {
                Some(Token::parse(&text.0).map_err(|e| invalid("config key auth.admin_token", e))?)
            }
            None => None,
        },
    };
    if section.clients.len() > CLIENTS_MAX {
        return Err(invalid(
            "config key auth.clients",
            format!("{} clients; at most {CLIENTS_MAX}", section.clients.len()),
        ));
    }
    let mut clients = Vec::with_capacity(section.clients.len());
    for (name, client) in &section.clients {
        let origin = format!("config key auth.clients.{name}");
        let token = match (&client.token, &client.token_env) {
            (Some(text), None) => Token::parse(&text.0).map_err(|e| invalid(&origin, e))?,
            (None, Some(var)) => {
                let text = env(var).ok_or_else(|| {
                    invalid(&origin, format!("token_env names {var:?}, which is not set"))
                })?;
                Token::parse(&text)
                    .map_err(|e| invalid(&origin, format!("the token in {var}: {e}")))?
            }
            _ => return Err(invalid(&origin, "give token or token_env (one of them)".to_string())),
        };
        if client.tags.is_empty() {
            return Err(invalid(
                &origin,
                "tags is empty; name the tags whose ids need this client's token".to_string(),
            ));
        }
        let tags = client
            .tags
            .iter()
            .map(|t| Tag::parse(t).map_err(|e| invalid(&origin, e.to_string())))
            .collect::<Result<Vec<Tag>, ConfigError>>()?;
        clients.push(Client { name: name.clone(), token, tags });
    }
    Ok(Auth::new(admin, clients))
}

/// The HTTP limits of `[limits]`, each with its `IDMINT_LIMITS_*` variable, checked against
/// their bounds.
fn http_limits(
    section: &LimitsSection,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<HttpLimits, ConfigError> {
    let defaults = HttpLimits::default();
    let in_flight = layered(
        None,
        env,
        "IDMINT_LIMITS_CLIENT_IN_FLIGHT_MAX",
        section.client_in_flight_max,
        "limits.client_in_flight_max",
        defaults.client_in_flight_max,
    )?;
    let timeout = layered(
        None,
        env,
        "IDMINT_LIMITS_REQUEST_TIMEOUT_MS",
        section.request_timeout_ms,
        "limits.request_timeout_ms",
        defaults.request_timeout_ms,
    )?;
    let idle = layered(
        None,
        env,
        "IDMINT_LIMITS_IDLE_TIMEOUT_MS",
        section.idle_timeout_ms,
        "limits.idle_timeout_ms",
        defaults.idle_timeout_ms,
    )?;
    let connections = layered(
        None,
        env,
        "IDMINT_LIMITS_CONNECTIONS_MAX",
        section.connections_max,
        "limits.connections_max",
        defaults.connections_max,
    )?;
    let limits = HttpLimits {
        client_in_flight_max: in_flight.value,
        request_timeout_ms: timeout.value,
        idle_timeout_ms: idle.value,
        connections_max: connections.value,
    };
    limits
        .check()
        .map_err(|reason| ConfigError::Invalid { origin: "[limits]".to_string(), reason })?;
    Ok(limits)
}

/// The `[snowflake]` section resolved: `None` when disabled.
fn snowflake_config(
    sf: &SnowflakeSection,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<SnowflakeConfig>, ConfigError> {
    let enabled =
        layered(None, env, "IDMINT_SNOWFLAKE_ENABLED", sf.enabled, "snowflake.enabled", true)?;
    if !enabled.value {
        return Ok(None);
    }
    let text = |key: &str, env_name: &str, file: &Option<String>, default: &str| {
        layered(None, env, env_name, file.clone(), key, default.to_string())
    };
    let number = |key: &str, env_name: &str, file: Option<u64>, default: u64| {
        layered(None, env, env_name, file, key, default)
    };
    let invalid =
        |origin: &str, reason: String| ConfigError::Invalid { origin: origin.to_string(), reason };
    let layout_name = text("snowflake.layout", "IDMINT_SNOWFLAKE_LAYOUT", &sf.layout, "snowflake")?;
    let layout = Layout::preset(&layout_name.value).ok_or_else(|| {
        invalid(
            &layout_name.origin,
            format!(
                "{:?} is not a layout; use one of {}",
                layout_name.value,
                idmint_core::snowflake::PRESETS
                    .iter()
                    .map(|(name, _)| *name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )
    })?;
    let worker = text("snowflake.worker", "IDMINT_SNOWFLAKE_WORKER", &sf.worker, "lease")?;
    let source = match worker.value.as_str() {
        "lease" => WorkerIdSource::Lease,
        "store-assigned" => WorkerIdSource::StoreAssigned,
        "ordinal" => WorkerIdSource::Ordinal,
        other => match other.strip_prefix("static:").and_then(|n| n.parse::<u64>().ok()) {
            Some(id) if id <= layout.max_worker() => WorkerIdSource::Static(id),
            _ => {
                return Err(invalid(
                    &worker.origin,
                    format!(
                        "{other:?} is not a worker source; use lease, store-assigned, ordinal \
                         or static:N with N from 0 to {}",
                        layout.max_worker()
                    ),
                ));
            }
        },
    };
    let tolerance = number(
        "snowflake.tolerance_ms",
        "IDMINT_SNOWFLAKE_TOLERANCE_MS",
        sf.tolerance_ms,
        idmint::TOLERANCE_MS_DEFAULT,
    )?;
    if tolerance.value > idmint::TOLERANCE_MS_MAX {
        return Err(invalid(
            &tolerance.origin,
            format!("{} is above {} ms", tolerance.value, idmint::TOLERANCE_MS_MAX),
        ));
    }
    let lead = layered(
        None,
        env,
        "IDMINT_SNOWFLAKE_BORROW_MAX_LEAD_MS",
        sf.borrow_max_lead_ms,
        "snowflake.borrow_max_lead_ms",
        0,
    )?;
    let vibration =
        number("snowflake.max_vibration", "IDMINT_SNOWFLAKE_MAX_VIBRATION", sf.max_vibration, 0)?;
    let window = number(
        "snowflake.time_window_ms",
        "IDMINT_SNOWFLAKE_TIME_WINDOW_MS",
        sf.time_window_ms,
        idmint::TIME_WINDOW_MS_DEFAULT,
    )?;
    if !(idmint::TIME_WINDOW_MS_MIN..=idmint::TIME_WINDOW_MS_MAX).contains(&window.value) {
        return Err(invalid(
            &window.origin,
            format!(
                "{} is outside {}..={} ms",
                window.value,
                idmint::TIME_WINDOW_MS_MIN,
                idmint::TIME_WINDOW_MS_MAX
            ),
        ));
    }
    let ttl = number(
        "snowflake.lease_ttl_ms",
        "IDMINT_SNOWFLAKE_LEASE_TTL_MS",
        sf.lease_ttl_ms,
        idmint::LEASE_TTL_MS_DEFAULT,
    )?;
    let margin = number(
        "snowflake.lease_margin_ms",
        "IDMINT_SNOWFLAKE_LEASE_MARGIN_MS",
        sf.lease_margin_ms,
        idmint::LEASE_MARGIN_MS_DEFAULT,
    )?;
    if !(idmint_store::LEASE_TTL_MS_MIN..=idmint_store::LEASE_TTL_MS_MAX).contains(&ttl.value) {
        return Err(invalid(
            &ttl.origin,
            format!(
                "{} is outside {}..={} ms",
                ttl.value,
                idmint_store::LEASE_TTL_MS_MIN,
                idmint_store::LEASE_TTL_MS_MAX
            ),
        ));
    }
    if margin.value > idmint_store::LEASE_MARGIN_MS_MAX {
        return Err(invalid(
            &margin.origin,
            format!("{} is above {} ms", margin.value, idmint_store::LEASE_MARGIN_MS_MAX),
        ));
    }
    let refuse = layered(
        None,
        env,
        "IDMINT_SNOWFLAKE_REFUSE_EXPIRING",
        sf.refuse_expiring,
        "snowflake.refuse_expiring",
        false,
    )?;
    let now_ms = idmint::Clock::now_ms(&idmint::SystemClock);
    let horizon = idmint_core::limits::LAYOUT_EXPIRY_HORIZON_MS;
    if let Some(warning) = layout.expiry_warning(now_ms, horizon) {
        if refuse.value {
            return Err(invalid(
                &layout_name.origin,
                format!("layout {}: {warning}; pick a layout with more time", layout_name.value),
            ));
        }
        tracing::warn!(layout = %layout_name.value, %warning, "snowflake layout runs out of time soon");
    }
    let mut config = SnowflakeConfig::new(&layout_name.value, layout);
    config.worker = source;
    config.tolerance_ms = tolerance.value;
    config.borrow_max_lead_ms = (lead.value > 0).then_some(lead.value);
    config.max_vibration = vibration.value;
    config.time_window_ms = window.value;
    config.lease_ttl_ms = ttl.value;
    config.lease_margin_ms = margin.value;
    Ok(Some(config))
}

/// The ring of pre-made snowflake ids, when `snowflake.cached` is on.
fn cached_config(
    sf: &SnowflakeSection,
    env: &dyn Fn(&str) -> Option<String>,
    layout: &Layout,
) -> Result<Option<CachedConfig>, ConfigError> {
    let cached =
        layered(None, env, "IDMINT_SNOWFLAKE_CACHED", sf.cached, "snowflake.cached", false)?;
    if !cached.value {
        return Ok(None);
    }
    let capacity = layered(
        None,
        env,
        "IDMINT_SNOWFLAKE_RING_CAPACITY",
        sf.ring_capacity,
        "snowflake.ring_capacity",
        idmint::CACHED_RING_CAPACITY_DEFAULT,
    )?;
    let lead = layered(
        None,
        env,
        "IDMINT_SNOWFLAKE_RING_MAX_LEAD_MS",
        sf.ring_max_lead_ms,
        "snowflake.ring_max_lead_ms",
        idmint::CACHED_MAX_LEAD_MS_DEFAULT,
    )?;
    let invalid = |origin: &str| {
        let origin = origin.to_string();
        move |reason| ConfigError::Invalid { origin, reason }
    };
    // The capacity alone first, so the error names the setting at fault.
    CachedConfig { capacity: capacity.value, max_lead_ms: 0 }
        .check(layout)
        .map_err(invalid(&capacity.origin))?;
    let config = CachedConfig { capacity: capacity.value, max_lead_ms: lead.value };
    config.check(layout).map_err(invalid(&lead.origin))?;
    Ok(Some(config))
}

/// One setting resolved flag > env > file > default, with where it came from. Flag and env
/// values are text and parsed here; file values arrive typed from the TOML parser.
fn layered<T: FromStr>(
    flag: Option<(&str, &str)>,
    env: &dyn Fn(&str) -> Option<String>,
    env_name: &str,
    file: Option<T>,
    file_key: &str,
    default: T,
) -> Result<Sourced<T>, ConfigError> {
    let given = match flag {
        Some((text, flag_name)) => Some((text.to_string(), flag_name.to_string())),
        None => env(env_name).map(|text| (text, env_name.to_string())),
    };
    if let Some((text, origin)) = given {
        let value = text.parse::<T>().map_err(|_| ConfigError::Invalid {
            origin: origin.clone(),
            reason: format!("{text:?} is not a valid value"),
        })?;
        return Ok(Sourced { value, origin });
    }
    Ok(match file {
        Some(value) => Sourced { value, origin: format!("config key {file_key}") },
        None => Sourced { value: default, origin: "default".to_string() },
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> =
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn tokens_are_checked_but_never_quoted_back() {
        let secret = "hunter2-hunter2-hunter2";
        for text in [
            format!("[auth]\nadmin_token = \"{secret}"),
            format!("[auth]\nadmin_token = \"{secret}\" nonsense"),
            format!("[auth.clients.shop]\ntoken = \"{secret}\"\ntags = 5\n"),
        ] {
            let error = FileConfig::parse(&text, "t.toml").unwrap_err().to_string();
            assert!(!error.contains("hunter2"), "{error}");
        }
        let file =
            FileConfig::parse(&format!("[auth]\nadmin_token = \"{secret}\""), "t.toml").unwrap();
        assert!(!format!("{file:?}").contains("hunter2"));
        let settings = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap();
        assert!(settings.auth.has_admin_token());
        assert!(!format!("{settings:?}").contains("hunter2"));
        let short = FileConfig::parse("[auth]\nadmin_token = \"hunter2\"", "t.toml").unwrap();
        let error = Settings::resolve(&short, &env(&[]), &Overrides::default()).unwrap_err();
        assert!(error.to_string().contains("16 to 512") && !error.to_string().contains("hunter2"));
    }

    #[test]
    fn limits_may_be_lowered_never_raised() {
        let file = FileConfig::parse("[limits]\nclient_in_flight_max = 8\n", "t.toml").unwrap();
        let vars = env(&[("IDMINT_LIMITS_REQUEST_TIMEOUT_MS", "2000")]);
        let settings = Settings::resolve(&file, &vars, &Overrides::default()).unwrap();
        assert_eq!(settings.http_limits.client_in_flight_max, 8);
        assert_eq!(settings.http_limits.request_timeout_ms, 2_000);
        let raised = FileConfig::parse("[limits]\nconnections_max = 1000000\n", "t.toml").unwrap();
        let error = Settings::resolve(&raised, &env(&[]), &Overrides::default()).unwrap_err();
        assert!(error.to_string().contains("never raise"), "{error}");
    }

    #[test]
    fn defaults_serve_loopback_from_the_embedded_store() {
        let s =
            Settings::resolve(&FileConfig::default(), &env(&[]), &Overrides::default()).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.store, StoreUrl::Sqlite("./idmint-data/idmint.db".into()));
        assert_eq!(s.batch_count_max, BATCH_COUNT_MAX);
        assert_eq!(s.segment.state_dir(), Some(Path::new("./idmint-data")));
        assert!(s.segment.adaptive_step());
        assert_eq!(s.segment.segment_duration().as_secs(), 900);
    }

    #[test]
    fn segment_pacing_and_the_data_dir_resolve_and_refuse_bad_values() {
        let file = FileConfig::parse(
            "data_dir = \"/var/lib/idmint\"\n[segment]\nsegment_duration_s = 60\nadaptive_step = false\n",
            "t.toml",
        )
        .unwrap();
        let s = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap();
        assert_eq!(s.segment.state_dir(), Some(Path::new("/var/lib/idmint")));
        assert_eq!(s.segment.segment_duration().as_secs(), 60);
        assert!(!s.segment.adaptive_step());
        let memory = env(&[("IDMINT_STORE", "memory://")]);
        let s = Settings::resolve(&file, &memory, &Overrides::default()).unwrap();
        assert_eq!(s.segment.state_dir(), None, "memory:// keeps no state");
        let err = Settings::resolve(
            &file,
            &env(&[("IDMINT_SEGMENT_SEGMENT_DURATION_S", "0")]),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("segment_duration_s = 0 is out of range"), "{err}");
        let err = Settings::resolve(
            &file,
            &env(&[("IDMINT_SEGMENT_ADAPTIVE_STEP", "maybe")]),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("IDMINT_SEGMENT_ADAPTIVE_STEP"), "{err}");
    }

    #[test]
    fn flag_beats_env_beats_file_beats_default() {
        let file = FileConfig::parse(
            "listen = \"127.0.0.1:1\"\nstore = \"memory://\"\n[segment]\nrefill_wait_ms = 7\n",
            "t.toml",
        )
        .unwrap();
        let only_file = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap();
        assert_eq!(only_file.listen.port(), 1);
        assert_eq!(only_file.segment.refill_wait().as_millis(), 7);
        let env = env(&[("IDMINT_LISTEN", "127.0.0.1:2"), ("IDMINT_SEGMENT_REFILL_WAIT_MS", "9")]);
        let with_env = Settings::resolve(&file, &env, &Overrides::default()).unwrap();
        assert_eq!(with_env.listen.port(), 2);
        assert_eq!(with_env.segment.refill_wait().as_millis(), 9);
        assert_eq!(with_env.store, StoreUrl::Memory);
        let flags = Overrides { listen: Some("127.0.0.1:3".into()), ..Overrides::default() };
        assert_eq!(Settings::resolve(&file, &env, &flags).unwrap().listen.port(), 3);
    }

    #[test]
    fn bad_values_name_their_origin_and_the_fix() {
        let err = FileConfig::parse("lisen = \"x\"", "idmint.toml").unwrap_err().to_string();
        assert!(err.contains("idmint.toml") && err.contains("lisen"), "{err}");
        let file = FileConfig::parse("[limits]\nbatch_count_max = 1000000", "f").unwrap();
        let err = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("config key limits.batch_count_max"), "{err}");
        let err = Settings::resolve(
            &FileConfig::default(),
            &env(&[("IDMINT_SEGMENT_REFILL_WAIT_MS", "soon")]),
            &Overrides::default(),
        )
        .unwrap_err();
        assert!(err.to_string().starts_with("IDMINT_SEGMENT_REFILL_WAIT_MS"), "{err}");
        let flags = Overrides { listen: Some("localhost".into()), ..Overrides::default() };
        let err = Settings::resolve(&FileConfig::default(), &env(&[]), &flags).unwrap_err();
        assert!(err.to_string().starts_with("--listen"), "{err}");
    }

    #[test]
    fn the_snowflake_section_resolves_and_refuses_what_cannot_run() {
        let resolve = |toml: &str, vars: &[(&str, &str)]| {
            let file = FileConfig::parse(toml, "t.toml").unwrap();
            Settings::resolve(&file, &env(vars), &Overrides::default())
        };
        let s = resolve("", &[]).unwrap();
        let config = s.snowflake.unwrap();
        assert_eq!((config.space.as_str(), config.worker), ("snowflake", WorkerIdSource::Lease));
        assert_eq!(s.snowflake_cached, None);
        let s = resolve("[snowflake]\nenabled = false\ncached = true", &[]).unwrap();
        assert!(s.snowflake.is_none() && s.snowflake_cached.is_none());
        let s = resolve("[snowflake]\nworker = \"static:1023\"\ncached = true", &[]).unwrap();
        assert_eq!(s.snowflake.unwrap().worker, WorkerIdSource::Static(1023));
        assert_eq!(
            s.snowflake_cached,
            Some(CachedConfig {
                capacity: idmint::CACHED_RING_CAPACITY_DEFAULT,
                max_lead_ms: idmint::CACHED_MAX_LEAD_MS_DEFAULT
            })
        );
        let refused = |toml: &str, vars: &[(&str, &str)], says: &str| {
            let err = resolve(toml, vars).unwrap_err().to_string();
            assert!(err.contains(says), "{err} does not say {says:?}");
        };
        refused("[snowflake]\nlayout = \"twitter\"", &[], "use one of snowflake, sonyflake");
        refused("[snowflake]\nworker = \"static:1024\"", &[], "N from 0 to 1023");
        refused("", &[("IDMINT_SNOWFLAKE_TOLERANCE_MS", "5000")], "above 1000 ms");
        // Baidu's layout ran out in 2024: warned about by default, refused on request.
        assert!(resolve("[snowflake]\nlayout = \"uid\"", &[]).is_ok());
        refused("[snowflake]\nlayout = \"uid\"\nrefuse_expiring = true", &[], "layout uid");
        let ring = "[snowflake]\ncached = true\n";
        refused(&format!("{ring}ring_capacity = 1000"), &[], "config key snowflake.ring_capacity");
        refused(&format!("{ring}ring_capacity = 1024"), &[], "cannot hold one time unit");
        refused(ring, &[("IDMINT_SNOWFLAKE_RING_MAX_LEAD_MS", "60000")], "IDMINT_SNOWFLAKE_RING");
        let err = FileConfig::parse("[snowflake]\ncache = true", "t.toml").unwrap_err();
        assert!(err.to_string().contains("unknown field `cache`"), "{err}");
    }

    #[test]
    fn formats_resolve_their_key_from_env_and_never_show_it() {
        let key = "00112233445566778899aabbccddeeff";
        let toml = "[format.order]\ntemplate = \"O{id:base62:6}\"\nkey_env = \"K\"\nbits = 35\n\
                    [format.plain]\n";
        let file = FileConfig::parse(toml, "t.toml").unwrap();
        let s = Settings::resolve(&file, &env(&[("K", key)]), &Overrides::default()).unwrap();
        assert_eq!(s.formats.len(), 2);
        let order = s.formats.iter().find(|f| f.tag.as_str() == "order").unwrap();
        assert_eq!(order.format.permutation().map(|p| p.bits()), Some(35));
        assert!(!order.force_key_change);
        assert!(!format!("{s:?}").contains(key), "the key reached Debug output");
        let inline = "[format.order]\nkey = \"00112233445566778899aabbccddeeff\"\nbits = 40\n";
        let file = FileConfig::parse(inline, "t.toml").unwrap();
        assert!(Settings::resolve(&file, &env(&[]), &Overrides::default()).is_ok());
        let refused = |toml: &str, says: &str| {
            let file = FileConfig::parse(toml, "t.toml").unwrap();
            let err = Settings::resolve(&file, &env(&[("K", key)]), &Overrides::default())
                .unwrap_err()
                .to_string();
            assert!(err.contains(says) && err.contains("format."), "{err} does not say {says:?}");
            assert!(!err.contains(key), "{err}");
        };
        refused("[format.o]\nkey_env = \"K\"\nkey = \"00\"\nbits = 40", "not both");
        refused("[format.o]\nbits = 40", "needs a key or key_env");
        refused("[format.o]\nkey_env = \"K\"\nbits = 64", "use 16 to 63");
        refused("[format.o]\ntime_zone = \"Mars/Base\"", "time zone");
        // 62^6 holds 35 bits, not 36.
        refused(
            "[format.o]\ntemplate = \"{id:base62:6}\"\nkey_env = \"K\"\nbits = 36",
            "bits = 35",
        );
    }
}
