//! `idmint decode ID [--layout NAME]`: the parts of a snowflake-style id, offline.

use anyhow::{Context, bail};
use idmint_core::snowflake::{Layout, PRESETS, UtcMs};

/// `idmint decode`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DecodeArgs {
    /// The id, in decimal.
    pub id: String,
    /// The layout the id was made with: snowflake, sonyflake, uid or js-safe.
    #[arg(long, default_value = "snowflake")]
    pub layout: String,
}

/// Prints the id's time, worker and sequence.
pub fn run(args: &DecodeArgs) -> anyhow::Result<()> {
    let layout = Layout::preset(&args.layout).with_context(|| {
        let names: Vec<&str> = PRESETS.iter().map(|(name, _)| *name).collect();
        format!("{:?} is not a layout; use one of {}", args.layout, names.join(", "))
    })?;
    let Some(id) = args.id.parse::<u64>().ok().filter(|id| *id <= i64::MAX as u64) else {
        bail!("{:?} is not an id; give a decimal number from 0 to {}", args.id, i64::MAX);
    };
    let parts = layout
        .decode(id)
        .with_context(|| format!("{id} is not an id of layout {}", args.layout))?;
    println!("layout     {} ({layout})", args.layout);
    println!("time       {} ({} ms)", UtcMs(parts.timestamp_ms), parts.timestamp_ms);
    println!("worker     {}", parts.worker);
    println!("sequence   {}", parts.sequence);
    Ok(())
}
