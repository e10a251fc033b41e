//! The tracing subscriber, the only one of the workspace (libraries only emit events).
//!
//! Lines go to stderr: `human` (the default; ANSI colours only when stderr is a terminal) or
//! `json` (one JSON object a line: `timestamp`, `level`, `message`, `target` and the event's
//! own fields at the top level, for log shippers). The filter is `IDMINT_LOG`, else
//! `RUST_LOG`, else `info`; a filter that does not parse is an error, not silently `info`.
//!
//! What is logged is decided where the events are: state changes (segment refills that fail,
//! leases lost, clocks behind, tags created), never a line per id or per request at `info`.

use anyhow::Context;
use tracing_subscriber::EnvFilter;

/// How log lines are written (`--log-format`, `IDMINT_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Text for people: time, level, target, message, fields.
    #[default]
    Human,
    /// One JSON object a line.
    Json,
}

/// The variables that hold the log filter, in order of precedence.
const FILTER_VARS: [&str; 2] = ["IDMINT_LOG", "RUST_LOG"];

/// The filter when no variable sets one.
const FILTER_DEFAULT: &str = "info";

/// Installs the subscriber for the whole process.
pub fn init(format: LogFormat) -> anyhow::Result<()> {
    let filter = filter()?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Human => {
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            builder.with_ansi(ansi).try_init()
        }
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
    };
    installed.map_err(|error| anyhow::anyhow!("cannot install the log subscriber: {error}"))
}

/// The first filter variable set, parsed, or [`FILTER_DEFAULT`].
fn filter() -> anyhow::Result<EnvFilter> {
    for var in FILTER_VARS {
        if let Ok(text) = std::env::var(var) {
            return EnvFilter::try_new(&text).with_context(|| {
                format!(
                    "{var}={text:?} is not a log filter; use e.g. info, warn or info,idmint=debug"
                )
            });
        }
    }
    Ok(EnvFilter::new(FILTER_DEFAULT))
}
