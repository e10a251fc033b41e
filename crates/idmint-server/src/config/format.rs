//! The `[format.TAG]` sections: how a segment tag's ids are shown to clients (template, time
//! zone, permutation key and width). Their keys are file keys only, with no variable of their
//! own; the key is read from the file or from the variable `key_env` names, and appears in no
//! error message.

use std::collections::BTreeMap;

use idmint::IdFormat;
use idmint_core::Tag;
use idmint_core::limits::TAG_COUNT_MAX;
use idmint_core::permute::{Permutation, PermuteKey};
use serde::{Deserialize, Serialize};

use super::TagFormat;
use super::origins::Layers;
use super::secret::Secret;

/// A `[format.TAG]` section: how the tag's ids are shown to clients.
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct FormatSection {
    /// Output template, e.g. `ORD-{date:%Y%m%d}-{id:base36:8}` (default `{id}`).
    pub template: Option<String>,
    /// Time zone of `{date}`: `UTC`, `+08:00` or an IANA name (default UTC).
    pub time_zone: Option<String>,
    /// The permutation key, 32 hex digits. Prefer `key_env`: a key in a file is easier to
    /// leak.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<Secret>,
    /// The name of an environment variable holding the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    /// Width of the permuted public ids in bits (16 to 63); required with a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bits: Option<u32>,
    /// Serve under a key other than the one recorded for the tag (or a first key on a tag
    /// that already allocated ids). Only for tags whose ids were never published.
    pub force_key_change: Option<bool>,
}

/// The `[format.TAG]` sections resolved: tag names, templates, time zones and keys checked.
/// The key is read from the file or from the variable `key_env` names, and appears in no
/// error message.
pub(super) fn tag_formats(
    l: &mut Layers<'_>,
    sections: &mut BTreeMap<String, FormatSection>,
) -> Vec<TagFormat> {
    if sections.len() > TAG_COUNT_MAX {
        let origin = l.source.origin("format");
        l.refuse(&origin, format!("{} formats; at most {TAG_COUNT_MAX}", sections.len()));
        return Vec::new();
    }
    let mut formats = Vec::with_capacity(sections.len());
    for (name, section) in sections.iter_mut() {
        if let Some(format) = tag_format(l, name, section) {
            formats.push(format);
        }
    }
    formats
}

/// One `[format.TAG]` section resolved; `None` (with the problems recorded) if it cannot be.
fn tag_format(l: &mut Layers<'_>, name: &str, section: &mut FormatSection) -> Option<TagFormat> {
    let key_of = |field: &str| format!("format.{name}.{field}");
    let origin = l.source.origin(&format!("format.{name}"));
    let template = l.file_only(
        &key_of("template"),
        &mut section.template,
        idmint::format::limits::TEMPLATE_DEFAULT.into(),
    );
    let zone_name = l.file_only(&key_of("time_zone"), &mut section.time_zone, "UTC".to_string());
    let force = l.file_only(&key_of("force_key_change"), &mut section.force_key_change, false);
    let key_origin = l.optional(&key_of("key"), &section.key);
    let key_env_origin = l.optional(&key_of("key_env"), &section.key_env);
    let bits_origin = l.optional(&key_of("bits"), &section.bits);
    let tag = l.check(&origin, Tag::parse(name));
    let zone = l.check(&zone_name.origin, idmint::sequence::time_zone(&zone_name.value));
    // `Err(())`: the key is wrong (a problem is recorded); `Ok(None)`: no key.
    let key = match (&section.key, &section.key_env) {
        (Some(_), Some(_)) => {
            l.refuse(&origin, "give key or key_env, not both");
            Err(())
        }
        (Some(text), None) => {
            l.check(&key_origin, PermuteKey::parse_hex(text.expose())).map(Some).ok_or(())
        }
        (None, Some(var)) => match (l.env)(var) {
            Some(text) => {
                let parsed =
                    PermuteKey::parse_hex(&text).map_err(|e| format!("the key in {var}: {e}"));
                l.check(&key_env_origin, parsed).map(Some).ok_or(())
            }
            None => {
                let reason = format!(
                    "key_env names {var:?}, which is not set; export it with the tag's key \
                     (32 hex digits)"
                );
                l.refuse(&key_env_origin, reason);
                Err(())
            }
        },
        (None, None) => Ok(None),
    };
    let permutation = match (key, section.bits) {
        (Ok(Some(key)), Some(bits)) => {
            l.check(&bits_origin, Permutation::new(&key, bits)).map(Some).ok_or(())
        }
        (Ok(Some(_)), None) => {
            let reason = "a key needs bits, the width of public ids (16 to 63), e.g. bits = 41 \
                          for ids up to 2.2 × 10^12";
            l.refuse(&origin, reason);
            Err(())
        }
        (Ok(None), Some(_)) => {
            l.refuse(&bits_origin, "bits is the width of permuted ids and needs a key or key_env");
            Err(())
        }
        (Ok(None), None) => Ok(None),
        (Err(()), _) => Err(()),
    };
    // The template's widths depend on the permutation's bits: checked only with a good one.
    let (Some(tag), Some(zone), Ok(permutation)) = (tag, zone, permutation) else { return None };
    let format = l.check(&template.origin, IdFormat::new(&template.value, zone, permutation))?;
    Some(TagFormat { tag, format, force_key_change: force.value })
}
