//! Configuration: a TOML file, `IDMINT_*` environment variables and command-line flags,
//! resolved with the precedence flag > env > file > default.
//!
//! Every key `a.b` of the file can be set by the variable `IDMINT_A_B` ([`env_var`]), except
//! the keys of `[format.TAG]` sections. `docs/configuration.md` is the reference of every
//! key (type, default, limit); a test below fails when a key is missing there.
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
//! This module opens no connection and reads no store: it parses and checks.

use std::collections::BTreeMap;
use std::fmt::{self, Display, Write as _};
use std::net::SocketAddr;
use std::ops::Range;
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

use crate::auth::{Auth, CLIENTS_MAX, Client, Token};
use crate::limits::HttpLimits;
use serde::{Deserialize, Serialize, Serializer};
use toml::de::{DeTable, DeValue};

/// The address `idmint serve` listens on by default: loopback only.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

/// The node's own directory by default: the SQLite store's file (by default) and the
/// high-water marks of the store-regression guard.
pub const DEFAULT_DATA_DIR: &str = "./idmint-data";

/// What a secret prints as, wherever it is printed.
pub const SECRET_MASK: &str = "***";

/// Most problems one config file reports (each found problem is removed and the file read
/// again, so this also bounds the re-reads).
pub const FILE_PROBLEMS_MAX: usize = 100;

/// The config file as written; every key optional, unknown keys refused.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// `listen`: address and port to serve HTTP on.
    pub listen: Option<String>,
    /// `grpc_listen`: address and port to serve gRPC on; empty (the default) serves gRPC on
    /// the HTTP port.
    pub grpc_listen: Option<String>,
    /// `store`: store URL (may hold a password).
    pub store: Option<SecretUrl>,
    /// `redis`: the Redis that serves sequences (`redis://HOST:PORT[/DB][?prefix=P]`); empty
    /// means none.
    pub redis: Option<SecretUrl>,
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
    /// Which file the keys came from and on which lines, for messages; not a key.
    #[serde(skip)]
    source: FileSource,
}

/// A `[format.TAG]` section: how the tag's ids are shown to clients.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FormatSection {
    /// Output template, e.g. `ORD-{date:%Y%m%d}-{id:base36:8}` (default `{id}`).
    pub template: Option<String>,
    /// Time zone of `{date}`: `UTC`, `+08:00` or an IANA name (default UTC).
    pub time_zone: Option<String>,
    /// The permutation key, 32 hex digits. Prefer `key_env`: a key in a file is easier to
    /// leak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Secret>,
    /// The name of an environment variable holding the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// Width of the permuted public ids in bits (16 to 63); required with a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bits: Option<u32>,
    /// Serve under a key other than the one recorded for the tag (or a first key on a tag
    /// that already allocated ids). Only for tags whose ids were never published.
    pub force_key_change: Option<bool>,
}

/// The `[snowflake]` section.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
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
    /// Borrowed time: run at most this far ahead of the clock instead of waiting, in ms
    /// (0: never borrow).
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
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
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
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    /// Largest `count` of a batch request (at most 100 000).
    pub batch_count_max: Option<u64>,
    /// Requests one client address may have in flight (at most 1 024).
    pub client_in_flight_max: Option<u64>,
    /// How long one request may take, in ms (100 to 60 000).
    pub request_timeout_ms: Option<u64>,
    /// How long a connection may stay without a byte read or written, and how long a
    /// request may take to arrive, in ms (above the request timeout, at most 600 000).
    pub idle_timeout_ms: Option<u64>,
    /// Connections open at once (at most 65 536).
    pub connections_max: Option<u64>,
    /// Connections one client address may hold open at once (at most 4 096, and at most
    /// `connections_max`).
    pub client_connections_max: Option<u64>,
    /// Tags with series of their own in `/metrics`, the busiest (at most 1 000; 0 sums
    /// every tag into `tag="(other)"`).
    pub metrics_tags_max: Option<u64>,
}

/// The `[auth]` section.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// The admin token, required by every route that changes the store. Prefer the
    /// `IDMINT_ADMIN_TOKEN` variable: a token in a file is easier to leak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub admin_token: Option<Secret>,
    /// `[auth.clients.NAME]`: clients with their own token, for the tags they name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub clients: BTreeMap<String, ClientSection>,
}

/// An `[auth.clients.NAME]` section: a client's token and the tags whose ids need it.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ClientSection {
    /// The client's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
    /// The name of an environment variable holding the client's token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_env: Option<String>,
    /// The tags (and sequences) whose ids need this client's token (or the admin token).
    #[serde(default)]
    pub tags: Vec<String>,
}

/// A secret from the configuration (a permutation key, a token). `Display`, `Debug` and
/// `Serialize` print [`SECRET_MASK`]; only [`Secret::expose`] gives the value, to the code
/// that uses it.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

/// A URL that may carry a password (`store`, `redis`). `Display`, `Debug` and `Serialize`
/// print it with every password as `***` (`mysql://app:***@db/ids`); only
/// [`SecretUrl::expose`] gives the URL as written, to the code that connects.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct SecretUrl(String);

/// Values given as command-line flags (highest precedence).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    /// `--listen`.
    pub listen: Option<String>,
    /// `--grpc-listen`.
    pub grpc_listen: Option<String>,
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
    /// Address to serve gRPC on; `None`: on the HTTP address.
    pub grpc_listen: Option<SocketAddr>,
    /// Where segment rows live.
    pub store: StoreUrl,
    /// The Redis that serves sequences; `None`: no sequences.
    pub redis: Option<SecretUrl>,
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

