//! `idmint next TAG [-n N] [--server URL]…`: fetch ids from running servers through
//! `idmint-client` and print them one per line, as the tag's format renders them (public ids:
//! numbers, or texts for a templated tag). Up to `BATCH_COUNT_MAX` ids come in one call;
//! more are streamed in chunks. Several servers (the flag repeated, or comma-separated) fail
//! over in order.

use std::io::Write;

use anyhow::{Context, bail};
use idmint_client::{Client, ClientError, PublicIds};
use idmint_core::Tag;
use idmint_core::limits::BATCH_COUNT_MAX;

/// Most ids one `idmint next` prints.
pub const NEXT_COUNT_MAX: u64 = 10_000_000;

#[derive(clap::Args)]
pub struct NextArgs {
    /// Tag name.
    tag: String,
    /// How many ids (1 to 10000000).
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    count: u64,
    /// Base URL of a running idmint server; repeat the flag or separate URLs with commas to
    /// fail over between several.
    #[arg(
        long,
        value_name = "URL",
        env = "IDMINT_SERVER",
        default_value = "http://127.0.0.1:8080",
        value_delimiter = ','
    )]
    server: Vec<String>,
    /// Bearer token for a tag guarded by a client token (or the admin token); sent with
    /// every call, never shown. Prefer the variable to the flag: a flag is visible to other
    /// users in the process list.
    #[arg(long, value_name = "TOKEN", env = "IDMINT_TOKEN", hide_env_values = true)]
    token: Option<String>,
}

pub async fn run(args: NextArgs) -> anyhow::Result<()> {
    let tag = Tag::parse(&args.tag)?;
    if !(1..=NEXT_COUNT_MAX).contains(&args.count) {
        bail!("-n {} is out of range; ask for 1 to {NEXT_COUNT_MAX} ids", args.count);
    }
    let servers = args.server.join(", ");
    let mut builder = Client::builder().endpoints(args.server.iter().map(|s| s.trim()));
    if let Some(token) = &args.token {
        builder = builder.token(token);
    }
    let client = builder.build().await.context("--server")?;
    let printed = print_ids(&client, &tag, args.count).await;
    client.close().await;
    printed.map_err(|error| match error {
        Printed::Client(error @ ClientError::Unavailable { .. }) => {
            anyhow::Error::new(error).context(format!("cannot reach idmint at {servers}"))
        }
        Printed::Client(error) => anyhow::Error::new(error),
        Printed::Write(error) => anyhow::Error::new(error).context("cannot write to stdout"),
    })
}

/// Why printing stopped.
enum Printed {
    Client(ClientError),
    Write(std::io::Error),
}

async fn print_ids(client: &Client, tag: &Tag, count: u64) -> Result<(), Printed> {
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if count <= BATCH_COUNT_MAX {
        let ids = client.public_ids(tag, count).await.map_err(Printed::Client)?;
        write_ids(&mut out, &ids)?;
    } else {
        let mut stream = client.stream_ids(tag, count).map_err(Printed::Client)?;
        while let Some(chunk) = stream.next().await {
            write_ids(&mut out, &chunk.map_err(Printed::Client)?)?;
        }
    }
    out.flush().map_err(Printed::Write)
}

fn write_ids(out: &mut impl Write, ids: &PublicIds) -> Result<(), Printed> {
    for id in ids.iter() {
        writeln!(out, "{id}").map_err(Printed::Write)?;
    }
    Ok(())
}
