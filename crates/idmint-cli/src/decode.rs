//! `idmint decode TEXT`: what an id stands for, offline. By default the parts of a
//! snowflake-style id under the configured `[snowflake]` layout (or `--layout NAME`); with `--tag TAG` the internal id behind a public id
//! of the tag's `[format.TAG]` section (template and key, from `--config FILE`); with
//! `--encoding NAME` the number behind a plain encoded id; with `--tso` the parts of a
//! timestamp of the oracle (`GET /v1/tso`).

use std::path::PathBuf;

use anyhow::{Context, bail};
use idmint::IdFormat;
use idmint_core::Tag;
use idmint_core::encoding::Encoding;
use idmint_core::snowflake::{Layout, PRESETS, UtcMs};

/// `idmint decode`'s arguments.
#[derive(Debug, clap::Args)]
pub struct DecodeArgs {
    /// The id: decimal for a snowflake id, or the public id text of a tag or encoding.
    pub id: String,
    /// The layout the id was made with: snowflake, sonyflake, uid or js-safe. Without it,
    /// the `[snowflake]` layout of the configuration (`--config`, `IDMINT_SNOWFLAKE_*`), a
    /// custom one included; `snowflake` when none is configured.
    #[arg(long, conflicts_with_all = ["tag", "encoding", "tso"])]
    pub layout: Option<String>,
    /// Decode a public id of this tag, with the template and key of its `[format.TAG]`
    /// section in the config file.
    #[arg(long, value_name = "TAG", conflicts_with_all = ["encoding", "tso"])]
    pub tag: Option<String>,
    /// Decode a plain encoded id: decimal, base36, base62 or crockford32.
    #[arg(long, value_name = "NAME", conflicts_with = "tso")]
    pub encoding: Option<String>,
    /// Decode a timestamp of the oracle (`physical_ms << 18 | logical`).
    #[arg(long)]
    pub tso: bool,
    /// TOML config file with the tag's `[format.TAG]` section (the key may come from the
    /// variable its key_env names).
    #[arg(long, value_name = "FILE", env = "IDMINT_CONFIG")]
    pub config: Option<PathBuf>,
}

/// Prints what the id stands for.
pub fn run(args: &DecodeArgs) -> anyhow::Result<()> {
    if args.tso {
        let digits = args.id.bytes().all(|b| b.is_ascii_digit());
        let Some(timestamp) = args.id.parse::<u64>().ok().filter(|_| digits) else {
            bail!("{:?} is not a timestamp; give a decimal number from 0 to {}", args.id, u64::MAX);
        };
        let parts = idmint_core::tso::decode(timestamp);
        println!("time       {} ({} ms)", parts.time, parts.physical_ms);
        println!("logical    {}", parts.logical);
        return Ok(());
    }
    if let Some(tag) = &args.tag {
        return decode_public(args, tag);
    }
    if let Some(name) = &args.encoding {
        let encoding = Encoding::parse(name)?;
        let id = encoding.decode(&args.id)?;
        println!("encoding   {encoding}");
        println!("id         {id}");
        return Ok(());
    }
    let (name, layout) = match &args.layout {
        Some(name) => {
            let layout = Layout::preset(name).with_context(|| {
                let names: Vec<&str> = PRESETS.iter().map(|(name, _)| *name).collect();
                format!(
                    "{name:?} is not a layout; use one of {}, or leave --layout out to use the \
                     configured [snowflake] layout",
                    names.join(", ")
                )
            })?;
            (name.clone(), layout)
        }
        None => configured_layout(args)?,
    };
    let Some(id) = args.id.parse::<u64>().ok().filter(|id| *id <= i64::MAX as u64) else {
        bail!("{:?} is not an id; give a decimal number from 0 to {}", args.id, i64::MAX);
    };
    let parts = layout
        .decode(id)
        .with_context(|| format!("{id} is not an id of layout {name} ({layout})"))?;
    println!("layout     {name} ({layout})");
    println!("time       {} ({} ms)", UtcMs(parts.timestamp_ms), parts.timestamp_ms);
    println!("worker     {}", parts.worker);
    println!("sequence   {}", parts.sequence);
    Ok(())
}

/// The `[snowflake]` layout the configuration (`--config`, `IDMINT_*`) gives, custom keys
/// included, or the `snowflake` preset when snowflake ids are turned off there.
fn configured_layout(args: &DecodeArgs) -> anyhow::Result<(String, Layout)> {
    let settings = idmint_server::Settings::load(
        args.config.as_deref(),
        &|name| std::env::var(name).ok(),
        &idmint_server::Overrides::default(),
    )
    .context(
        "the configuration names the layout to decode with, and it is invalid; fix it, or \
         give --layout NAME",
    )?;
    Ok(match settings.snowflake {
        Some(config) => (config.space, config.layout),
        None => ("snowflake".to_string(), PRESETS[0].1),
    })
}

/// Decodes a public id of `tag` with the format its config section gives.
fn decode_public(args: &DecodeArgs, tag: &str) -> anyhow::Result<()> {
    let tag = Tag::parse(tag)?;
    let settings = idmint_server::Settings::load(
        args.config.as_deref(),
        &|name| std::env::var(name).ok(),
        &idmint_server::Overrides::default(),
    )
    .context("invalid configuration")?;
    let configured = settings.formats.into_iter().find(|f| f.tag == tag).map(|f| f.format);
    let sectionless = configured.is_none();
    let format = configured.unwrap_or_else(IdFormat::plain);
    let decoded = match format.decode(&args.id) {
        Ok(decoded) => decoded,
        // No section: the tag's ids are plain numbers here, which this text is not. Say
        // where the section was looked for, not only that the text is no plain id.
        Err(error) if sectionless => {
            let place = match &args.config {
                Some(path) => format!("the config file {} has none", path.display()),
                None => "no config file was given (--config FILE or IDMINT_CONFIG)".to_string(),
            };
            bail!(
                "{:?} is not a plain id ({error}), and tag {tag} has no [format.{tag}] section \
                 to decode it with: {place}. Pass the config file the server runs with, \
                 which holds the tag's template and key",
                args.id
            );
        }
        Err(error) => return Err(error.into()),
    };
    if sectionless {
        let place = match &args.config {
            Some(path) => format!("not in {}", path.display()),
            None => "no config file given".to_string(),
        };
        println!("note       no [format.{tag}] section ({place}): plain ids");
    }
    println!("tag        {tag}");
    println!("template   {format}");
    if let Some(permutation) = format.permutation() {
        println!("public id  {} (a {}-bit permutation)", decoded.public_id, permutation.bits());
    }
    for date in &decoded.dates {
        println!("date       {date}");
    }
    println!("id         {}", decoded.internal_id);
    Ok(())
}