/// The configuration a node runs with, as a config file: every key set (defaults
/// included) and where each value came from. Secrets stay masked when it is printed.
#[derive(Debug, Clone)]
pub struct EffectiveConfig {
    file: FileConfig,
    origins: BTreeMap<String, Origin>,
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
    /// The config file is not valid TOML, or has an unknown key or a wrongly typed value.
    #[error("{path}:{line}:{column}: {reason}")]
    Parse {
        /// The file.
        path: String,
        /// Line of the problem, from 1.
        line: usize,
        /// Column of the problem, from 1 (in characters).
        column: usize,
        /// What is wrong: the parser's message, or the key and the keys allowed there.
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

/// Every problem found in a configuration, in the order found (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(Vec<ConfigError>);

/// Where a value came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Origin {
    /// Nobody set it.
    Default,
    /// A command-line flag, e.g. `--listen`.
    Flag(&'static str),
    /// An environment variable.
    Env(String),
    /// A key of the config file; `at` is `FILE:LINE` (or `FILE`) when known.
    File { key: String, at: Option<String> },
}

/// The config file's name and the line of each key, for origins.
#[derive(Debug, Clone, Default)]
struct FileSource {
    path: Option<String>,
    lines: BTreeMap<String, usize>,
}

/// The name of the environment variable that overrides file key `key`: `IDMINT_` and the
/// key in upper case with `.` as `_` (`segment.refill_wait_ms` → `IDMINT_SEGMENT_REFILL_WAIT_MS`).
pub fn env_var(key: &str) -> String {
    format!("IDMINT_{}", key.to_ascii_uppercase().replace('.', "_"))
}

impl FileConfig {
    /// Reads and parses a config file; every problem in it is reported.
    pub fn load(path: &Path) -> Result<FileConfig, ConfigErrors> {
        let text = read(path)?;
        FileConfig::parse(&text, &path.display().to_string())
    }

    /// Parses config text; `path` names it in errors. Every problem is reported.
    pub fn parse(text: &str, path: &str) -> Result<FileConfig, ConfigErrors> {
        let (file, problems) = FileConfig::parse_lenient(text, path);
        if problems.is_empty() { Ok(file) } else { Err(ConfigErrors(problems)) }
    }

    /// Parses what can be parsed: the keys that read correctly, and one problem for each
    /// that did not, so that a later check of the values can report its problems in the
    /// same run. A syntax error stops the reading (every syntax error is reported, no key
    /// is kept); an unknown key or a wrongly typed value is reported and left out.
    pub fn parse_lenient(text: &str, path: &str) -> (FileConfig, Vec<ConfigError>) {
        let at = |span: Option<Range<usize>>, reason: String| {
            let (line, column) = line_column(text, span.map_or(0, |s| s.start));
            ConfigError::Parse { path: path.to_string(), line, column, reason }
        };
        let empty = FileConfig {
            source: FileSource { path: Some(path.to_string()), lines: BTreeMap::new() },
            ..FileConfig::default()
        };
        let (mut table, syntax) = DeTable::parse_recoverable(text);
        if !syntax.is_empty() {
            let problems = syntax
                .iter()
                .take(FILE_PROBLEMS_MAX)
                .map(|error| at(error.span(), format!("TOML syntax: {}", error.message())))
                .collect();
            return (empty, problems);
        }
        let mut lines = BTreeMap::new();
        key_lines(text, table.get_ref(), "", &mut lines);
        let source = FileSource { path: Some(path.to_string()), lines };
        let mut problems = Vec::new();
        while problems.len() < FILE_PROBLEMS_MAX {
            let parsed = FileConfig::deserialize(toml::de::Deserializer::from(table.clone()));
            let error = match parsed {
                Ok(file) => return (FileConfig { source, ..file }, problems),
                Err(error) => error,
            };
            // Leave the faulty entry out and read again, so every problem is found.
            let found = error.span().and_then(|span| entry_at(table.get_ref(), span.start));
            let reason = match &found {
                Some(key) => format!("{}: {}", key.join("."), plain_words(error.message())),
                None => plain_words(error.message()),
            };
            problems.push(at(error.span(), reason));
            match found {
                Some(key) => remove_entry(table.get_mut(), &key),
                None => break,
            }
        }
        (FileConfig { source, ..FileConfig::default() }, problems)
    }
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
        let (file, mut problems) = match path {
            Some(path) => FileConfig::parse_lenient(&read(path)?, &path.display().to_string()),
            None => (FileConfig::default(), Vec::new()),
        };
        match Settings::resolve(&file, env, flags) {
            Ok(settings) if problems.is_empty() => Ok(settings),
            Ok(_) => Err(ConfigErrors(problems)),
            Err(more) => {
                problems.extend(more.0);
                Err(ConfigErrors(problems))
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
        let mut l =
            Layers { env, source: &file.source, origins: BTreeMap::new(), problems: vec![] };
        let mut eff = file.clone();
        let listen = l.layer(
            "listen",
            flag(&flags.listen, "--listen"),
            &mut eff.listen,
            DEFAULT_LISTEN.to_string(),
        );
        // Empty: gRPC on the HTTP port.
        let grpc_listen = l.layer(
            "grpc_listen",
            flag(&flags.grpc_listen, "--grpc-listen"),
            &mut eff.grpc_listen,
            String::new(),
        );
        let store = l.layer(
            "store",
            flag(&flags.store, "--store"),
            &mut eff.store,
            SecretUrl(DEFAULT_STORE_URL.to_string()),
        );
        let data_dir = l.layer(
            "data_dir",
            flag(&flags.data_dir, "--data-dir"),
            &mut eff.data_dir,
            DEFAULT_DATA_DIR.to_string(),
        );
        // An empty URL is none: no sequences.
        let redis =
            l.layer("redis", flag(&flags.redis, "--redis"), &mut eff.redis, SecretUrl::default());
        let segment = segment_config(&mut l, &mut eff.segment);
        let batch = l.layer(
            "limits.batch_count_max",
            None,
            &mut eff.limits.batch_count_max,
            BATCH_COUNT_MAX,
        );

        let listen_addr = l.check(
            &listen.origin,
            listen.value.parse::<SocketAddr>().map_err(|_| {
                format!(
                    "{:?} is not an IP address and port; use e.g. 127.0.0.1:8080 or 0.0.0.0:8080",
                    listen.value
                )
            }),
        );
        let grpc_listen_addr = match grpc_listen.value.trim() {
            "" => Some(None),
            text => l
                .check(
                    &grpc_listen.origin,
                    text.parse::<SocketAddr>().map_err(|_| {
                        format!(
                            "{text:?} is not an IP address and port; use e.g. 127.0.0.1:9090, \
                             or leave it empty to serve gRPC on the HTTP port"
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
        if data_dir.value.trim().is_empty() {
            l.refuse(&data_dir.origin, "the data directory is empty; name a directory");
        }
        let data_dir_path = PathBuf::from(&data_dir.value);
        let segment = match store_url {
            Some(StoreUrl::Memory) => segment,
            _ => segment.with_state_dir(&data_dir_path),
        };
        if !(1..=BATCH_COUNT_MAX).contains(&batch.value) {
            l.refuse(
                &batch.origin,
                format!(
                    "batch_count_max = {} is out of range; use 1 to {BATCH_COUNT_MAX} \
                     (configuration may lower a limit, never raise it)",
                    batch.value
                ),
            );
        }
        let redis = Some(redis.value).filter(|url| !url.expose().trim().is_empty());
        let (snowflake, snowflake_cached) = snowflake_config(&mut l, &mut eff.snowflake);
        let formats = tag_formats(&mut l, &mut eff.format);
        let auth = auth_config(&mut l, &mut eff.auth);
        let http_limits = http_limits(&mut l, &mut eff.limits);
        if let (Some(addr), Some(auth)) = (listen_addr, &auth)
            && let Err(reason) = crate::auth::check_exposure(addr, auth)
        {
            l.refuse(&listen.origin, reason);
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
                    data_dir: data_dir_path,
                    segment,
                    batch_count_max: batch.value,
                    snowflake,
                    snowflake_cached,
                    formats,
                    auth,
                    http_limits,
                    effective: EffectiveConfig { file: eff, origins },
                })
            }
            _ => Err(ConfigErrors(problems)),
        }
    }
}

impl EffectiveConfig {
    /// The configuration as TOML: every key with its value (defaults included), a comment
    /// naming where it came from (`default`, `IDMINT_…`, `--flag`, `FILE:LINE`), secrets as
    /// `***`. Read back, it configures the same node, except for the masked secrets.
    pub fn to_toml(&self) -> String {
        let mut out = String::new();
        match toml::Table::try_from(&self.file) {
            Ok(table) => write_table(&mut out, &table, &mut Vec::new(), &self.origins),
            // Every field is a string, a number, a boolean or a table: this cannot fail.
            Err(error) => {
                out.push_str(&format!("# the configuration cannot be printed: {error}\n"))
            }
        }
        out
    }

    /// The dotted name of every key, `[format.TAG]` keys included (with the tag's name).
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.origins.keys().map(String::as_str)
    }
}

impl ConfigErrors {
    /// The problems, in the order found.
    pub fn problems(&self) -> &[ConfigError] {
        &self.0
    }
}

impl From<ConfigError> for ConfigErrors {
    fn from(error: ConfigError) -> ConfigErrors {
        ConfigErrors(vec![error])
    }
}

impl Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.as_slice() {
            [one] => write!(f, "{one}"),
            all => {
                write!(f, "{} problems:", all.len())?;
                all.iter().try_for_each(|problem| write!(f, "\n  {problem}"))
            }
        }
    }
}

impl std::error::Error for ConfigErrors {}

impl Secret {
    /// A secret holding `value`.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The secret itself, for the code that uses it; never for a log, an error or output.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SECRET_MASK)
    }
}

impl Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SECRET_MASK)
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(SECRET_MASK)
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Secret, Self::Err> {
        Ok(Secret(text.to_string()))
    }
}

