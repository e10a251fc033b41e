//! Where the admin commands (`tag …`, `seq …`) act, and how they answer.
//!
//! A command acts on one of two targets, chosen in this order:
//! 1. `--server URL`: a running server, through its HTTP admin API (`/v1/tags`,
//!    `/v1/seqs`), with the admin token of `IDMINT_ADMIN_TOKEN` or `--admin-token-file`;
//! 2. `--store URL` or `--config FILE`: the store, named by the same configuration `serve`
//!    reads (flag > `IDMINT_*` > file > default), resolved by idmint-server's config code;
//! 3. `IDMINT_SERVER`, or `IDMINT_STORE` / `IDMINT_CONFIG` (both kinds set: refused);
//! 4. nothing: `serve`'s default store, `sqlite://./idmint-data/idmint.db`, only if it
//!    exists (a `serve` here made it); otherwise refused with the three options above.
//!
//! A store is never created by a command that only reads or changes a tag (`list`, `show`,
//! `set`, `delete`): [`idmint_store::check_exists`] first. Only `create` creates a store,
//! and only one named explicitly. Every answer names the store it acted on (password
//! masked) and where that came from; `--output json` prints one JSON object per command.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use serde_json::{Value, json};

/// The variable holding the admin token a command sends to `--server` (as `serve` reads it).
pub const ADMIN_TOKEN_ENV: &str = idmint_server::ADMIN_TOKEN_ENV;

/// The largest admin token file read, in bytes.
const TOKEN_FILE_BYTES_MAX: u64 = 4096;

/// How long one call to `--server` may take.
const SERVER_CALL_TIMEOUT_MS: u64 = 10_000;

/// How an answer is printed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON object (shapes in docs/operations.md, "The CLI's JSON answers").
    Json,
}

/// Where an admin command acts: the flags every `tag` and `seq` command takes.
#[derive(clap::Args, Clone, Default)]
pub struct TargetArgs {
    /// Store URL: sqlite://PATH, memory://, mysql://USER:PASS@HOST:PORT/DB,
    /// postgres://USER:PASS@HOST:PORT/DB, redis://HOST:PORT[/DB], flicker+mysql://…, or
    /// several URLs separated by spaces (one tag served from all of them); see
    /// docs/configuration.md. Else IDMINT_STORE, else the config file's `store`
    /// [default: sqlite://./idmint-data/idmint.db, used only if it exists]
    #[arg(long, value_name = "URL", conflicts_with = "server")]
    store: Option<String>,
    /// TOML config file, as `serve --config` reads it: its `store` (and IDMINT_* variables
    /// over it) name the store [env: IDMINT_CONFIG]
    #[arg(long, value_name = "FILE", conflicts_with = "server")]
    config: Option<PathBuf>,
    /// Act through a running server's HTTP API instead of on a store (what an operator of
    /// a remote node needs); the admin token comes from IDMINT_ADMIN_TOKEN or
    /// --admin-token-file [env: IDMINT_SERVER]
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// File holding the admin token sent to --server (first line; overrides
    /// IDMINT_ADMIN_TOKEN). There is no flag taking the token itself: the process list
    /// would show it.
    #[arg(long, value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
    /// Answer as text or as one JSON object.
    #[arg(long, value_enum, default_value_t)]
    pub output: Output,
}

/// What a command acts on, resolved.
pub enum Target {
    /// A store, with how it was named.
    Store(StoreTarget),
    /// A running server.
    Server(Server),
}

/// A store and how it was named.
pub struct StoreTarget {
    /// The URL as parsed.
    pub url: idmint_store::StoreUrl,
    /// Where it came from: `--store`, `IDMINT_STORE`, `FILE:LINE` or `default`.
    pub origin: String,
}

impl StoreTarget {
    /// The store as answers name it: masked URL and origin.
    pub fn name(&self) -> String {
        format!("{} (from {})", self.url, self.origin)
    }

    /// Puts the store's name on an error of a call to it, so that a refusal says where.
    pub fn on<E>(&self) -> impl Fn(E) -> anyhow::Error + '_
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        move |error| anyhow::Error::new(error).context(format!("store {}", self.name()))
    }

    /// Opens the store for a command that only reads or changes what exists: refused, with
    /// the fix, when the store is not there; nothing is created.
    pub async fn open_existing(&self) -> anyhow::Result<Arc<dyn idmint_store::SegmentStore>> {
        self.check().await?;
        self.open_creating().await
    }

    /// Checks that the store exists (creating nothing), with the fix when it does not.
    pub async fn check(&self) -> anyhow::Result<()> {
        idmint_store::check_exists(&self.url).await.map_err(|error| match error {
            idmint_store::StoreError::Absent { .. } => anyhow::anyhow!(
                "{error}. This command reads or changes an existing store and creates none: \
                 name the store the server uses (--store URL, --config FILE), act through the \
                 server (--server URL), or create the store with `idmint tag create TAG --store \
                 URL`"
            ),
            other => {
                anyhow::Error::new(other).context(format!("cannot open the store {}", self.url))
            }
        })
    }

    /// Opens the store, creating its table (and an SQLite file) when absent.
    pub async fn open_creating(&self) -> anyhow::Result<Arc<dyn idmint_store::SegmentStore>> {
        idmint_store::open(&self.url)
            .await
            .with_context(|| format!("cannot open the store {}", self.url))
    }
}

