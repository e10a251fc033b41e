//! Public id formats of a tag: an output template such as
//! `ORD-{date:%Y%m%d}-{id:base36:8}`, an optional keyed permutation that turns internal ids
//! into non-guessable public ids, the exact inverse of both (`decode`), and the key guard in
//! the store that refuses a key change for a tag that already issued ids: a value of the
//! tag's metadata (`idmint_tag_meta`), or, on stores without tag metadata, the legacy guard
//! row `idmint.key.TAG` in the segment table, which a store with metadata has moved out of
//! that table at start ([`migrate_key_guard`]).
//!
//! A template is literal text with `{date:STRFTIME}` placeholders (the time of issue in the
//! format's time zone) and exactly one `{id}`, `{id:ENCODING}` or `{id:ENCODING:WIDTH}`
//! (encodings of `idmint_core::encoding`; a width pads with the alphabet's zero and must
//! hold the largest public id the tag can reach, or the template is refused). Every date
//! must render at one width on every day and hour ([`DAY_SPAN_CHECKED`] days are tried), so
//! the id sits at a fixed distance from both ends of the text: two different ids always give
//! two different texts, whatever their dates, and the text decodes back without guessing.
//!
//! Uniqueness of public ids comes from the internal ids (unique per tag) and two one-to-one
//! maps: the permutation of `1..2^bits` and a positional encoding.

use std::fmt;
use std::sync::Arc;

use idmint_core::encoding::ENCODED_ID_MAX;
pub use idmint_core::encoding::{Encoding, EncodingError};
pub use idmint_core::permute::{Permutation, PermuteError, PermuteKey};
use idmint_core::{Description, StartId, Step, Tag};
use idmint_store::{StoreError, TAG_META_TABLE, TagMetaStore, TagSpec};
use jiff::Zoned;
use jiff::tz::TimeZone;

use crate::segment::{Error, Segments};
use crate::sequence::format::DAY_SPAN_CHECKED;
use crate::sequence::format::{Piece, split_template, strftime};

/// Bounds and defaults of formats.
pub mod limits {
    pub use super::{TEMPLATE_DEFAULT, TEMPLATE_LEN_MAX};
}

/// Longest template accepted, in bytes.
pub const TEMPLATE_LEN_MAX: usize = 256;
/// Prefix of the legacy store row that records a tag's key fingerprint (the key guard of
/// stores without tag metadata, and of earlier versions).
pub const KEY_GUARD_PREFIX: &str = idmint_core::INTERNAL_PREFIX;
/// The tag-metadata name under which a tag's key fingerprint is recorded.
pub const KEY_GUARD_NAME: &str = "key";
/// The template of a tag configured without one: the public id in decimal.
pub const TEMPLATE_DEFAULT: &str = "{id}";
/// An instant inside the span the date check covers (2026-01-01T00:00:00Z), where widths
/// are measured for decoding.
const WIDTH_REFERENCE_MS: u64 = 1_767_225_600_000;

/// Where a node records the keys of its keyed tags (the key guard).
#[derive(Clone)]
pub enum KeyGuard {
    /// The store's tag metadata ([`TAG_META_TABLE`]; a hash per tag on Redis): single
    /// databases and Redis.
    Meta(Arc<dyn TagMetaStore>),
    /// The legacy guard row [`KEY_GUARD_PREFIX`] + tag in the segment table: the fallback of
    /// stores without tag metadata (Flicker, interleaved sets, a segment store handed in
    /// alone).
    Row,
}

impl fmt::Debug for KeyGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            KeyGuard::Meta(_) => "KeyGuard::Meta",
            KeyGuard::Row => "KeyGuard::Row",
        })
    }
}

/// A tag's public id format: template, time zone and optional permutation.
#[derive(Debug, Clone)]
pub struct IdFormat {
    template: String,
    parts: Vec<Part>,
    zone: TimeZone,
    permutation: Option<Arc<Permutation>>,
}

/// A format with the dates of one instant rendered: renders many ids cheaply.
#[derive(Debug)]
pub struct Renderer<'f> {
    format: &'f IdFormat,
    before: String,
    after: String,
}

/// What a public id text stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded {
    /// The public id (after permutation, before encoding).
    pub public_id: u64,
    /// The internal id the tag issued (equal to `public_id` without a key).
    pub internal_id: u64,
    /// The rendered dates, in order (text as issued).
    pub dates: Vec<String>,
}