impl SecretUrl {
    /// A URL as written (it may hold a password).
    pub fn new(url: impl Into<String>) -> SecretUrl {
        SecretUrl(url.into())
    }

    /// The URL as written, password included: for the code that connects, never for a
    /// log, an error or output.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", idmint_store::redact_urls(&self.0))
    }
}

impl Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&idmint_store::redact_urls(&self.0))
    }
}

impl Serialize for SecretUrl {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&idmint_store::redact_urls(&self.0))
    }
}

impl FromStr for SecretUrl {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<SecretUrl, Self::Err> {
        Ok(SecretUrl(text.to_string()))
    }
}

impl Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default => f.write_str("default"),
            Origin::Flag(name) => f.write_str(name),
            Origin::Env(name) => f.write_str(name),
            Origin::File { key, at: Some(at) } => write!(f, "config key {key} ({at})"),
            Origin::File { key, at: None } => write!(f, "config key {key}"),
        }
    }
}

impl Origin {
    /// The origin as a short comment for a printed configuration.
    fn comment(&self) -> String {
        match self {
            Origin::File { at: Some(at), .. } => at.clone(),
            Origin::File { at: None, .. } => "config file".to_string(),
            other => other.to_string(),
        }
    }
}

impl FileSource {
    /// The origin of file key `key`.
    fn origin(&self, key: &str) -> Origin {
        let at = self.path.as_ref().map(|path| match self.lines.get(key) {
            Some(line) => format!("{path}:{line}"),
            None => path.clone(),
        });
        Origin::File { key: key.to_string(), at }
    }
}

/// A value and where it came from, for error messages.
struct Sourced<T> {
    value: T,
    origin: Origin,
}

/// A type a key can hold, and how its environment variable's text is described when it
/// does not parse.
trait ConfigValue: FromStr + Clone {
    /// What the text should be, e.g. "a whole number".
    const EXPECTED: &'static str;
}

impl ConfigValue for u64 {
    const EXPECTED: &'static str = "a whole number (0 or more)";
}

impl ConfigValue for f64 {
    const EXPECTED: &'static str = "a number";
}

impl ConfigValue for bool {
    const EXPECTED: &'static str = "true or false";
}

impl ConfigValue for String {
    const EXPECTED: &'static str = "text";
}

impl ConfigValue for SecretUrl {
    const EXPECTED: &'static str = "a URL";
}

/// Resolution in progress: the origin of every key so far, and every problem so far.
struct Layers<'a> {
    env: &'a dyn Fn(&str) -> Option<String>,
    source: &'a FileSource,
    origins: BTreeMap<String, Origin>,
    problems: Vec<ConfigError>,
}

impl Layers<'_> {
    /// `key` resolved flag > env ([`env_var`]) > file (what `slot` holds) > `default`.
    /// `slot` is set to the result, so the effective file holds every key. A variable that
    /// does not parse is a problem, and the file's value or the default stands in for it so
    /// the other checks still run.
    fn layer<T: ConfigValue>(
        &mut self,
        key: &str,
        flag: Option<(&str, &'static str)>,
        slot: &mut Option<T>,
        default: T,
    ) -> Sourced<T> {
        let given = match flag {
            Some((text, name)) => Some((text.to_string(), Origin::Flag(name))),
            None => {
                let name = env_var(key);
                (self.env)(&name).map(|text| (text, Origin::Env(name)))
            }
        };
        let parsed = given.and_then(|(text, origin)| match text.parse::<T>() {
            Ok(value) => Some(Sourced { value, origin }),
            Err(_) => {
                self.refuse(&origin, format!("{text:?} is not {}", T::EXPECTED));
                None
            }
        });
        let chosen = parsed.unwrap_or_else(|| self.file_or(key, slot.take(), default));
        *slot = Some(chosen.value.clone());
        self.origins.insert(key.to_string(), chosen.origin.clone());
        chosen
    }

    /// `key` of the file (no flag, no variable: `[format.TAG]` keys) or `default`; `slot`
    /// is set to the result.
    fn file_only<T: Clone>(&mut self, key: &str, slot: &mut Option<T>, default: T) -> Sourced<T> {
        let chosen = self.file_or(key, slot.take(), default);
        *slot = Some(chosen.value.clone());
        self.origins.insert(key.to_string(), chosen.origin.clone());
        chosen
    }

    /// An optional file key without a default: its origin is recorded when it is set.
    fn optional<T>(&mut self, key: &str, slot: &Option<T>) -> Origin {
        let origin = self.source.origin(key);
        if slot.is_some() {
            self.origins.insert(key.to_string(), origin.clone());
        }
        origin
    }

    fn file_or<T>(&self, key: &str, file: Option<T>, default: T) -> Sourced<T> {
        match file {
            Some(value) => Sourced { value, origin: self.source.origin(key) },
            None => Sourced { value: default, origin: Origin::Default },
        }
    }

    /// The value, or `None` with the error recorded as a problem of `origin`.
    fn check<T, E: Display>(&mut self, origin: &Origin, result: Result<T, E>) -> Option<T> {
        result.map_err(|error| self.refuse(origin, error.to_string())).ok()
    }

    /// Records a problem with the value from `origin`.
    fn refuse(&mut self, origin: &Origin, reason: impl Into<String>) {
        self.problems
            .push(ConfigError::Invalid { origin: origin.to_string(), reason: reason.into() });
    }
}

