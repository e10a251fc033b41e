//! `idmint seq …`: sequence definitions directly on the store (no server or Redis needed).
//! A running server with `--redis` serves a new sequence on its first request.

use anyhow::Context;
use clap::Subcommand;
use idmint_core::Tag;
use idmint_store::{SequenceSpec, SequenceStore};

use crate::StoreArgs;

#[derive(Subcommand)]
pub enum SeqCommand {
    /// Define a sequence: numbers from 1, served by `GET /v1/seq/{name}`.
    Create {
        /// Sequence name: 1-128 bytes of UTF-8 (no control characters, no edge whitespace)
        name: String,
        /// Restart at 1 every day of the time zone (the format must carry the date).
        #[arg(long)]
        daily: bool,
        /// Output format, e.g. '{date:%Y%m%d}{seq:06}' (the default of a daily sequence);
        /// without one, ids are plain numbers.
        #[arg(long, value_name = "FORMAT")]
        format: Option<String>,
        /// Time zone of the days and dates: UTC, an offset like +08:00, or an IANA name.
        #[arg(long, value_name = "ZONE", default_value = "UTC")]
        time_zone: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List every sequence.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Delete a sequence. Its ceilings stay in the store, so a sequence created again under
    /// the name continues above every number the old one served, even if its Redis counter
    /// (which only a server's DELETE /v1/seqs/{name} removes) is still there.
    Delete {
        /// Sequence name.
        name: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

pub async fn run(command: SeqCommand) -> anyhow::Result<()> {
    match command {
        SeqCommand::Create { name, daily, format, time_zone, store } => {
            let spec = idmint::sequence::prepare_sequence(SequenceSpec {
                name: Tag::parse(&name)?,
                daily,
                format,
                time_zone,
                created_ms: idmint::Clock::now_ms(&idmint::SystemClock),
            })?;
            let record = open(&store).await?.create_sequence(&spec).await?;
            println!("created {}", describe(&record));
        }
        SeqCommand::List { store } => {
            let records = open(&store).await?.list_sequences().await?;
            println!("{:<32} {:<6} {:<10} FORMAT", "SEQUENCE", "DAILY", "ZONE");
            for r in records {
                let format = r.format.as_deref().unwrap_or("-");
                println!("{:<32} {:<6} {:<10} {format}", r.name, r.daily, r.time_zone);
            }
        }
        SeqCommand::Delete { name, store } => {
            let name = Tag::parse(&name)?;
            open(&store).await?.delete_sequence(&name).await?;
            println!("deleted sequence {name}");
        }
    }
    Ok(())
}

async fn open(args: &StoreArgs) -> anyhow::Result<std::sync::Arc<dyn SequenceStore>> {
    let settings = args.settings()?;
    idmint_store::open_sequences(&settings.store)
        .await
        .with_context(|| format!("cannot open the store {} for sequences", settings.store))
}

fn describe(record: &SequenceSpec) -> String {
    let daily = if record.daily { "daily, " } else { "" };
    let format = record.format.as_deref().unwrap_or("plain numbers");
    format!("sequence {}: {daily}{format}, time zone {}", record.name, record.time_zone)
}