/// Why a format, an id or a text was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The template cannot be used; the message says why and how to write it.
    #[error("template {template:?}: {reason}")]
    Template {
        /// The template as written.
        template: String,
        /// What is wrong.
        reason: String,
    },
    /// An id could not be encoded or a text decoded.
    #[error(transparent)]
    Encoding(#[from] EncodingError),
    /// An id is outside the permutation's range, or the key or width is bad.
    #[error(transparent)]
    Permute(#[from] PermuteError),
    /// The text does not have the template's shape.
    #[error("{text:?} is not an id of template {template:?}: {reason}")]
    NotThisFormat {
        /// The text.
        text: String,
        /// The template.
        template: String,
        /// What does not match.
        reason: String,
    },
    /// The tag issued ids under another key (or without one); serving it under this key
    /// could repeat a public id.
    #[error(
        "tag {tag}: {reason}; keep the old key, start a new tag for the new key, or set \
         force_key_change = true if no id of the tag was ever published"
    )]
    KeyChanged {
        /// The tag.
        tag: Tag,
        /// What the store records and what this node has.
        reason: String,
    },
    /// A tag's key is recorded both in the tag metadata and in a legacy guard row, and the
    /// two differ: only an operator knows which key its public ids were issued under.
    #[error(
        "tag {tag}: its key guard in {TAG_META_TABLE} records {meta:?}, but the legacy guard \
         row {row} in the segment table records {recorded:?}; find the key its public ids were \
         issued under, delete the other record (the row, or the {TAG_META_TABLE} row of tag \
         {tag}, name key) and start again"
    )]
    KeyGuardConflict {
        /// The tag.
        tag: Tag,
        /// What the tag metadata records.
        meta: String,
        /// The legacy guard row.
        row: Tag,
        /// What the row records.
        recorded: String,
    },
    /// The key guard could not be read or written.
    #[error("tag {tag}: cannot check its key in the store: {error}")]
    KeyGuard {
        /// The tag.
        tag: Tag,
        /// The store's error.
        error: Error,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Date(String),
    Id { encoding: Encoding, width: Option<usize> },
}

const SYNTAX: &str = "write literal text with {date:STRFTIME} placeholders and exactly one \
                      {id}, {id:ENCODING} or {id:ENCODING:WIDTH}, e.g. \
                      ORD-{date:%Y%m%d}-{id:base36:8}";

impl IdFormat {
    /// Parses and checks a template under a time zone and an optional permutation. A fixed
    /// width must hold the largest public id: `2^bits - 1` with a permutation, else the
    /// largest id, `i64::MAX`.
    pub fn new(
        template: &str,
        zone: TimeZone,
        permutation: Option<Permutation>,
    ) -> Result<IdFormat, FormatError> {
        let refuse =
            |reason: String| FormatError::Template { template: template.to_string(), reason };
        if template.len() > TEMPLATE_LEN_MAX {
            return Err(refuse(format!("it is longer than {TEMPLATE_LEN_MAX} bytes")));
        }
        let parts = parse_parts(template).map_err(refuse)?;
        let format = IdFormat { template: template.to_string(), parts, zone, permutation: None }
            .with_permutation(permutation);
        format.check_width().map_err(refuse)?;
        format.check_dates().map_err(refuse)?;
        Ok(format)
    }

    /// The format of a tag configured without one: `{id}`, in decimal, not permuted.
    pub fn plain() -> IdFormat {
        IdFormat {
            template: TEMPLATE_DEFAULT.to_string(),
            parts: vec![Part::Id { encoding: Encoding::Decimal, width: None }],
            zone: TimeZone::UTC,
            permutation: None,
        }
    }

    fn with_permutation(mut self, permutation: Option<Permutation>) -> IdFormat {
        self.permutation = permutation.map(Arc::new);
        self
    }

    /// The template as written.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// The permutation, if the format has a key.
    pub fn permutation(&self) -> Option<&Permutation> {
        self.permutation.as_deref()
    }

    /// Whether the rendered id is a plain decimal number (the template is `{id}` or
    /// `{id:decimal}`): JSON can then carry it as a number and Leaf's route as its text.
    pub fn is_numeric(&self) -> bool {
        matches!(self.parts[..], [Part::Id { encoding: Encoding::Decimal, width: None }])
    }

    /// The largest public id: `2^bits - 1` with a permutation, else `i64::MAX`.
    pub fn public_id_max(&self) -> u64 {
        self.permutation.as_ref().map_or(ENCODED_ID_MAX, |p| p.max_id())
    }

