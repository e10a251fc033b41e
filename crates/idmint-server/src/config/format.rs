//! The `[format.TAG]` sections resolved: how a segment tag's ids are shown to clients
//! (template, time zone, permutation key and width), each section's keys declared in
//! `keys.rs`. Their keys are file keys only, with no variable of their own; the key is read
//! from the file or from the variable `key_env` names, and appears in no error message.

use std::collections::BTreeMap;

use idmint::IdFormat;
use idmint_core::Tag;
use idmint_core::limits::TAG_COUNT_MAX;
use idmint_core::permute::{Permutation, PermuteKey};

use super::TagFormat;
use super::keys::{FormatKeys, FormatSection};
use super::origins::Layers;

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
    let origin = l.source.origin(&format!("format.{name}"));
    let FormatKeys {
        template,
        time_zone: zone_name,
        key: key_text,
        key_env,
        bits,
        force_key_change: force,
    } = section.layer(l, &format!("format.{name}"));
    let tag = l.check(&origin, Tag::parse(name));
    let zone = l.check(&zone_name.origin, idmint::sequence::time_zone(&zone_name.value));
    // `Err(())`: the key is wrong (a problem is recorded); `Ok(None)`: no key.
    let key = match (&key_text.value, &key_env.value) {
        (Some(_), Some(_)) => {
            l.refuse(&origin, "give key or key_env, not both");
            Err(())
        }
        (Some(text), None) => {
            l.check(&key_text.origin, PermuteKey::parse_hex(text.expose())).map(Some).ok_or(())
        }
        (None, Some(var)) => match (l.env)(var) {
            Some(text) => {
                let parsed =
                    PermuteKey::parse_hex(&text).map_err(|e| format!("the key in {var}: {e}"));
                l.check(&key_env.origin, parsed).map(Some).ok_or(())
            }
            None => {
                let reason = format!(
                    "key_env names {var:?}, which is not set; export it with the tag's key \
                     (32 hex digits)"
                );
                l.refuse(&key_env.origin, reason);
                Err(())
            }
        },
        (None, None) => Ok(None),
    };
    let permutation = match (key, bits.value) {
        (Ok(Some(key)), Some(width)) => {
            l.check(&bits.origin, Permutation::new(&key, width)).map(Some).ok_or(())
        }
        (Ok(Some(_)), None) => {
            let reason = "a key needs bits, the width of public ids (16 to 63), e.g. bits = 41 \
                          for ids up to 2.2 × 10^12";
            l.refuse(&origin, reason);
            Err(())
        }
        (Ok(None), Some(_)) => {
            l.refuse(&bits.origin, "bits is the width of permuted ids and needs a key or key_env");
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
