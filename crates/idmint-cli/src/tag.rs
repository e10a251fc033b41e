//! `idmint tag …`: tag administration on a store, or through a running server (`--server`,
//! its `/v1/tags` routes). Where a command acts is `target.rs`'s rule; every answer names
//! that store. A running server sees a tag created on its store on its next request for it.

use clap::Subcommand;
use idmint_core::{Description, StartId, Step, Tag};
use idmint_store::{StoreUrl, TagRecord, TagSpec};
use reqwest::Method;
use serde_json::{Value, json};

use crate::target::{Output, Server, StoreTarget, Target, TargetArgs, print_json, store_json};

/// `idmint tag …`.
#[derive(Subcommand)]
pub enum TagCommand {
    /// Create a tag (and, on a store named explicitly, the store's table or SQLite file
    /// when absent).
    Create {
        /// Tag name: 1-128 bytes of UTF-8 (no control characters, no edge whitespace; not
        /// starting with idmint.key., idmint's internal rows)
        tag: String,
        /// Ids reserved per store allocation (1 to 1000000).
        #[arg(long, default_value_t = Step::DEFAULT.get())]
        step: u64,
        /// First id the tag hands out [default: 1, or where a deleted tag of this name
        /// stopped]. On a Flicker or interleaved store ids come in blocks of the step, the
        /// first block at or above it (block 0 is never used).
        #[arg(long)]
        start: Option<u64>,
        /// Accept a --start below where a deleted tag of this name stopped: the new tag may
        /// then hand out ids the old one did. Only when no id of the old tag survives.
        #[arg(long)]
        force: bool,
        /// Free text for operators (at most 256 characters).
        #[arg(long, default_value = "")]
        description: String,
        /// A strict tag: its ids increase in real time across every node of the store (one
        /// owner node at a time serves them, the others forward). Created through a running
        /// node (--server), which owns it first; --step and --force do not apply.
        #[arg(long)]
        strict: bool,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// List every tag: its step and max_id (no node has reserved any id from max_id on).
    List {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Show one tag's row; through --server also the segments that server holds for it.
    Show {
        /// Tag name.
        tag: String,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Change a tag's step; later allocations use it.
    Set {
        /// Tag name.
        tag: String,
        /// New step (1 to 1000000).
        #[arg(long)]
        step: u64,
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Delete a tag, keeping its tombstone (where it stopped), so a tag created again under
    /// the name continues above it. Servers stop serving it at their next refresh.
    Delete {
        /// Tag name.
        tag: String,
        #[command(flatten)]
        target: TargetArgs,
    },
}

/// Runs a `tag` command.
pub async fn run(command: TagCommand) -> anyhow::Result<()> {
    match command {
        TagCommand::Create { tag, step, start, force, description, strict, target } => {
            let spec = TagSpec {
                tag: Tag::parse(&tag)?,
                step: Step::new(step)?,
                start: start.map(StartId::new).transpose()?,
                description: Description::new(&description)?,
                force,
            };
            let output = target.output;
            match target.resolve(!strict).await? {
                Target::Store(store) if strict => anyhow::bail!(
                    "a strict tag is created through a running node, which owns it first: add \
                     --server URL (store {} untouched)",
                    store.name()
                ),
                Target::Store(store) => create_on_store(&store, &spec, output).await?,
                Target::Server(server) => create_on_server(&server, &spec, strict, output).await?,
            }
        }
        TagCommand::List { target } => {
            let output = target.output;
            let (place, records) = match target.resolve(false).await? {
                Target::Store(store) => {
                    let mut records =
                        store.open_existing().await?.list_tags().await.map_err(store.on())?;
                    // idmint's internal rows (key guards) are not tags: never listed.
                    records.retain(|r| !r.tag.is_internal());
                    (Place::store(&store), records.iter().map(record_json).collect())
                }
                Target::Server(server) => {
                    let answer = server.call(Method::GET, &["v1", "tags"], None).await?;
                    let tags = answer.get("tags").and_then(Value::as_array).cloned();
                    (Place::server(&server).await?, tags.unwrap_or_default())
                }
            };
            print_list(&place, &records, output);
        }
        TagCommand::Show { tag, target } => {
            let tag = Tag::parse(&tag)?;
            let output = target.output;
            let (place, record) = match target.resolve(false).await? {
                Target::Store(store) => {
                    let record =
                        store.open_existing().await?.get_tag(&tag).await.map_err(store.on())?;
                    let record = record
                        .ok_or(idmint_store::StoreError::TagNotFound(tag))
                        .map_err(store.on())?;
                    (Place::store(&store), record_json(&record))
                }
                Target::Server(server) => {
                    let answer =
                        server.call(Method::GET, &["v1", "tags", tag.as_str()], None).await?;
                    (Place::server(&server).await?, answer)
                }
            };
            print_show(&place, &record, output);
        }
        TagCommand::Set { tag, step, target } => {
            let (tag, step) = (Tag::parse(&tag)?, Step::new(step)?);
            let output = target.output;
            let (place, record) = match target.resolve(false).await? {
                Target::Store(store) => {
                    let record = store
                        .open_existing()
                        .await?
                        .set_step(&tag, step)
                        .await
                        .map_err(store.on())?;
                    (Place::store(&store), record_json(&record))
                }
                Target::Server(server) => {
                    let body = json!({ "step": step.get() });
                    let path = ["v1", "tags", tag.as_str()];
                    let answer = server.call(Method::PATCH, &path, Some(body)).await?;
                    (Place::server(&server).await?, answer)
                }
            };
            match output {
                Output::Json => print_json(&json!({
                    "target": place.json, "action": "updated", "tag": record,
                })),
                Output::Text => println!(
                    "updated tag {tag}: step {} from its next allocation, max_id {}; store {}",
                    record["step"], record["max_id"], place.name
                ),
            }
        }
        TagCommand::Delete { tag, target } => {
            let tag = Tag::parse(&tag)?;
            let output = target.output;
            let place = match target.resolve(false).await? {
                Target::Store(store) => {
                    store.open_existing().await?.delete_tag(&tag).await.map_err(store.on())?;
                    Place::store(&store)
                }
                Target::Server(server) => {
                    server.call(Method::DELETE, &["v1", "tags", tag.as_str()], None).await?;
                    Place::server(&server).await?
                }
            };
            match output {
                Output::Json => print_json(&json!({
                    "target": place.json, "action": "deleted", "tag": { "tag": tag.as_str() },
                })),
                Output::Text => println!("deleted tag {tag}; store {}", place.name),
            }
        }
    }
    Ok(())
}

/// Where a command acted, for its answer: a name for text, an object for JSON.
struct Place {
    name: String,
    json: Value,
    /// Ids come in blocks of the step (Flicker and interleaved stores).
    blocks: bool,
}

impl Place {
    fn store(store: &StoreTarget) -> Place {
        let blocks = matches!(store.url, StoreUrl::Flicker(_) | StoreUrl::Interleaved(_));
        Place { name: store.name(), json: store_json(store), blocks }
    }

    async fn server(server: &Server) -> anyhow::Result<Place> {
        let name = server.name().await?;
        let store = name.split(" (server ").next().unwrap_or_default().to_string();
        // A set's description (`interleave[…]`, `flicker[…]`), as the server's /health gives it.
        let blocks = store.starts_with("interleave[") || store.starts_with("flicker[");
        let json = json!({ "store": store, "origin": "server", "server": server.url() });
        Ok(Place { name, json, blocks })
    }
}

async fn create_on_store(
    store: &StoreTarget,
    spec: &TagSpec,
    output: Output,
) -> anyhow::Result<()> {
    let opened = store.open_creating().await?;
    // The tombstone is read after the create (which enforces it atomically with the insert)
    // only to tell the operator what forcing did and whether a deleted tag of the name came
    // before; a tombstone only rises, so it is the one the create saw, or above. Read first,
    // a refused privilege on it would hide the one the create lacks.
    let record = opened.create_tag(spec).await.map_err(store.on())?;
    let tombstone = opened.tombstone(&spec.tag).await.map_err(store.on())?;
    let warning = idmint_store::forced_below_tombstone(spec, tombstone);
    let before = Before { deleted: tombstone.is_some() };
    print_created(&Place::store(store), &record_json(&record), before, warning, output);
    Ok(())
}

async fn create_on_server(
    server: &Server,
    spec: &TagSpec,
    strict: bool,
    output: Output,
) -> anyhow::Result<()> {
    let mut body = json!({
        "tag": spec.tag.as_str(),
        "step": spec.step.get(),
        "description": spec.description.as_str(),
        "force": spec.force,
    });
    if strict {
        // Only a name and a start: a strict tag has no step, description or tombstone.
        body = json!({ "tag": spec.tag.as_str(), "strict": true });
    }
    if let Some(start) = spec.start {
        body["start"] = json!(start.get());
    }
    let mut record = server.call(Method::POST, &["v1", "tags"], Some(body)).await?;
    let warning = record
        .as_object_mut()
        .and_then(|o| o.remove("warning"))
        .and_then(|w| w.as_str().map(String::from));
    // A row that does not start at 1 without a --start continued above a deleted tag.
    let continued = spec.start.is_none() && record["max_id"].as_u64().is_some_and(|m| m > 1);
    let before = Before { deleted: continued };
    print_created(&Place::server(server).await?, &record, before, warning, output);
    Ok(())
}

/// The first id of a new tag's first allocation, from its row: `max_id` (ids start at 1),
/// or on a Flicker or interleaved store the lowest block start its tickets can give (block
/// 0 is never used, so at least the step). `at_least`: on those stores the block a node's
/// first ticket gives depends on which database answers first.
fn first_id(record: &Value, blocks: bool) -> (u64, bool) {
    let max_id = record["max_id"].as_u64().unwrap_or(1).max(1);
    let step = record["step"].as_u64().unwrap_or(1).max(1);
    if blocks {
        let ticket = idmint_core::residue::ticket_at_or_above(max_id, step).max(1);
        (ticket.saturating_mul(step), true)
    } else {
        (max_id, false)
    }
}

/// What came before a created tag, as far as the command knows.
struct Before {
    /// A tag of this name was deleted: nodes that served it may still hold ids of it.
    deleted: bool,
}

fn print_created(
    place: &Place,
    record: &Value,
    before: Before,
    warning: Option<String>,
    output: Output,
) {
    let (first, at_least) = first_id(record, place.blocks);
    // A node that served the deleted tag hands out the ids it still held first: below the
    // new row's first id, never one it served before, but before it.
    let held = before.deleted.then(|| {
        format!(
            "a node that served the deleted tag of this name may first hand out ids it still \
             held, below {first}; none was handed out before"
        )
    });
    if let Some(warning) = &warning {
        eprintln!("warning: {warning}");
    }
    match output {
        Output::Json => print_json(&json!({
            "target": place.json,
            "action": "created",
            "tag": record,
            "first_id": first,
            "first_id_exact": !at_least && held.is_none(),
            "warning": warning,
        })),
        Output::Text => {
            let first = if at_least { format!("at or above {first}") } else { first.to_string() };
            println!(
                "created tag {}: first id {first}, step {}; store {}",
                record["tag"].as_str().unwrap_or_default(),
                record["step"],
                place.name
            );
            if let Some(held) = held {
                println!("note: {held}");
            }
        }
    }
}

fn print_list(place: &Place, records: &[Value], output: Output) {
    match output {
        Output::Json => print_json(&json!({ "target": place.json, "tags": records })),
        Output::Text => {
            println!("# store {}", place.name);
            println!("{:<32} {:>20} {:>8}  DESCRIPTION", "TAG", "MAX_ID", "STEP");
            for r in records {
                println!(
                    "{:<32} {:>20} {:>8}  {}",
                    r["tag"].as_str().unwrap_or_default(),
                    r["max_id"].to_string(),
                    r["step"].to_string(),
                    r["description"].as_str().unwrap_or_default()
                );
            }
        }
    }
}

fn print_show(place: &Place, record: &Value, output: Output) {
    match output {
        Output::Json => print_json(&json!({ "target": place.json, "tag": record })),
        Output::Text => {
            println!("store        {}", place.name);
            println!("tag          {}", record["tag"].as_str().unwrap_or_default());
            println!("max_id       {} (no node has reserved an id from here on)", record["max_id"]);
            println!("step         {}", record["step"]);
            println!("description  {}", record["description"].as_str().unwrap_or_default());
            println!("updated      {} s after the Unix epoch", record["update_time_s"]);
            if let Some(segments) = record.get("segments") {
                for which in ["current", "next"] {
                    match segments.get(which).filter(|s| !s.is_null()) {
                        Some(s) => println!(
                            "{which:<12} [{}, {}), next id {}, {} left (on this server)",
                            s["start"], s["end"], s["next_id"], s["remaining"]
                        ),
                        None => println!("{which:<12} none (on this server)"),
                    }
                }
            }
        }
    }
}

/// A store row as JSON: the fields of the HTTP API's tag object (`GET /v1/tags`).
fn record_json(record: &TagRecord) -> Value {
    json!({
        "tag": record.tag.as_str(),
        "kind": "segment",
        "max_id": record.max_id,
        "step": record.step,
        "description": record.description,
        "update_time_s": record.update_time_s,
    })
}