    /// The public id of internal id `id` (permuted when the format has a key).
    pub fn public_id(&self, id: u64) -> Result<u64, FormatError> {
        match &self.permutation {
            Some(p) => Ok(p.forward(id)?),
            None => Ok(id),
        }
    }

    /// The format with the dates of `at` rendered, to render ids issued at that instant.
    pub fn at(&self, at: &Zoned) -> Result<Renderer<'_>, FormatError> {
        let (mut before, mut after) = (String::new(), String::new());
        let mut seen_id = false;
        for part in &self.parts {
            let out = if seen_id { &mut after } else { &mut before };
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Date(directives) => {
                    out.push_str(&strftime(directives, at).map_err(|reason| {
                        FormatError::Template { template: self.template.clone(), reason }
                    })?)
                }
                Part::Id { .. } => seen_id = true,
            }
        }
        Ok(Renderer { format: self, before, after })
    }

    /// The time now in the format's zone (`now_ms` since the Unix epoch).
    pub fn zoned(&self, now_ms: u64) -> Zoned {
        let ms = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let timestamp = jiff::Timestamp::from_millisecond(ms).unwrap_or(jiff::Timestamp::MAX);
        timestamp.to_zoned(self.zone.clone())
    }

    /// What `text` stands for: the public id, the internal id and the dates. Strict: the
    /// literals must match, the id must be in the encoding's alphabet (and of the fixed
    /// width, if any), and a keyed format only accepts public ids in `1..2^bits`.
    pub fn decode(&self, text: &str) -> Result<Decoded, FormatError> {
        let not = |reason: &str| FormatError::NotThisFormat {
            text: text.to_string(),
            template: self.template.clone(),
            reason: reason.to_string(),
        };
        // The parts around the id have constant widths (checked at parse), measured here on
        // a rendering at the epoch.
        let sample = self.at(&self.zoned(WIDTH_REFERENCE_MS))?;
        let (head, tail) = (sample.before.len(), sample.after.len());
        if text.len() <= head + tail
            || !text.is_char_boundary(head)
            || !text.is_char_boundary(text.len() - tail)
        {
            return Err(not("it is too short or its id is in the wrong place"));
        }
        let (mut at, mut dates, mut digits, mut id_encoding) = (0, Vec::new(), "", None);
        let id_len = text.len() - head - tail;
        for (part, width) in self.parts.iter().zip(sample.widths(id_len)) {
            let piece = text.get(at..at + width).ok_or_else(|| not("it is too short"))?;
            match part {
                Part::Literal(literal) if piece != literal => {
                    return Err(not(&format!("{piece:?} stands where {literal:?} should")));
                }
                Part::Literal(_) => {}
                Part::Date(_) => dates.push(piece.to_string()),
                Part::Id { encoding, width } => {
                    if width.is_some_and(|w| w != piece.len()) {
                        return Err(not("its id is not of the template's fixed width"));
                    }
                    (digits, id_encoding) = (piece, Some(*encoding));
                }
            }
            at += width;
        }
        let encoding = id_encoding.ok_or_else(|| not("the template has no id"))?;
        let public_id = encoding.decode(digits)?;
        let internal_id = match &self.permutation {
            Some(p) => p.backward(public_id)?,
            None => public_id,
        };
        Ok(Decoded { public_id, internal_id, dates })
    }

    /// Refuses a fixed width that cannot hold the largest public id.
    fn check_width(&self) -> Result<(), String> {
        let max = self.public_id_max();
        for part in &self.parts {
            let Part::Id { encoding, width: Some(width) } = part else { continue };
            let needs = encoding.digits(max);
            if *width < needs {
                let hint = match &self.permutation {
                    Some(p) => format!("the tag's {}-bit key makes public ids", p.bits()),
                    None => "without a key, ids of a tag".to_string(),
                };
                let fits = bits_fitting(*encoding, *width);
                return Err(format!(
                    "{{id:{encoding}:{width}}} holds {width} digits but {hint} reach {max} \
                     ({needs} digits), so ids past it would be refused; widen it to {needs}, \
                     or give the tag a key with bits = {fits} or fewer"
                ));
            }
        }
        Ok(())
    }

    /// Refuses a date whose rendering changes width: the id would move, and two ids of
    /// different dates could read alike.
    fn check_dates(&self) -> Result<(), String> {
        if !self.parts.iter().any(|p| matches!(p, Part::Date(_))) {
            return Ok(());
        }
        let start = jiff::civil::date(2026, 1, 1);
        let mut width = None;
        for day in 0..DAY_SPAN_CHECKED {
            // Each day once, at a different hour, minute and second, so every directive
            // that could change width is exercised.
            let (hour, minute, second) = ((day % 24) as i8, (day % 60) as i8, (day * 7 % 60) as i8);
            let at = start
                .checked_add(jiff::Span::new().days(day))
                .and_then(|date| date.at(hour, minute, second, 0).to_zoned(self.zone.clone()))
                .map_err(|e| e.to_string())?;
            let rendered = self.at(&at).map_err(|e| e.to_string())?;
            let len = (rendered.before.len(), rendered.after.len());
            if *width.get_or_insert(len) != len {
                return Err(format!(
                    "its dates change width from day to day (e.g. {:?}); use zero-padded \
                     directives such as %Y%m%d",
                    rendered.before
                ));
            }
        }
        Ok(())
    }
}

