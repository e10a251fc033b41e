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
        /// Tag name: 1-128 characters of A-Z a-z 0-9 _ . : -
        tag: String,
        /// Ids reserved per store allocation (1 to 1000000).
        #[arg(long, default_value_t = Step::DEFAULT.get())]
        step: u64,
        /// First id the tag hands out.
        #[arg(long, default_value_t = StartId::DEFAULT.get())]
        start: u64,
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
    /// Delete a tag. Servers stop serving it at their next refresh.
    Delete {
        /// Tag name.
        tag: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

pub async fn run(command: TagCommand) -> anyhow::Result<()> {
    match command {
        TagCommand::Create { tag, step, start, description, store } => {
            let spec = TagSpec {
                tag: Tag::parse(&tag)?,
                step: Step::new(step)?,
                start: StartId::new(start)?,
                description: Description::new(&description)?,
            };
            let record = open(&store).await?.create_tag(&spec).await?;
            println!("created {}", describe(&record));
        }
        TagCommand::List { store } => {
            let records = open(&store).await?.list_tags().await?;
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