impl TargetArgs {
    /// Resolves the target (order in the module's doc). `creates`: the command creates
    /// something, so an explicitly named store may be created; the default store never is.
    pub async fn resolve(&self, creates: bool) -> anyhow::Result<Target> {
        if let Some(url) = &self.server {
            return Ok(Target::Server(Server::new(url, self.token()?)?));
        }
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let named_by_env = env("IDMINT_STORE").or(env("IDMINT_CONFIG")).is_some();
        if self.store.is_none() && self.config.is_none() {
            match (env("IDMINT_SERVER"), named_by_env) {
                (Some(_), true) => bail!(
                    "IDMINT_SERVER and IDMINT_STORE or IDMINT_CONFIG are all set: choose where \
                     to act with --server URL or --store URL"
                ),
                (Some(url), false) => return Ok(Target::Server(Server::new(&url, self.token()?)?)),
                _ => {}
            }
        }
        if self.admin_token_file.is_some() {
            bail!("--admin-token-file is for --server (a store needs no token); drop it");
        }
        let config = self.config.clone().or_else(|| env("IDMINT_CONFIG").map(PathBuf::from));
        let flags = idmint_server::Overrides { store: self.store.clone(), ..Default::default() };
        let settings = idmint_server::Settings::load(config.as_deref(), &env, &flags)
            .context("invalid configuration")?;
        let origin = settings.effective.origin("store").unwrap_or_else(|| "default".into());
        let target = StoreTarget { url: settings.store.clone(), origin };
        if settings.effective.is_default("store") {
            // The default store is used only where a server made it: a command in the wrong
            // directory, or on a node whose server runs on another store, must not
            // silently create an empty one and report success.
            if let Err(error) = idmint_store::check_exists(&target.url).await {
                if !matches!(error, idmint_store::StoreError::Absent { .. }) {
                    return Err(anyhow::Error::new(error)
                        .context(format!("cannot open the default store {}", target.url)));
                }
                bail!(
                    "no store named, and the default store {} does not exist here (nothing was \
                     created). Name the store the server uses: --store URL or --config FILE \
                     (or IDMINT_STORE, IDMINT_CONFIG); or act through a running server: \
                     --server URL (or IDMINT_SERVER)",
                    target.url
                );
            }
        } else if !creates {
            target.check().await?;
        }
        Ok(Target::Store(target))
    }

    /// The admin token for `--server`: the file's first line, else `IDMINT_ADMIN_TOKEN`.
    fn token(&self) -> anyhow::Result<Option<String>> {
        if let Some(path) = &self.admin_token_file {
            use std::io::Read;
            let file = std::fs::File::open(path)
                .with_context(|| format!("cannot read --admin-token-file {}", path.display()))?;
            let mut text = String::new();
            file.take(TOKEN_FILE_BYTES_MAX)
                .read_to_string(&mut text)
                .with_context(|| format!("cannot read --admin-token-file {}", path.display()))?;
            let token = text.lines().next().unwrap_or("").trim().to_string();
            if token.is_empty() {
                bail!(
                    "--admin-token-file {} is empty; write the token on its first line",
                    path.display()
                );
            }
            return Ok(Some(token));
        }
        Ok(std::env::var(ADMIN_TOKEN_ENV).ok().filter(|t| !t.trim().is_empty()))
    }
}

/// A running server reached over HTTP.
pub struct Server {
    base: reqwest::Url,
    http: reqwest::Client,
    token: Option<String>,
}

impl Server {
    fn new(url: &str, token: Option<String>) -> anyhow::Result<Server> {
        let base = reqwest::Url::parse(url.trim())
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && !u.cannot_be_a_base())
            .with_context(|| {
                format!("--server {url:?} is not an http:// URL; write e.g. http://127.0.0.1:8080")
            })?;
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_millis(SERVER_CALL_TIMEOUT_MS))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Server { base, http, token })
    }

    /// The server's base URL.
    pub fn url(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// The server as answers name it, with the store it serves from (its `/health`).
    pub async fn name(&self) -> anyhow::Result<String> {
        let health = self.call(reqwest::Method::GET, &["health"], None).await?;
        let store = health.get("store").and_then(Value::as_str).unwrap_or("?");
        Ok(format!("{} (server {})", store, self.url()))
    }

    /// One call: `method` on the path of `segments` (each percent-encoded), with a JSON
    /// body; the answer's JSON (`null` for an empty one), or the server's error.
    pub async fn call(
        &self,
        method: reqwest::Method,
        segments: &[&str],
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut url = self.base.clone();
        {
            let mut path = url
                .path_segments_mut()
                .map_err(|()| anyhow::anyhow!("--server {} cannot take a path", self.base))?;
            path.pop_if_empty();
            path.extend(segments);
        }
        let route = format!("{method} {}", url.path());
        let mut request = self.http.request(method, url.clone());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer = request
            .send()
            .await
            .with_context(|| format!("cannot reach idmint at {}", self.url()))?;
        let status = answer.status();
        let text = answer.text().await.with_context(|| format!("{route}: answer not read"))?;
        let json: Value = if text.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).with_context(|| {
                format!(
                    "{route} answered {status} with what is not JSON; is {} idmint?",
                    self.url()
                )
            })?
        };
        if status.is_success() {
            return Ok(json);
        }
        let code = json.pointer("/error/code").and_then(Value::as_str).unwrap_or("?");
        let message = json.pointer("/error/message").and_then(Value::as_str).unwrap_or(&text);
        let hint = match status.as_u16() {
            401 => format!("; set {ADMIN_TOKEN_ENV} or --admin-token-file"),
            _ => String::new(),
        };
        bail!("idmint at {} answered {route} with {status} {code}: {message}{hint}", self.url())
    }
}

/// Prints a JSON answer on one line.
pub fn print_json(value: &Value) {
    println!("{value}");
}

/// A store's description for JSON answers.
pub fn store_json(target: &StoreTarget) -> Value {
    json!({ "store": target.url.to_string(), "origin": target.origin, "server": null })
}