impl Renderer<'_> {
    /// The text of internal id `id`.
    pub fn render(&self, id: u64) -> Result<String, FormatError> {
        let public = self.format.public_id(id)?;
        let (encoding, width) = self.format.id_part();
        let digits = encoding.encode(public, width)?;
        let mut out = String::with_capacity(self.before.len() + digits.len() + self.after.len());
        out.push_str(&self.before);
        out.push_str(&digits);
        out.push_str(&self.after);
        Ok(out)
    }

    /// The byte width of each part when the id takes `id_len` bytes (dates and literals
    /// have one width each, checked at parse).
    fn widths(&self, id_len: usize) -> Vec<usize> {
        let at = self.format.zoned(WIDTH_REFERENCE_MS);
        let width = |part: &Part| match part {
            Part::Literal(text) => text.len(),
            // Rendered at parse time already, so it renders here too.
            Part::Date(directives) => strftime(directives, &at).map_or(0, |s| s.len()),
            Part::Id { .. } => id_len,
        };
        self.format.parts.iter().map(width).collect()
    }
}

impl IdFormat {
    fn id_part(&self) -> (Encoding, Option<usize>) {
        self.parts
            .iter()
            .find_map(|p| match p {
                Part::Id { encoding, width } => Some((*encoding, *width)),
                _ => None,
            })
            // The parser admits only templates with exactly one id.
            .unwrap_or((Encoding::Decimal, None))
    }
}

impl fmt::Display for IdFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.template)
    }
}

/// Checks that `tag` may be served under `permutation`, recording it in the store on first
/// use. The record (the key's fingerprint and width, never the key) is the tag's metadata
/// value [`KEY_GUARD_NAME`] where the store has tag metadata ([`KeyGuard::Meta`]), else the
/// legacy guard row [`KEY_GUARD_PREFIX`] + tag in the segment table ([`KeyGuard::Row`]). A
/// different fingerprint, or a first key for a tag that already allocated ids, is refused
/// unless `force`, which rewrites the record (and is logged as a warning). A record another
/// node made meanwhile must be this key's.
pub async fn claim_key(
    segments: &Segments,
    guard: &KeyGuard,
    tag: &Tag,
    permutation: &Permutation,
    force: bool,
) -> Result<(), FormatError> {
    let want = format!(
        "idmint key guard of tag {tag}: fingerprint {:016x}, {} bits; do not edit or delete",
        permutation.fingerprint(),
        permutation.bits()
    );
    match guard {
        KeyGuard::Meta(meta) => claim_in_meta(segments, meta.as_ref(), tag, &want, force).await?,
        KeyGuard::Row => claim_in_row(segments, tag, &want, force).await?,
    }
    Ok(())
}

/// The tag a legacy guard row ([`KEY_GUARD_PREFIX`] + tag, as earlier versions wrote it)
/// guards, or `None` for another internal row (the prefix in another ASCII case, or a tag
/// idmint cannot parse: not a row idmint wrote).
pub fn guarded_tag(row: &Tag) -> Option<Tag> {
    Tag::parse(row.as_str().strip_prefix(KEY_GUARD_PREFIX)?).ok()
}

