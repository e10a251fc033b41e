//! The `idmint` binary: `serve`, `config check`, `tag create|list|show|set|delete`,
//! `seq create|list|delete`, `schema print`, `next`, `decode`, `uuid`, `ulid`.
//!
//! This file owns the command line (clap) and dispatch; each command lives in its own module.
//! Errors are `anyhow` with context and end the process with status 1 and a message (one
//! line, or one line per problem of a configuration). The tracing subscriber is installed
//! here, by `logging`, and nowhere else.

mod config;
mod decode;
mod fds;
mod logging;
mod next;
mod schema;
mod seq;
mod serve;
mod tag;
mod target;
mod uuid;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// idmint: unique 64-bit ids for many services at once.
#[derive(Parser)]
#[command(name = "idmint", version, propagate_version = true)]
struct Cli {
    /// Log lines on stderr: human (colours on a terminal) or json (one object a line, with
    /// timestamp, level, message, target and the event's fields). The filter is IDMINT_LOG,
    /// else RUST_LOG, else info.
    #[arg(long, global = true, value_enum, env = "IDMINT_LOG_FORMAT", default_value_t)]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// Where settings come from: `--store` and `--config` beat `IDMINT_*` variables, which beat
/// the config file, which beats the defaults.
#[derive(clap::Args, Clone, Default)]
struct StoreArgs {
    /// Store URL: sqlite://PATH, memory://, mysql://USER:PASS@HOST:PORT/DB,
    /// postgres://USER:PASS@HOST:PORT/DB (options:
    /// ?table=leaf_alloc&alloc=update|cas&pool_max=10&create_tables=auto|true|false),
    /// redis://HOST:PORT[/DB][?prefix=idmint:] (also redis+sentinel://, redis+cluster://),
    /// flicker+mysql://USER:PASS@HOST/DB?increment=N&offset=I (Flicker ticket databases),
    /// or several URLs separated by spaces, quoted as one argument: one tag served from all
    /// of them (docs/configuration.md) [default: sqlite://./idmint-data/idmint.db]
    #[arg(long, value_name = "URL", env = "IDMINT_STORE", hide_env_values = true)]
    store: Option<String>,
    /// TOML config file (see docs/configuration.md).
    #[arg(long, value_name = "FILE", env = "IDMINT_CONFIG")]
    config: Option<PathBuf>,
}

/// `serve`'s settings: the store's, and where to listen, the data directory and Redis.
#[derive(clap::Args, Clone, Default)]
struct ServeArgs {
    /// Address and port to listen on: an IP address or a host name (resolved once, its first
    /// IPv4 address), e.g. 0.0.0.0:8080 or localhost:8080 [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR", env = "IDMINT_LISTEN")]
    listen: Option<String>,
    /// Address and port to serve gRPC on [default: none, gRPC on the HTTP port]
    #[arg(long, value_name = "ADDR", env = "IDMINT_GRPC_LISTEN")]
    grpc_listen: Option<String>,
    /// This node's directory: high-water marks of the store-regression guard (one node
    /// per directory) [default: ./idmint-data]
    #[arg(long, value_name = "DIR", env = "IDMINT_DATA_DIR")]
    data_dir: Option<String>,
    /// Redis that serves sequences: redis://HOST:PORT[/DB][?prefix=idmint:] (their
    /// ceilings live in the store) [default: none, no sequences]
    #[arg(long, value_name = "URL", env = "IDMINT_REDIS", hide_env_values = true)]
    redis: Option<String>,
    /// A second, independent store (sqlite://, mysql://, postgres:// or redis:// with an
    /// append-only file) every allocation's end is raised in before it is served: ids other
    /// nodes were given before a restored backup are never served again [default: none]
    #[arg(long, value_name = "URL", env = "IDMINT_WITNESS", hide_env_values = true)]
    witness: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Serve ids over HTTP and gRPC until SIGTERM or Ctrl-C.
    ///
    /// Admin routes (creating, changing and deleting tags and sequences: POST/PATCH/DELETE
    /// /v1/tags…, /v1/seqs…) need the admin token, `Authorization: Bearer TOKEN`. Set it with
    /// the variable IDMINT_ADMIN_TOKEN (or `[auth] admin_token` in the --config file; there is
    /// no flag, which the process list would show). Without an admin token serve listens on
    /// loopback addresses only, where every local process may change tags. Client tokens
    /// guarding tags are `[auth.clients.NAME]` sections (docs/configuration.md).
    ///
    /// Every flag has an IDMINT_* variable (shown beside it), as every key of the config
    /// file has; precedence: flag > variable > config file > default. A variable named
    /// IDMINT_* that idmint does not read (a misspelling) is warned about at start, with the
    /// nearest one. `idmint config check` prints what would run.
    Serve(ServeArgs),
    /// Check a configuration without starting anything.
    Config {
        #[command(subcommand)]
        command: config::ConfigCommand,
    },
    /// Create, list, show, change and delete tags: on the store the server uses (--store,
    /// --config, IDMINT_*, read as serve reads them) or through a running server (--server).
    Tag {
        #[command(subcommand)]
        command: tag::TagCommand,
    },
    /// Create, list and delete sequences: on the store (--store, --config, IDMINT_*) or
    /// through a running server (--server); served from Redis by `serve --redis`.
    Seq {
        #[command(subcommand)]
        command: seq::SeqCommand,
    },
    /// Print the SQL a DBA applies for the store's database: each feature's tables and
    /// grants.
    Schema {
        #[command(subcommand)]
        command: schema::SchemaCommand,
    },
    /// Print ids of a tag from a running server, one per line.
    Next(next::NextArgs),
    /// Print what an id stands for: a snowflake id's parts, or the internal id behind a
    /// tag's public id (--tag) or an encoded id (--encoding).
    Decode(decode::DecodeArgs),
    /// Print UUIDs (v4 by default, or time-ordered v7) made here, one per line; no server.
    Uuid(uuid::UuidArgs),
    /// Print ULIDs made here, increasing, one per line; no server.
    Ulid(uuid::UlidArgs),
}

fn main() -> ExitCode {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    cli.command.forget_env_values(&matches);
    if let Err(error) = logging::init(cli.log_format) {
        eprintln!("error: {error:#}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve::run(args).await,
            Command::Config { command } => config::run(command),
            Command::Seq { command } => seq::run(command).await,
            Command::Tag { command } => tag::run(command).await,
            Command::Schema { command } => schema::run(command),
            Command::Next(args) => next::run(args).await,
            Command::Decode(args) => decode::run(&args),
            Command::Uuid(args) => uuid::run_uuid(&args),
            Command::Ulid(args) => uuid::run_ulid(&args),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

impl Command {
    /// Forgets the values clap took from serve's `IDMINT_*` variables (`serve`, `config
    /// check`): the configuration reads each variable itself, so a value's origin in `config
    /// check` and in errors is its variable, not its flag. clap's `env` is there for
    /// `--help`, which shows each flag's variable.
    fn forget_env_values(&mut self, matches: &clap::ArgMatches) {
        let (serve, matches) = match (self, matches.subcommand()) {
            (Command::Serve(serve), Some((_, serve_matches))) => (serve, serve_matches),
            (Command::Config { command }, Some((_, config))) => {
                let config::ConfigCommand::Check { serve, .. } = command;
                match config.subcommand() {
                    Some((_, check)) => (serve, check),
                    None => return,
                }
            }
            _ => return,
        };
        let from_env =
            |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::EnvVariable);
        for (id, value) in [
            ("listen", &mut serve.listen),
            ("grpc_listen", &mut serve.grpc_listen),
            ("data_dir", &mut serve.data_dir),
            ("redis", &mut serve.redis),
            ("witness", &mut serve.witness),
            ("store", &mut serve.store.store),
        ] {
            if from_env(id) {
                *value = None;
            }
        }
    }
}

impl ServeArgs {
    /// Resolves the settings (flag > env > file > default): the config file, then every
    /// problem in it and in the values, reported together, with the `IDMINT_*` variables
    /// set that idmint does not read; those are returned apart when the rest is valid
    /// (`config check` refuses them, `serve` warns). Connects to nothing.
    fn settings(
        &self,
    ) -> anyhow::Result<(idmint_server::Settings, Option<idmint_server::ConfigErrors>)> {
        use anyhow::Context;
        let flags = idmint_server::Overrides {
            listen: self.listen.clone(),
            grpc_listen: self.grpc_listen.clone(),
            store: self.store.store.clone(),
            data_dir: self.data_dir.clone(),
            redis: self.redis.clone(),
            witness: self.witness.clone(),
        };
        let env = |name: &str| std::env::var(name).ok();
        let names = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
        idmint_server::Settings::load_checked(self.store.config.as_deref(), &env, &flags, names)
            .context("invalid configuration")
    }
}
