//! `idmint seq …`: sequence definitions on the store (no Redis needed), or through a running
//! server (`--server`, its `/v1/seqs` routes). Where a command acts is `target.rs`'s rule;
//! every answer names that store. A running server with `--redis` serves a new sequence on
//! its first request.

use anyhow::Context;
use clap::Subcommand;
use idmint_core::Tag;
use idmint_store::{SequenceSpec, SequenceStore};
use reqwest::Method;
use serde_json::{Value, json};

use crate::target::{Output, StoreTarget, Target, TargetArgs, print_json, store_json};

/// `idmint seq …`.
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
        target: TargetArgs,
    },
    /// List every sequence.
    List {
        #[command(flatten)]
        target: TargetArgs,
    },
    /// Delete a sequence. Its ceilings stay in the store, so a sequence created again under
    /// the name continues above every number the old one served, even if its Redis counter
    /// (which only a server's DELETE /v1/seqs/{name} removes) is still there.
    Delete {
        /// Sequence name.
        name: String,
        #[command(flatten)]
        target: TargetArgs,
    },
}

/// Runs a `seq` command.
pub async fn run(command: SeqCommand) -> anyhow::Result<()> {
    match command {
        SeqCommand::Create { name, daily, format, time_zone, target } => {
            let spec = idmint::sequence::prepare_sequence(SequenceSpec {
                name: Tag::parse(&name)?,
                daily,
                format,
                time_zone,
                created_ms: idmint::Clock::now_ms(&idmint::SystemClock),
            })?;
            let output = target.output;
            let (place, record) = match target.resolve(true).await? {
                Target::Store(store) => {
                    let record =
                        open(&store).await?.create_sequence(&spec).await.map_err(store.on())?;
                    (store_place(&store), spec_json(&record))
                }
                Target::Server(server) => {
                    let mut body = json!({
                        "name": spec.name.as_str(),
                        "daily": spec.daily,
                        "time_zone": spec.time_zone,
                    });
                    if let Some(format) = &spec.format {
                        body["format"] = json!(format);
                    }
                    let answer = server.call(Method::POST, &["v1", "seqs"], Some(body)).await?;
                    (server_place(&server).await?, answer)
                }
            };
            match output {
                Output::Json => print_json(
                    &json!({ "target": place.1, "action": "created", "sequence": record }),
                ),
                Output::Text => println!("created {}; store {}", describe(&record), place.0),
            }
        }
        SeqCommand::List { target } => {
            let output = target.output;
            let (place, records) = match target.resolve(false).await? {
                Target::Store(store) => {
                    store.check().await?;
                    let records = open(&store).await?.list_sequences().await.map_err(store.on())?;
                    (store_place(&store), records.iter().map(spec_json).collect())
                }
                Target::Server(server) => {
                    let answer = server.call(Method::GET, &["v1", "seqs"], None).await?;
                    let list = answer.get("sequences").and_then(Value::as_array).cloned();
                    (server_place(&server).await?, list.unwrap_or_default())
                }
            };
            match output {
                Output::Json => print_json(&json!({ "target": place.1, "sequences": records })),
                Output::Text => {
                    println!("# store {}", place.0);
                    println!("{:<32} {:<6} {:<10} FORMAT", "SEQUENCE", "DAILY", "ZONE");
                    for r in records {
                        println!(
                            "{:<32} {:<6} {:<10} {}",
                            r["name"].as_str().unwrap_or_default(),
                            r["daily"].to_string(),
                            r["time_zone"].as_str().unwrap_or_default(),
                            r["format"].as_str().unwrap_or("-")
                        );
                    }
                }
            }
        }
        SeqCommand::Delete { name, target } => {
            let name = Tag::parse(&name)?;
            let output = target.output;
            let place = match target.resolve(false).await? {
                Target::Store(store) => {
                    store.check().await?;
                    open(&store).await?.delete_sequence(&name).await.map_err(store.on())?;
                    store_place(&store)
                }
                Target::Server(server) => {
                    server.call(Method::DELETE, &["v1", "seqs", name.as_str()], None).await?;
                    server_place(&server).await?
                }
            };
            match output {
                Output::Json => print_json(&json!({
                    "target": place.1, "action": "deleted", "sequence": { "name": name.as_str() },
                })),
                Output::Text => println!("deleted sequence {name}; store {}", place.0),
            }
        }
    }
    Ok(())
}

/// The store as answers name it: text and JSON.
fn store_place(store: &StoreTarget) -> (String, Value) {
    (store.name(), store_json(store))
}

/// The server as answers name it: text and JSON.
async fn server_place(server: &crate::target::Server) -> anyhow::Result<(String, Value)> {
    let name = server.name().await?;
    let store = name.split(" (server ").next().unwrap_or_default().to_string();
    Ok((name, json!({ "store": store, "origin": "server", "server": server.url() })))
}

async fn open(store: &StoreTarget) -> anyhow::Result<std::sync::Arc<dyn SequenceStore>> {
    idmint_store::open_sequences(&store.url)
        .await
        .with_context(|| format!("cannot open the store {} for sequences", store.url))
}

/// A definition as JSON: the fields of the HTTP API's sequence object (`GET /v1/seqs`).
fn spec_json(record: &SequenceSpec) -> Value {
    let mut json = json!({
        "name": record.name.as_str(),
        "daily": record.daily,
        "time_zone": record.time_zone,
        "created_ms": record.created_ms,
    });
    // Absent for plain numbers, as the HTTP API answers.
    if let Some(format) = &record.format {
        json["format"] = json!(format);
    }
    json
}

fn describe(record: &Value) -> String {
    let daily = if record["daily"].as_bool() == Some(true) { "daily, " } else { "" };
    let format = record["format"].as_str().unwrap_or("plain numbers");
    format!(
        "sequence {}: {daily}{format}, time zone {}",
        record["name"].as_str().unwrap_or_default(),
        record["time_zone"].as_str().unwrap_or_default()
    )
}