/// Moves the legacy guard row `row` of `tag` (its record `recorded`) into the tag metadata,
/// then deletes the row: what a node with tag metadata does at start for each guard row
/// earlier versions left in the segment table. A tag whose metadata already records another
/// key than its row is refused, naming both ([`FormatError::KeyGuardConflict`]): only an
/// operator knows which key its public ids were issued under. The row is deleted through the
/// store's tag deletion, like any tag: its tombstone lands in idmint's own table, and the
/// row held no ids. An account refused the deletion leaves the row, with a warning: the
/// metadata is the record from then on, and the next start tries again.
pub async fn migrate_key_guard(
    segments: &Segments,
    meta: &dyn TagMetaStore,
    tag: &Tag,
    row: &Tag,
    recorded: &str,
) -> Result<(), FormatError> {
    let store_error =
        |e: StoreError| FormatError::KeyGuard { tag: tag.clone(), error: Error::Store(e) };
    let mut current = meta.meta(tag, KEY_GUARD_NAME).await.map_err(store_error)?;
    if current.is_none() {
        let set = meta.compare_and_set_meta(tag, KEY_GUARD_NAME, None, recorded).await;
        if !set.map_err(store_error)? {
            // Another node moved it (or recorded a key) meanwhile.
            current = meta.meta(tag, KEY_GUARD_NAME).await.map_err(store_error)?;
        }
    }
    if let Some(current) = current.filter(|current| current != recorded) {
        return Err(FormatError::KeyGuardConflict {
            tag: tag.clone(),
            meta: current,
            row: row.clone(),
            recorded: recorded.to_string(),
        });
    }
    match segments.delete_tag(row).await {
        Ok(()) | Err(Error::UnknownTag(_) | Error::Store(StoreError::TagNotFound(_))) => {
            tracing::info!(%tag, %row, "key guard moved from the segment table to {TAG_META_TABLE}");
            Ok(())
        }
        Err(Error::Store(StoreError::Denied { feature, needs, .. })) => {
            tracing::warn!(
                %tag, %row, %feature, %needs,
                "key guard copied to {TAG_META_TABLE}; its legacy row stays, the account may \
                 not delete it"
            );
            Ok(())
        }
        Err(error) => Err(FormatError::KeyGuard { tag: tag.clone(), error }),
    }
}

/// The store row that guards `tag`'s key: the internal row [`KEY_GUARD_PREFIX`] + tag,
/// which no user input can name ([`Tag::internal`]).
pub fn key_guard_tag(tag: &Tag) -> Result<Tag, FormatError> {
    Tag::internal(tag).map_err(|e| FormatError::KeyChanged {
        tag: tag.clone(),
        reason: format!(
            "its key guard row {KEY_GUARD_PREFIX}{tag} is not a valid row name ({e}); keyed \
             tags are at most {} bytes",
            idmint_core::limits::TAG_LEN_MAX - KEY_GUARD_PREFIX.len()
        ),
    })
}

/// [`claim_key`] on the tag metadata: read, decide, then one compare-and-set from what was
/// read, so a racing node's record is seen instead of overwritten.
async fn claim_in_meta(
    segments: &Segments,
    meta: &dyn TagMetaStore,
    tag: &Tag,
    want: &str,
    force: bool,
) -> Result<(), FormatError> {
    let store_error =
        |e: StoreError| FormatError::KeyGuard { tag: tag.clone(), error: Error::Store(e) };
    let recorded = meta.meta(tag, KEY_GUARD_NAME).await.map_err(store_error)?;
    let missing = format!("its key guard (in {TAG_META_TABLE}) is missing");
    let reason = refusal(segments, tag, recorded.as_deref(), want, &missing).await?;
    let Some(reason) = reason else { return Ok(()) };
    permit(tag, reason, force)?;
    if meta
        .compare_and_set_meta(tag, KEY_GUARD_NAME, recorded.as_deref(), want)
        .await
        .map_err(store_error)?
    {
        tracing::info!(%tag, "key recorded for the tag");
        return Ok(());
    }
    // Another node recorded its key first: it must be this one.
    let now = meta.meta(tag, KEY_GUARD_NAME).await.map_err(store_error)?;
    if now.as_deref() == Some(want) {
        return Ok(());
    }
    let reason = format!("another node recorded {now:?} for it a moment ago, not {want:?}");
    Err(FormatError::KeyChanged { tag: tag.clone(), reason })
}