/// A checked setter of [`SegmentConfig`] taking a number.
type SetMs = fn(SegmentConfig, u64) -> Result<SegmentConfig, idmint::ConfigError>;

/// The `[segment]` section resolved; each bad value is a problem and leaves its default.
fn segment_config(l: &mut Layers<'_>, seg: &mut SegmentSection) -> SegmentConfig {
    let preload = l.layer("segment.preload_ratio", None, &mut seg.preload_ratio, 0.1);
    let refill_wait =
        l.layer("segment.refill_wait_ms", None, &mut seg.refill_wait_ms, REFILL_WAIT_MS_DEFAULT);
    let store_timeout = l.layer(
        "segment.store_call_timeout_ms",
        None,
        &mut seg.store_call_timeout_ms,
        STORE_CALL_TIMEOUT_MS_DEFAULT,
    );
    let refresh =
        l.layer("segment.tag_refresh_ms", None, &mut seg.tag_refresh_ms, TAG_REFRESH_MS_DEFAULT);
    let duration = l.layer(
        "segment.segment_duration_s",
        None,
        &mut seg.segment_duration_s,
        SEGMENT_DURATION_S_DEFAULT,
    );
    let adaptive = l.layer("segment.adaptive_step", None, &mut seg.adaptive_step, true);
    let mut config = SegmentConfig::default().with_adaptive_step(adaptive.value);
    if let Some(ratio) = l.check(&preload.origin, PreloadRatio::new(preload.value)) {
        config = config.with_preload_ratio(ratio);
    }
    let steps: [(&Sourced<u64>, SetMs); 4] = [
        (&refill_wait, SegmentConfig::with_refill_wait_ms),
        (&store_timeout, SegmentConfig::with_store_call_timeout_ms),
        (&refresh, SegmentConfig::with_tag_refresh_ms),
        (&duration, SegmentConfig::with_segment_duration_s),
    ];
    for (value, set) in steps {
        if let Some(next) = l.check(&value.origin, set(config.clone(), value.value)) {
            config = next;
        }
    }
    config
}

/// The `[snowflake]` section resolved: the generator (`None` when disabled or invalid) and
/// its ring (`snowflake.cached`). Every key is resolved, so it is printed, even when the
/// generator is disabled; its values are checked only when it is enabled.
fn snowflake_config(
    l: &mut Layers<'_>,
    sf: &mut SnowflakeSection,
) -> (Option<SnowflakeConfig>, Option<CachedConfig>) {
    let enabled = l.layer("snowflake.enabled", None, &mut sf.enabled, true);
    let layout_name = l.layer("snowflake.layout", None, &mut sf.layout, "snowflake".to_string());
    let worker = l.layer("snowflake.worker", None, &mut sf.worker, "lease".to_string());
    let tolerance =
        l.layer("snowflake.tolerance_ms", None, &mut sf.tolerance_ms, idmint::TOLERANCE_MS_DEFAULT);
    let lead = l.layer("snowflake.borrow_max_lead_ms", None, &mut sf.borrow_max_lead_ms, 0);
    let vibration = l.layer("snowflake.max_vibration", None, &mut sf.max_vibration, 0);
    let window = l.layer(
        "snowflake.time_window_ms",
        None,
        &mut sf.time_window_ms,
        idmint::TIME_WINDOW_MS_DEFAULT,
    );
    let ttl =
        l.layer("snowflake.lease_ttl_ms", None, &mut sf.lease_ttl_ms, idmint::LEASE_TTL_MS_DEFAULT);
    let margin = l.layer(
        "snowflake.lease_margin_ms",
        None,
        &mut sf.lease_margin_ms,
        idmint::LEASE_MARGIN_MS_DEFAULT,
    );
    let refuse = l.layer("snowflake.refuse_expiring", None, &mut sf.refuse_expiring, false);
    let cached = l.layer("snowflake.cached", None, &mut sf.cached, false);
    let capacity = l.layer(
        "snowflake.ring_capacity",
        None,
        &mut sf.ring_capacity,
        idmint::CACHED_RING_CAPACITY_DEFAULT,
    );
    let ring_lead = l.layer(
        "snowflake.ring_max_lead_ms",
        None,
        &mut sf.ring_max_lead_ms,
        idmint::CACHED_MAX_LEAD_MS_DEFAULT,
    );
    if !enabled.value {
        return (None, None);
    }
    let layout = l.check(
        &layout_name.origin,
        Layout::preset(&layout_name.value).ok_or_else(|| {
            let names: Vec<&str> =
                idmint_core::snowflake::PRESETS.iter().map(|(name, _)| *name).collect();
            format!("{:?} is not a layout; use one of {}", layout_name.value, names.join(", "))
        }),
    );
    let source = match &layout {
        Some(layout) => l.check(&worker.origin, worker_source(&worker.value, layout)),
        None => None,
    };
    if tolerance.value > idmint::TOLERANCE_MS_MAX {
        let reason = format!("{} is above {} ms", tolerance.value, idmint::TOLERANCE_MS_MAX);
        l.refuse(&tolerance.origin, reason);
    }
    if lead.value > idmint::BORROW_LEAD_MS_MAX {
        let reason = format!(
            "{} is above {} ms (a restart waits out the lead); use a smaller lead, or 0 to \
             never borrow",
            lead.value,
            idmint::BORROW_LEAD_MS_MAX
        );
        l.refuse(&lead.origin, reason);
    }
    let window_range = idmint::TIME_WINDOW_MS_MIN..=idmint::TIME_WINDOW_MS_MAX;
    if !window_range.contains(&window.value) {
        let reason = format!(
            "{} is outside {}..={} ms",
            window.value,
            idmint::TIME_WINDOW_MS_MIN,
            idmint::TIME_WINDOW_MS_MAX
        );
        l.refuse(&window.origin, reason);
    }
    let ttl_range = idmint_store::LEASE_TTL_MS_MIN..=idmint_store::LEASE_TTL_MS_MAX;
    if !ttl_range.contains(&ttl.value) {
        let reason = format!(
            "{} is outside {}..={} ms",
            ttl.value,
            idmint_store::LEASE_TTL_MS_MIN,
            idmint_store::LEASE_TTL_MS_MAX
        );
        l.refuse(&ttl.origin, reason);
    }
    if margin.value > idmint_store::LEASE_MARGIN_MS_MAX {
        let reason = format!("{} is above {} ms", margin.value, idmint_store::LEASE_MARGIN_MS_MAX);
        l.refuse(&margin.origin, reason);
    }
    let Some(layout) = layout else { return (None, None) };
    let now_ms = idmint::Clock::now_ms(&idmint::SystemClock);
    let horizon = idmint_core::limits::LAYOUT_EXPIRY_HORIZON_MS;
    if let Some(warning) = layout.expiry_warning(now_ms, horizon) {
        if refuse.value {
            let reason =
                format!("layout {}: {warning}; pick a layout with more time", layout_name.value);
            l.refuse(&layout_name.origin, reason);
        } else {
            tracing::warn!(layout = %layout_name.value, %warning, "snowflake layout runs out of time soon");
        }
    }
    let ring = if cached.value {
        // The capacity alone first, so the error names the setting at fault.
        let alone = CachedConfig { capacity: capacity.value, max_lead_ms: 0 };
        let ring = CachedConfig { capacity: capacity.value, max_lead_ms: ring_lead.value };
        match l.check(&capacity.origin, alone.check(&layout)) {
            Some(()) => l.check(&ring_lead.origin, ring.check(&layout)).map(|()| ring),
            None => None,
        }
    } else {
        None
    };
    let Some(source) = source else { return (None, None) };
    let mut config = SnowflakeConfig::new(&layout_name.value, layout);
    config.worker = source;
    config.tolerance_ms = tolerance.value;
    config.borrow_max_lead_ms = (lead.value > 0).then_some(lead.value);
    config.max_vibration = vibration.value;
    config.time_window_ms = window.value;
    config.lease_ttl_ms = ttl.value;
    config.lease_margin_ms = margin.value;
    (Some(config), ring)
}

