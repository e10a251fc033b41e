//! `idmint tag …`: tag administration directly on the store (no server needed). A running
//! server sees a new tag on its next request for it.

use anyhow::Context;
use clap::Subcommand;
use idmint_core::{Description, StartId, Step, Tag};
use idmint_store::{SegmentStore, TagRecord, TagSpec};

use crate::StoreArgs;

#[derive(Subcommand)]
pub enum TagCommand {
    /// Create a tag.
    Create {
        /// Tag name: 1-128 bytes of UTF-8 (no control characters, no edge whitespace; not
        /// starting with idmint.key., idmint's internal rows)
        tag: String,
        /// Ids reserved per store allocation (1 to 1000000).
        #[arg(long, default_value_t = Step::DEFAULT.get())]
        step: u64,
        /// First id the tag hands out [default: 1, or where a deleted tag of this name
        /// stopped].
        #[arg(long)]
        start: Option<u64>,
        /// Accept a --start below where a deleted tag of this name stopped: the new tag may
        /// then hand out ids the old one did. Only when no id of the old tag survives.
        #[arg(long)]
        force: bool,
        /// Free text for operators (at most 256 characters).
        #[arg(long, default_value = "")]
        description: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List every tag.
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Change a tag's step; later allocations use it.
    Set {
        /// Tag name.
        tag: String,
        /// New step (1 to 1000000).
        #[arg(long)]
        step: u64,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Delete a tag, keeping its tombstone (where it stopped), so a tag created again under
    /// the name continues above it. Servers stop serving it at their next refresh.
    Delete {
        /// Tag name.
        tag: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

pub async fn run(command: TagCommand) -> anyhow::Result<()> {
    match command {
        TagCommand::Create { tag, step, start, force, description, store } => {
            let spec = TagSpec {
                tag: Tag::parse(&tag)?,
                step: Step::new(step)?,
                start: start.map(StartId::new).transpose()?,
                description: Description::new(&description)?,
                force,
            };
            let store = open(&store).await?;
            // Read first only to tell the operator what forcing did; the store enforces the
            // tombstone atomically with the insert.
            let tombstone = if force { store.tombstone(&spec.tag).await? } else { None };
            let record = store.create_tag(&spec).await?;
            if let Some(warning) = idmint_store::forced_below_tombstone(&spec, tombstone) {
                eprintln!("warning: {warning}");
            }
            println!("created {}", describe(&record));
        }
        TagCommand::List { store } => {
            let mut records = open(&store).await?.list_tags().await?;
            // idmint's internal rows (key guards) are not tags: never listed, never deleted.
            records.retain(|r| !r.tag.is_internal());
            println!("{:<32} {:>20} {:>8}  DESCRIPTION", "TAG", "MAX_ID", "STEP");
            for r in records {
                println!("{:<32} {:>20} {:>8}  {}", r.tag, r.max_id, r.step, r.description);
            }
        }
        TagCommand::Set { tag, step, store } => {
            let record = open(&store).await?.set_step(&Tag::parse(&tag)?, Step::new(step)?).await?;
            println!("updated {}", describe(&record));
        }
        TagCommand::Delete { tag, store } => {
            let tag = Tag::parse(&tag)?;
            open(&store).await?.delete_tag(&tag).await?;
            println!("deleted tag {tag}");
        }
    }
    Ok(())
}

async fn open(args: &StoreArgs) -> anyhow::Result<std::sync::Arc<dyn SegmentStore>> {
    let settings = args.settings()?;
    idmint_store::open(&settings.store)
        .await
        .with_context(|| format!("cannot open the store {}", settings.store))
}

fn describe(record: &TagRecord) -> String {
    format!("tag {}: next id {}, step {}", record.tag, record.max_id, record.step)
}
