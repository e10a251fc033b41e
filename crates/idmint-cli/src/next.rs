//! `idmint next TAG [-n N]`: fetch ids from a running server (its batch route) and print them
//! one per line, as the tag's format renders them. Large counts are fetched in batches of at most `BATCH_COUNT_MAX`.

use std::io::Write;

use anyhow::{Context, bail};
use idmint_core::Tag;
use idmint_core::limits::BATCH_COUNT_MAX;
use serde::Deserialize;

/// Most ids one `idmint next` prints.
pub const NEXT_COUNT_MAX: u64 = 10_000_000;

#[derive(clap::Args)]
pub struct NextArgs {
    /// Tag name.
    tag: String,
    /// How many ids (1 to 10000000).
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    count: u64,
    /// Base URL of a running idmint server.
    #[arg(
        long,
        value_name = "URL",
        env = "IDMINT_SERVER",
        default_value = "http://127.0.0.1:8080"
    )]
    server: String,
    /// Bearer token for a tag guarded by a client token (or the admin token); sent in the
    /// Authorization header, never shown. Prefer the variable to the flag: a flag is
    /// visible to other users in the process list.
    #[arg(long, value_name = "TOKEN", env = "IDMINT_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

#[derive(Deserialize)]
struct Ids {
    ids: Vec<Id>,
}

/// An id as the server sends it: a number, or a string for a tag with a text template.
#[derive(Deserialize)]
#[serde(untagged)]
enum Id {
    Number(u64),
    Text(String),
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Id::Number(id) => write!(f, "{id}"),
            Id::Text(text) => f.write_str(text),
        }
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Deserialize)]
struct ErrorDetail {
    message: String,
}

pub async fn run(args: NextArgs) -> anyhow::Result<()> {
    let tag = Tag::parse(&args.tag)?;
    if !(1..=NEXT_COUNT_MAX).contains(&args.count) {
        bail!("-n {} is out of range; ask for 1 to {NEXT_COUNT_MAX} ids", args.count);
    }
    let client = reqwest::Client::new();
    let base = args.server.trim_end_matches('/');
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut remaining = args.count;
    while remaining > 0 {
        let batch = remaining.min(BATCH_COUNT_MAX);
        let url = format!("{base}/v1/segment/{tag}?count={batch}");
        let mut request = client.get(&url);
        if let Some(token) = &args.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.with_context(|| {
            format!("cannot reach idmint at {base}; is `idmint serve` running there?")
        })?;
        let status = response.status();
        if !status.is_success() {
            let message = match response.json::<ErrorBody>().await {
                Ok(body) => body.error.message,
                Err(_) => "no error message".to_string(),
            };
            bail!("server answered {status}: {message}");
        }
        let ids: Ids = response.json().await.context("server answered a malformed body")?;
        if ids.ids.len() as u64 != batch {
            bail!("server answered {} ids for a batch of {batch}", ids.ids.len());
        }
        for id in ids.ids {
            writeln!(out, "{id}").context("cannot write to stdout")?;
        }
        remaining -= batch;
    }
    out.flush().context("cannot write to stdout")?;
    Ok(())
}