/// `snowflake.worker` parsed: `lease`, `store-assigned`, `ordinal` or `static:N`.
fn worker_source(text: &str, layout: &Layout) -> Result<WorkerIdSource, String> {
    match text {
        "lease" => Ok(WorkerIdSource::Lease),
        "store-assigned" => Ok(WorkerIdSource::StoreAssigned),
        "ordinal" => Ok(WorkerIdSource::Ordinal),
        other => match other.strip_prefix("static:").and_then(|n| n.parse::<u64>().ok()) {
            Some(id) if id <= layout.max_worker() => Ok(WorkerIdSource::Static(id)),
            _ => Err(format!(
                "{other:?} is not a worker source; use lease, store-assigned, ordinal or \
                 static:N with N from 0 to {}",
                layout.max_worker()
            )),
        },
    }
}

/// The `[format.TAG]` sections resolved: tag names, templates, time zones and keys checked.
/// The key is read from the file or from the variable `key_env` names, and appears in no
/// error message.
/// The admin token: `IDMINT_ADMIN_TOKEN`, else `auth.admin_token`.
pub const ADMIN_TOKEN_ENV: &str = "IDMINT_ADMIN_TOKEN";

/// The `[auth]` section resolved: the admin token from `IDMINT_ADMIN_TOKEN` or the file,
/// each client's token from `token` or the variable `token_env` names. `None` (with the
/// problems recorded) if a token is malformed or a client incomplete. No problem quotes a
/// token.
fn auth_config(l: &mut Layers<'_>, auth: &mut AuthSection) -> Option<Auth> {
    let mut ok = true;
    let admin = match (l.env)(ADMIN_TOKEN_ENV).filter(|t| !t.is_empty()) {
        Some(text) => {
            let origin = Origin::Env(ADMIN_TOKEN_ENV.to_string());
            l.origins.insert("auth.admin_token".to_string(), origin.clone());
            auth.admin_token = Some(Secret::new(text.clone()));
            let token = l.check(&origin, Token::parse(&text));
            ok &= token.is_some();
            token
        }
        None => match &auth.admin_token {
            Some(text) => {
                let origin = l.optional("auth.admin_token", &auth.admin_token);
                let token = l.check(&origin, Token::parse(text.expose()));
                ok &= token.is_some();
                token
            }
            None => None,
        },
    };
    if auth.clients.len() > CLIENTS_MAX {
        let origin = l.source.origin("auth.clients");
        l.refuse(&origin, format!("{} clients; at most {CLIENTS_MAX}", auth.clients.len()));
        return None;
    }
    let mut clients = Vec::with_capacity(auth.clients.len());
    for (name, client) in &auth.clients {
        let key_of = |field: &str| format!("auth.clients.{name}.{field}");
        let origin = l.source.origin(&format!("auth.clients.{name}"));
        let token_origin = l.optional(&key_of("token"), &client.token);
        let env_origin = l.optional(&key_of("token_env"), &client.token_env);
        let tags_origin = l.source.origin(&key_of("tags"));
        l.origins.insert(key_of("tags"), tags_origin.clone());
        let token = match (&client.token, &client.token_env) {
            (Some(text), None) => l.check(&token_origin, Token::parse(text.expose())),
            (None, Some(var)) => match (l.env)(var) {
                Some(text) => {
                    let parsed =
                        Token::parse(&text).map_err(|e| format!("the token in {var}: {e}"));
                    l.check(&env_origin, parsed)
                }
                None => {
                    l.refuse(&env_origin, format!("token_env names {var:?}, which is not set"));
                    None
                }
            },
            _ => {
                l.refuse(&origin, "give token or token_env (one of them)");
                None
            }
        };
        if client.tags.is_empty() {
            l.refuse(&tags_origin, "tags is empty; name the tags whose ids need this token");
        }
        let tags: Vec<Tag> =
            client.tags.iter().filter_map(|t| l.check(&tags_origin, Tag::parse(t))).collect();
        match token {
            Some(token) if tags.len() == client.tags.len() && !tags.is_empty() => {
                clients.push(Client { name: name.clone(), token, tags });
            }
            _ => ok = false,
        }
    }
    ok.then(|| Auth::new(admin, clients))
}