/// [`claim_key`] on the legacy guard row: the fallback of stores without tag metadata.
async fn claim_in_row(
    segments: &Segments,
    tag: &Tag,
    want: &str,
    force: bool,
) -> Result<(), FormatError> {
    let guard_error = |error: Error| FormatError::KeyGuard { tag: tag.clone(), error };
    let guard = key_guard_tag(tag)?;
    let recorded = match segments.get_tag(&guard).await {
        Ok(record) => Some(record.description),
        Err(Error::UnknownTag(_)) => None,
        Err(error) => return Err(guard_error(error)),
    };
    let missing = format!("its key guard row {guard} is missing");
    let reason = refusal(segments, tag, recorded.as_deref(), want, &missing).await?;
    let Some(reason) = reason else { return Ok(()) };
    permit(tag, reason, force)?;
    if recorded.is_some() {
        segments.delete_tag(&guard).await.map_err(guard_error)?;
    }
    let spec = TagSpec {
        tag: guard,
        step: Step::DEFAULT,
        // Above the guard's earlier lives, whose rows held no ids worth keeping.
        start: None,
        force: false,
        description: Description::new(want)
            .map_err(|e| guard_error(Error::Store(StoreError::InvalidValue(e.to_string()))))?,
    };
    match segments.create_tag(&spec).await {
        Ok(_created) => {
            tracing::info!(%tag, "key recorded for the tag");
            Ok(())
        }
        // Another node recorded its key first: it must be this one.
        Err(Error::Store(StoreError::TagExists(_))) => {
            let record = segments.get_tag(&spec.tag).await.map_err(guard_error)?;
            if record.description == want {
                return Ok(());
            }
            let reason = format!(
                "another node recorded {:?} for it a moment ago, not {want:?}",
                record.description
            );
            Err(FormatError::KeyChanged { tag: tag.clone(), reason })
        }
        Err(error) => Err(guard_error(error)),
    }
}

/// Why `want` may not simply be recorded for `tag`, or `None` when `recorded` already is
/// `want`: another key recorded, or none recorded for a tag that allocated ids (`missing`
/// says where the record should be).
async fn refusal(
    segments: &Segments,
    tag: &Tag,
    recorded: Option<&str>,
    want: &str,
    missing: &str,
) -> Result<Option<String>, FormatError> {
    Ok(Some(match recorded {
        Some(recorded) if recorded == want => return Ok(None),
        Some(recorded) => format!("its ids were issued under {recorded:?}, not {want:?}"),
        None => match segments.get_tag(tag).await {
            Ok(record) if record.max_id > StartId::DEFAULT.get() => format!(
                "it has allocated ids up to {} but {missing}: either the tag served ids before \
                 it had a key, or the record was deleted from the store (a backup restored, a \
                 manual DELETE); under another key new ids could map onto public ids already \
                 issued. If the key is the one its ids were issued under, set \
                 force_key_change = true for one start to record it again",
                record.max_id - 1
            ),
            Ok(_) | Err(Error::UnknownTag(_)) => String::new(),
            Err(error) => return Err(FormatError::KeyGuard { tag: tag.clone(), error }),
        },
    }))
}

/// Lets a record be written: always for a first key of an unused tag (empty `reason`), and
/// otherwise only when forced (logged as a warning).
fn permit(tag: &Tag, reason: String, force: bool) -> Result<(), FormatError> {
    if reason.is_empty() {
        return Ok(());
    }
    if !force {
        return Err(FormatError::KeyChanged { tag: tag.clone(), reason });
    }
    tracing::warn!(%tag, %reason, "key change forced (force_key_change = true)");
    Ok(())
}

/// The widest permutation whose ids all fit `width` digits of `encoding`.
fn bits_fitting(encoding: Encoding, width: usize) -> u32 {
    (1..=63u32).rev().find(|bits| encoding.digits((1u64 << bits) - 1) <= width).unwrap_or(0)
}

fn parse_parts(template: &str) -> Result<Vec<Part>, String> {
    let pieces = split_template(template).ok_or_else(|| format!("an unmatched brace; {SYNTAX}"))?;
    let parts = pieces
        .into_iter()
        .map(|piece| match piece {
            Piece::Literal(literal) => Ok(Part::Literal(literal.to_string())),
            Piece::Placeholder(inner) => placeholder(inner),
        })
        .collect::<Result<Vec<Part>, String>>()?;
    if parts.iter().filter(|p| matches!(p, Part::Id { .. })).count() != 1 {
        return Err(format!("it needs exactly one {{id}}; {SYNTAX}"));
    }
    Ok(parts)
}

