//! `idmint uuid [-n N] [--version 4|7] [--format standard|hex]` and `idmint ulid [-n N]`:
//! UUIDs and ULIDs made here, one per line, with no server and no store (the library's
//! [`idmint::Uuids`] on the machine's clock). v7 ids and ULIDs of one run increase.
//! Version 4 is the default, as for `/v1/uuid`: "a UUID" means a random one to most users.

use std::io::Write;
use std::sync::Arc;

use anyhow::{Context, bail};
use idmint::SystemClock;
use idmint::Uuids;
use idmint::segment::Count;
use idmint_core::limits::BATCH_COUNT_MAX;
use idmint_core::uuid::{UuidFormat, ulid_encode};

/// Most ids one `idmint uuid` or `idmint ulid` prints.
pub const UUID_COUNT_MAX: u64 = 10_000_000;

/// `idmint uuid`'s arguments. Its `--version` is the UUID version, so the subcommand has no
/// version flag of its own (`idmint --version` still prints idmint's).
#[derive(clap::Args)]
#[command(disable_version_flag = true)]
pub struct UuidArgs {
    /// How many ids (1 to 10000000).
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    count: u64,
    /// 4: random; 7: time-ordered (milliseconds, then random bits), increasing within a run.
    #[arg(long, default_value = "4", value_parser = ["4", "7"])]
    version: String,
    /// standard: 8-4-4-4-12 hex; hex: 32 hex digits without dashes.
    #[arg(long, default_value = "standard", value_parser = UuidFormat::NAMES)]
    format: String,
}

/// `idmint ulid`'s arguments.
#[derive(clap::Args)]
pub struct UlidArgs {
    /// How many ids (1 to 10000000).
    #[arg(short = 'n', long = "count", default_value_t = 1)]
    count: u64,
}

/// Prints `count` UUIDs.
pub fn run_uuid(args: &UuidArgs) -> anyhow::Result<()> {
    let format = UuidFormat::parse(&args.format)?;
    let uuids = Uuids::new(Arc::new(SystemClock));
    let v7 = args.version == "7";
    print_batches(args.count, |count| {
        let ids = if v7 { uuids.v7(count)? } else { uuids.v4(count) };
        Ok(ids.into_iter().map(|id| format.encode(id)).collect())
    })
}

/// Prints `count` ULIDs.
pub fn run_ulid(args: &UlidArgs) -> anyhow::Result<()> {
    let uuids = Uuids::new(Arc::new(SystemClock));
    print_batches(args.count, |count| Ok(uuids.ulid(count)?.into_iter().map(ulid_encode).collect()))
}

/// Prints the texts `make` gives for batches of at most `BATCH_COUNT_MAX`, `total` in all.
fn print_batches(
    total: u64,
    mut make: impl FnMut(Count) -> anyhow::Result<Vec<String>>,
) -> anyhow::Result<()> {
    if !(1..=UUID_COUNT_MAX).contains(&total) {
        bail!("-n {total} is out of range; ask for 1 to {UUID_COUNT_MAX} ids");
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut remaining = total;
    while remaining > 0 {
        let batch = remaining.min(BATCH_COUNT_MAX);
        for text in make(Count::new(batch)?)? {
            writeln!(out, "{text}").context("cannot write to stdout")?;
        }
        remaining -= batch;
    }
    out.flush().context("cannot write to stdout")?;
    Ok(())
}