/// The HTTP limits of `[limits]`, each with its `IDMINT_LIMITS_*` variable, checked against
/// their bounds; `None` (with the problem recorded) if one is out of range.
fn http_limits(l: &mut Layers<'_>, limits: &mut LimitsSection) -> Option<HttpLimits> {
    let defaults = HttpLimits::default();
    let in_flight = l.layer(
        "limits.client_in_flight_max",
        None,
        &mut limits.client_in_flight_max,
        u64::from(defaults.client_in_flight_max),
    );
    let timeout = l.layer(
        "limits.request_timeout_ms",
        None,
        &mut limits.request_timeout_ms,
        defaults.request_timeout_ms,
    );
    let idle = l.layer(
        "limits.idle_timeout_ms",
        None,
        &mut limits.idle_timeout_ms,
        defaults.idle_timeout_ms,
    );
    let connections = l.layer(
        "limits.connections_max",
        None,
        &mut limits.connections_max,
        defaults.connections_max as u64,
    );
    // The default never exceeds the total: a node configured for fewer connections than the
    // default cap per address keeps working, its cap the total.
    let per_client = l.layer(
        "limits.client_connections_max",
        None,
        &mut limits.client_connections_max,
        (defaults.client_connections_max as u64).min(connections.value),
    );
    let metrics_tags = l.layer(
        "limits.metrics_tags_max",
        None,
        &mut limits.metrics_tags_max,
        defaults.metrics_tags_max as u64,
    );
    let resolved = HttpLimits {
        client_in_flight_max: u32::try_from(in_flight.value).unwrap_or(u32::MAX),
        request_timeout_ms: timeout.value,
        idle_timeout_ms: idle.value,
        connections_max: usize::try_from(connections.value).unwrap_or(usize::MAX),
        client_connections_max: usize::try_from(per_client.value).unwrap_or(usize::MAX),
        metrics_tags_max: usize::try_from(metrics_tags.value).unwrap_or(usize::MAX),
    };
    let origin = l.source.origin("limits");
    l.check(&origin, resolved.check().map(|()| resolved))
}

fn tag_formats(
    l: &mut Layers<'_>,
    sections: &mut BTreeMap<String, FormatSection>,
) -> Vec<TagFormat> {
    if sections.len() > TAG_COUNT_MAX {
        let origin = l.source.origin("format");
        l.refuse(&origin, format!("{} formats; at most {TAG_COUNT_MAX}", sections.len()));
        return Vec::new();
    }
    let mut formats = Vec::with_capacity(sections.len());
    for (name, section) in sections.iter_mut() {
        if let Some(format) = tag_format(l, name, section) {
            formats.push(format);
        }
    }
    formats
}

/// One `[format.TAG]` section resolved; `None` (with the problems recorded) if it cannot be.
fn tag_format(l: &mut Layers<'_>, name: &str, section: &mut FormatSection) -> Option<TagFormat> {
    let key_of = |field: &str| format!("format.{name}.{field}");
    let origin = l.source.origin(&format!("format.{name}"));
    let template =
        l.file_only(&key_of("template"), &mut section.template, idmint::TEMPLATE_DEFAULT.into());
    let zone_name = l.file_only(&key_of("time_zone"), &mut section.time_zone, "UTC".to_string());
    let force = l.file_only(&key_of("force_key_change"), &mut section.force_key_change, false);
    let key_origin = l.optional(&key_of("key"), &section.key);
    let key_env_origin = l.optional(&key_of("key_env"), &section.key_env);
    let bits_origin = l.optional(&key_of("bits"), &section.bits);
    let tag = l.check(&origin, Tag::parse(name));
    let zone = l.check(&zone_name.origin, idmint::time_zone(&zone_name.value));
    // `Err(())`: the key is wrong (a problem is recorded); `Ok(None)`: no key.
    let key = match (&section.key, &section.key_env) {
        (Some(_), Some(_)) => {
            l.refuse(&origin, "give key or key_env, not both");
            Err(())
        }
        (Some(text), None) => {
            l.check(&key_origin, PermuteKey::parse_hex(text.expose())).map(Some).ok_or(())
        }
        (None, Some(var)) => match (l.env)(var) {
            Some(text) => {
                let parsed =
                    PermuteKey::parse_hex(&text).map_err(|e| format!("the key in {var}: {e}"));
                l.check(&key_env_origin, parsed).map(Some).ok_or(())
            }
            None => {
                let reason = format!(
                    "key_env names {var:?}, which is not set; export it with the tag's key \
                     (32 hex digits)"
                );
                l.refuse(&key_env_origin, reason);
                Err(())
            }
        },
        (None, None) => Ok(None),
    };
    let permutation = match (key, section.bits) {
        (Ok(Some(key)), Some(bits)) => {
            l.check(&bits_origin, Permutation::new(&key, bits)).map(Some).ok_or(())
        }
        (Ok(Some(_)), None) => {
            let reason = "a key needs bits, the width of public ids (16 to 63), e.g. bits = 41 \
                          for ids up to 2.2 × 10^12";
            l.refuse(&origin, reason);
            Err(())
        }
        (Ok(None), Some(_)) => {
            l.refuse(&bits_origin, "bits is the width of permuted ids and needs a key or key_env");
            Err(())
        }
        (Ok(None), None) => Ok(None),
        (Err(()), _) => Err(()),
    };
    // The template's widths depend on the permutation's bits: checked only with a good one.
    let (Some(tag), Some(zone), Ok(permutation)) = (tag, zone, permutation) else { return None };
    let format = l.check(&template.origin, IdFormat::new(&template.value, zone, permutation))?;
    Some(TagFormat { tag, format, force_key_change: force.value })
}

/// A deserializer message in the words of a config file: keys rather than fields, kinds of
/// value rather than Rust types (`unknown field `x`, expected one of `a`, `b`` becomes
/// `unknown key `x`; the keys allowed here are `a`, `b``).
fn plain_words(message: &str) -> String {
    let message = match message.strip_prefix("unknown field ") {
        Some(rest) => match rest.split_once(", expected one of ") {
            Some((key, allowed)) => {
                format!("unknown key {key}; the keys allowed here are {allowed}")
            }
            None => match rest.split_once(", expected ") {
                Some((key, allowed)) => {
                    format!("unknown key {key}; the key allowed here is {allowed}")
                }
                None => format!("unknown key {rest}"),
            },
        },
        None => message.to_string(),
    };
    const TYPES: [(&str, &str); 6] = [
        ("expected u64", "expected a whole number (0 or more)"),
        ("expected u32", "expected a whole number (0 or more)"),
        ("expected f64", "expected a number"),
        ("expected a boolean", "expected true or false"),
        ("expected a map", "expected a table"),
        ("expected struct ", "expected the table "),
    ];
    TYPES.iter().fold(message, |text, (rust, toml)| text.replace(rust, toml))
}

/// Reads a config file.
fn read(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path).map_err(|e| {
        ConfigErrors::from(ConfigError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })
    })
}

/// Line and column (from 1, the column in characters) of byte `offset` of `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Records the line of every key of `table` (dotted names under `prefix`).
fn key_lines(text: &str, table: &DeTable<'_>, prefix: &str, lines: &mut BTreeMap<String, usize>) {
    for (key, value) in table.iter() {
        let name = dotted(prefix, key.get_ref());
        lines.insert(name.clone(), line_column(text, key.span().start).0);
        if let DeValue::Table(inner) = value.get_ref() {
            key_lines(text, inner, &name, lines);
        }
    }
}