fn placeholder(inner: &str) -> Result<Part, String> {
    if let Some(directives) = inner.strip_prefix("date:") {
        if directives.is_empty() {
            return Err(format!("{{date:}} needs strftime directives; {SYNTAX}"));
        }
        return Ok(Part::Date(directives.to_string()));
    }
    let mut fields = inner.split(':');
    if fields.next() != Some("id") {
        return Err(format!("{{{inner}}} is not a placeholder; {SYNTAX}"));
    }
    let encoding = match fields.next() {
        None => Encoding::Decimal,
        Some(name) => Encoding::parse(name).map_err(|e| e.to_string())?,
    };
    let width = match fields.next() {
        None => None,
        Some(text) => match text.parse::<usize>() {
            Ok(w) if (1..=idmint_core::encoding::ENCODED_WIDTH_MAX).contains(&w) => Some(w),
            _ => {
                return Err(format!(
                    "{{{inner}}}: the width {text:?} is not 1 to {}",
                    idmint_core::encoding::ENCODED_WIDTH_MAX
                ));
            }
        },
    };
    if fields.next().is_some() {
        return Err(format!("{{{inner}}} has too many fields; {SYNTAX}"));
    }
    Ok(Part::Id { encoding, width })
}

#[cfg(test)]
mod tests {
    use idmint_core::permute::PermuteKey;

    use super::*;

    fn keyed(bits: u32) -> Option<Permutation> {
        Permutation::new(&PermuteKey::from_bytes(*b"0123456789abcdef"), bits).ok()
    }

    fn format(template: &str, permutation: Option<Permutation>) -> Result<IdFormat, String> {
        IdFormat::new(template, TimeZone::UTC, permutation).map_err(|e| e.to_string())
    }

    #[test]
    fn templates_render_and_decode_back() {
        let f = format("ORD-{date:%Y%m%d}-{id:base36:8}", keyed(41)).expect("fits 41 bits");
        // 2026-11-22T10:00:00Z
        let at = f.zoned(1_795_341_600_000);
        let renderer = f.at(&at).expect("renders");
        let text = renderer.render(42).expect("in range");
        assert!(text.starts_with("ORD-20261122-") && text.len() == 21, "{text}");
        let decoded = f.decode(&text).expect("decodes");
        assert_eq!(decoded.internal_id, 42);
        assert_eq!(decoded.dates, vec!["20261122".to_string()]);
        assert_ne!(decoded.public_id, 42);
        assert!(!f.is_numeric());
        let plain = format(TEMPLATE_DEFAULT, None).expect("default");
        assert!(plain.is_numeric());
        let text = plain.at(&at).and_then(|r| r.render(7)).expect("renders");
        assert_eq!(text, "7");
        assert_eq!(plain.decode("7").map(|d| d.internal_id), Ok(7));
        let suffix = format("u{id:base62}x", None).expect("variable width, fixed ends");
        let text = suffix.at(&at).and_then(|r| r.render(62)).expect("renders");
        assert_eq!(text, "u10x");
        assert_eq!(suffix.decode("u10x").map(|d| d.internal_id), Ok(62));
        for bad in ["v10x", "u10", "u1!x", "ux"] {
            assert!(suffix.decode(bad).is_err(), "{bad}");
        }
        // A keyed format refuses a public id outside its range instead of guessing.
        assert!(f.decode("ORD-20261122-zzzzzzzz").is_err());
    }

    #[test]
    fn templates_that_could_repeat_or_mislead_are_refused() {
        for (bad, says) in [
            ("{id:base36:8}", "widen it to 13, or give the tag a key with bits = 41"),
            ("{date:%Y%m%d}", "exactly one {id}"),
            ("{id}{id}", "exactly one {id}"),
            ("{id:base64}", "not an encoding"),
            ("{id:base36:0}", "not 1 to 32"),
            ("{id:base36:8:9}", "too many fields"),
            ("{day}{id}", "not a placeholder"),
            ("{date:%Y%-m%-d}{id}", "change width"),
            ("{date:%Y{id}", "unmatched brace"),
            ("{date:%Y%}{id}", "date directives"),
        ] {
            let err = format(bad, None).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
        let err = format("{id:decimal:6}", keyed(32)).expect_err("2^32 needs 10 digits");
        assert!(err.contains("32-bit key") && err.contains("bits = 19"), "{err}");
        assert!(format("{id:crockford32:13}", None).is_ok());
    }
}