/// The path of the innermost entry of `table` whose key or value holds byte `offset`.
fn entry_at(table: &DeTable<'_>, offset: usize) -> Option<Vec<String>> {
    for (key, value) in table.iter() {
        if let DeValue::Table(inner) = value.get_ref()
            && let Some(mut path) = entry_at(inner, offset)
        {
            path.insert(0, key.get_ref().to_string());
            return Some(path);
        }
    }
    table
        .iter()
        .find(|(key, value)| key.span().contains(&offset) || value.span().contains(&offset))
        .map(|(key, _)| vec![key.get_ref().to_string()])
}

/// Removes the entry at `path` from `table`.
fn remove_entry(table: &mut DeTable<'_>, path: &[String]) {
    match path {
        [] => {}
        [last] => {
            table.remove(last.as_str());
        }
        [first, rest @ ..] => {
            if let Some(DeValue::Table(inner)) = table.get_mut(first.as_str()).map(|v| v.get_mut())
            {
                remove_entry(inner, rest);
            }
        }
    }
}

/// A flag's text and name, when the flag was given.
fn flag<'a>(value: &'a Option<String>, name: &'static str) -> Option<(&'a str, &'static str)> {
    value.as_deref().map(|text| (text, name))
}

/// `name` under `prefix`, dotted.
fn dotted(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") }
}

/// Writes `table` as TOML: its plain values with their origins as comments, then its
/// tables, each under its `[header]`.
fn write_table(
    out: &mut String,
    table: &toml::Table,
    path: &mut Vec<String>,
    origins: &BTreeMap<String, Origin>,
) {
    let (mut tables, values): (Vec<_>, Vec<_>) = table.iter().partition(|(_, v)| v.is_table());
    // Sections of sections (`[format.TAG]`) last, as a config file is usually written.
    tables
        .sort_by_key(|(_, v)| v.as_table().is_some_and(|t| t.values().all(toml::Value::is_table)));
    if !path.is_empty() && !values.is_empty() {
        let header: Vec<String> = path.iter().map(|k| toml_key(k)).collect();
        let _ = writeln!(out, "\n[{}]", header.join("."));
    }
    for (key, value) in values {
        let line = format!("{} = {value}", toml_key(key));
        let full = dotted(&path.join("."), key);
        match origins.get(&full) {
            Some(origin) => {
                let _ = writeln!(out, "{line:<44} # {}", origin.comment());
            }
            None => {
                let _ = writeln!(out, "{line}");
            }
        }
    }
    for (key, value) in tables {
        if let Some(inner) = value.as_table() {
            path.push(key.clone());
            write_table(out, inner, path, origins);
            path.pop();
        }
    }
}

/// A key as TOML writes it: bare when it can be, else quoted.
fn toml_key(key: &str) -> String {
    let bare =
        !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { key.to_string() } else { toml::Value::String(key.to_string()).to_string() }
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
        let text = format!("[auth]\nadmin_token = \"{secret}\"");
        let file = FileConfig::parse(&text, "t.toml").unwrap();
        assert!(!format!("{file:?}").contains("hunter2"));
        let settings = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap();
        assert!(settings.auth.has_admin_token());
        assert!(!format!("{settings:?}").contains("hunter2"));
        let printed = settings.effective.to_toml();
        assert!(printed.contains("admin_token") && !printed.contains("hunter2"), "{printed}");
        let short = FileConfig::parse("[auth]\nadmin_token = \"hunter2\"", "t.toml").unwrap();
        let error = Settings::resolve(&short, &env(&[]), &Overrides::default()).unwrap_err();
        assert!(error.to_string().contains("16 to 512") && !error.to_string().contains("hunter2"));
        // The variable beats the file, and is not shown either.
        let vars = env(&[("IDMINT_ADMIN_TOKEN", "from-the-env-0123456789")]);
        let settings = Settings::resolve(&short, &vars, &Overrides::default()).unwrap();
        assert!(settings.auth.has_admin_token());
        assert!(!settings.effective.to_toml().contains("from-the-env"));
    }

    #[test]
    fn clients_need_a_token_and_tags() {
        let text = "[auth.clients.a]\ntags = [\"order\"]\n[auth.clients.b]\ntoken_env = \"B_TOKEN\"\ntags = []\n[auth.clients.c]\ntoken = \"c-token-0123456789abc\"\ntags = [\"bad tag\"]\n";
        let file = FileConfig::parse(text, "t.toml").unwrap();
        let error = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap_err();
        assert_eq!(error.problems().len(), 4, "{error}");
        let message = error.to_string();
        assert!(message.contains("give token or token_env"), "{message}");
        assert!(message.contains("B_TOKEN") && message.contains("tags is empty"), "{message}");
    }

    #[test]
    fn beyond_loopback_needs_an_admin_token() {
        let file = FileConfig::parse("listen = \"0.0.0.0:8080\"\n", "t.toml").unwrap();
        let error = Settings::resolve(&file, &env(&[]), &Overrides::default()).unwrap_err();
        assert!(error.to_string().contains("IDMINT_ADMIN_TOKEN"), "{error}");
        let vars = env(&[("IDMINT_ADMIN_TOKEN", "admin-token-0123456789")]);
        assert!(Settings::resolve(&file, &vars, &Overrides::default()).is_ok());
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
        assert!(err.to_string().contains("unknown key `cache`"), "{err}");
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

    #[test]
    fn every_problem_of_a_file_is_reported_at_once_with_its_line() {
        let text = "lisen = \"127.0.0.1:1\"\n\
                    [segment]\n\
                    refill_wait_ms = \"soon\"\n\
                    preload_ratio = 0.5\n\
                    refil_wait_ms = 5\n\
                    [limits]\n\
                    batch_count_max = 0\n\
                    [snowflake]\n\
                    tolerance_ms = 5000\n";
        let (file, problems) = FileConfig::parse_lenient(text, "idmint.toml");
        let shown: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(shown.len(), 3, "{shown:#?}");
        assert!(
            shown[0].starts_with(
                "idmint.toml:1:1: lisen: unknown key `lisen`; the keys allowed here are `listen`"
            ),
            "{shown:#?}"
        );
        assert!(shown[0].contains("`listen`") && shown[0].contains("`snowflake`"), "{shown:#?}");
        assert!(shown.iter().any(|s| s.starts_with(
            "idmint.toml:3:18: segment.refill_wait_ms: invalid type: string \"soon\", expected a whole number"
        )), "{shown:#?}");
        assert!(
            shown.iter().any(|s| s.starts_with("idmint.toml:5:1: segment.refil_wait_ms: unknown"))
        );
        // What could be read is kept, so the values are checked in the same run.
        assert_eq!(file.segment.preload_ratio, Some(0.5));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idmint.toml");
        std::fs::write(&path, text).unwrap();
        let vars = env(&[("IDMINT_SEGMENT_TAG_REFRESH_MS", "often")]);
        let err = Settings::load(Some(&path), &vars, &Overrides::default()).unwrap_err();
        let all = err.to_string();
        assert!(all.starts_with("6 problems:"), "{all}");
        assert!(
            all.contains("IDMINT_SEGMENT_TAG_REFRESH_MS: \"often\" is not a whole number"),
            "{all}"
        );
        assert!(
            all.contains(":7)") && all.contains("batch_count_max = 0 is out of range"),
            "{all}"
        );
        assert!(all.contains("config key snowflake.tolerance_ms") && all.contains(":9)"), "{all}");
    }

    #[test]
    fn syntax_errors_name_their_line_and_column() {
        let err = FileConfig::parse("listen = \"a\"\n[segment\nx = = 1\n", "bad.toml").unwrap_err();
        let first = &err.problems()[0];
        let ConfigError::Parse { line, column, reason, .. } = first else { panic!("{first:?}") };
        assert_eq!((*line, *column), (2, 9), "{reason}");
        assert!(reason.starts_with("TOML syntax:"), "{reason}");
        assert!(err.to_string().contains("bad.toml:2:9:"), "{err}");
        let err = FileConfig::parse("listen = 1\nlisten = 2\n", "dup.toml").unwrap_err();
        assert!(err.to_string().contains("dup.toml:2:"), "{err}");
    }

    #[test]
    fn the_effective_config_holds_every_key_with_secrets_masked() {
        let key = "00112233445566778899aabbccddeeff";
        let text = format!(
            "store = \"mysql://app:hunter2@db:3306/ids\"\n\
             [format.order]\nkey = \"{key}\"\nbits = 41\n[format.\"a.b\"]\ntemplate = \"A{{id}}\"\n"
        );
        let file = FileConfig::parse(&text, "prod.toml").unwrap();
        let vars = env(&[
            ("IDMINT_REDIS", "redis://:s3cret@cache:6379/0"),
            ("IDMINT_SEGMENT_REFILL_WAIT_MS", "250"),
            ("IDMINT_ADMIN_TOKEN", "admin-hunter3-0123456789"),
        ]);
        let flags = Overrides { listen: Some("0.0.0.0:9000".into()), ..Overrides::default() };
        let s = Settings::resolve(&file, &vars, &flags).unwrap();
        let printed = s.effective.to_toml();
        for secret in [key, "hunter2", "s3cret", "hunter3"] {
            assert!(!printed.contains(secret), "{secret} printed:\n{printed}");
            assert!(!format!("{s:?}").contains(secret), "{secret} in Debug output");
        }
        for line in [
            "listen = \"0.0.0.0:9000\"",
            "store = \"mysql://app:***@db:3306/ids\"",
            "redis = \"redis://:***@cache:6379/0\"",
            "refill_wait_ms = 250",
            "key = \"***\"",
            "admin_token = \"***\"",
            "[format.\"a.b\"]",
            "template = \"A{id}\"",
        ] {
            assert!(printed.contains(line), "no {line:?} in\n{printed}");
        }
        let origin = |key: &str| {
            let line = printed.lines().find(|l| l.starts_with(key)).unwrap();
            line.rsplit_once("# ").unwrap().1.to_string()
        };
        assert_eq!(origin("listen ="), "--listen");
        assert_eq!(origin("refill_wait_ms ="), "IDMINT_SEGMENT_REFILL_WAIT_MS");
        assert_eq!(origin("store ="), "prod.toml:1");
        assert_eq!(origin("preload_ratio ="), "default");
        // Read back, it is a valid config file with the same keys (secrets aside).
        let again = printed
            .replace("admin_token = \"***\"", "admin_token = \"admin-hunter3-0123456789\"")
            .replace("key = \"***\"", &format!("key = \"{key}\""));
        let again = FileConfig::parse(&again, "printed.toml").unwrap();
        let again = Settings::resolve(&again, &env(&[]), &Overrides::default()).unwrap();
        assert_eq!(
            again.effective.keys().collect::<Vec<_>>(),
            s.effective.keys().collect::<Vec<_>>()
        );
        let keys: Vec<&str> = s.effective.keys().collect();
        assert!(
            keys.contains(&"snowflake.ring_max_lead_ms") && keys.contains(&"redis"),
            "{keys:?}"
        );
    }

    #[test]
    fn every_key_has_its_variable_and_is_documented() {
        assert_eq!(env_var("segment.refill_wait_ms"), "IDMINT_SEGMENT_REFILL_WAIT_MS");
        let docs = include_str!("../../../docs/configuration.md");
        let key = "00112233445566778899aabbccddeeff";
        let mut keys = std::collections::BTreeSet::new();
        for toml in [
            "[format.TAG]\nkey_env = \"K\"\nbits = 40",
            "[format.TAG]\nkey = \"00112233445566778899aabbccddeeff\"\nbits = 40",
            "[auth]\nadmin_token = \"admin-token-0123456789\"\n[auth.clients.NAME]\ntoken_env = \"T\"\ntags = [\"x\"]",
            "[auth.clients.NAME]\ntoken = \"client-token-0123456789\"\ntags = [\"x\"]",
        ] {
            let file = FileConfig::parse(toml, "t.toml").unwrap();
            let pairs = [("K", key), ("T", "client-token-0123456789")];
            let vars = env(&pairs);
            let s = Settings::resolve(&file, &vars, &Overrides::default()).unwrap();
            keys.extend(s.effective.keys().map(str::to_string));
        }
        let missing: Vec<String> = keys
            .iter()
            .flat_map(|key| {
                let mut names = vec![format!("`{key}`")];
                if key == "auth.admin_token" {
                    names.push(format!("`{ADMIN_TOKEN_ENV}`"));
                } else if !key.starts_with("format.") && !key.starts_with("auth.") {
                    names.push(format!("`{}`", env_var(key)));
                }
                names
            })
            .filter(|name| !docs.contains(name.as_str()))
            .collect();
        assert!(missing.is_empty(), "docs/configuration.md does not name {missing:?}");
    }

    #[test]
    fn secrets_print_as_stars() {
        let secret = Secret::new("tok3n");
        assert_eq!((secret.to_string(), format!("{secret:?}")), ("***".into(), "***".into()));
        assert_eq!(secret.expose(), "tok3n");
        let url = SecretUrl::new("postgres://u:pw@h/db?password=pw");
        assert_eq!(url.to_string(), "postgres://u:***@h/db?password=***");
        assert!(!format!("{url:?}").contains("pw"));
    }
}
