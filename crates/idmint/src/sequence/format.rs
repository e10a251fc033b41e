//! Sequence output formats and time zones: `{date:%Y%m%d}{seq:06}` turns sequence number 1
//! on 2026-11-22 into `20261122000001`.
//!
//! A format is literal text with placeholders: `{date:STRFTIME}` (the request's time in the
//! sequence's time zone, any number of them) and exactly one `{seq}` or `{seq:0N}` (the
//! number, zero-padded to `N` digits, 1 to [`SEQ_WIDTH_MAX`]), which must be the last
//! placeholder: only literal text may follow it. A number wider than `N` is written whole,
//! so the id grows rather than repeats.
//!
//! Uniqueness is checked when a format is accepted: for a daily sequence (whose numbers
//! restart every day) the dates must have one width and tell every day apart, checked over
//! [`DAY_SPAN_CHECKED`] consecutive days; then two ids of different days differ in their
//! date, and two of one day in their number.

use std::fmt;

use jiff::tz::{Offset, TimeZone};
use jiff::{Timestamp, Zoned};

/// Widest zero padding of `{seq:0N}`.
pub const SEQ_WIDTH_MAX: usize = 18;
/// Consecutive days over which a daily format must tell every day apart (over two years,
/// so the year must be in it).
pub const DAY_SPAN_CHECKED: i64 = 800;
/// The default format of a daily sequence.
pub const DAILY_FORMAT_DEFAULT: &str = "{date:%Y%m%d}{seq:06}";

/// A parsed output format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeqFormat {
    parts: Vec<Part>,
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Date(String),
    Seq { width: usize },
}

impl SeqFormat {
    /// Parses a format; the error says what is wrong and how to write it.
    pub fn parse(text: &str) -> Result<SeqFormat, String> {
        let pieces = split_template(text)
            .ok_or_else(|| format!("format {text:?}: an unmatched brace; {SYNTAX}"))?;
        let parts = pieces
            .into_iter()
            .map(|piece| match piece {
                Piece::Literal(literal) => Ok(Part::Literal(literal.to_string())),
                Piece::Placeholder(inner) => placeholder(text, inner),
            })
            .collect::<Result<Vec<Part>, String>>()?;
        let seqs: Vec<usize> = parts
            .iter()
            .enumerate()
            .filter_map(|(i, p)| matches!(p, Part::Seq { .. }).then_some(i))
            .collect();
        let [seq_at] = seqs[..] else {
            return Err(format!("format {text:?}: it needs exactly one {{seq}}; {SYNTAX}"));
        };
        if parts[seq_at + 1..].iter().any(|p| !matches!(p, Part::Literal(_))) {
            return Err(format!(
                "format {text:?}: {{seq}} must be the last placeholder (a date after a number \
                 of varying width could make two ids alike); move the date before it"
            ));
        }
        let format = SeqFormat { parts, text: text.to_string() };
        // Every strftime part must render (jiff refuses unknown directives).
        format.render(1, &Zoned::new(Timestamp::UNIX_EPOCH, TimeZone::UTC))?;
        Ok(format)
    }

    /// The format as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether it has a `{date}` placeholder.
    pub fn has_date(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Date(_)))
    }

    /// Refuses a daily sequence's format that could repeat an id: its dates must have one
    /// width and differ on every day of [`DAY_SPAN_CHECKED`] consecutive days.
    pub fn check_daily(&self, zone: &TimeZone) -> Result<(), String> {
        let start = jiff::civil::date(2026, 1, 1);
        let mut seen = std::collections::HashSet::new();
        let mut width = None;
        for day in 0..DAY_SPAN_CHECKED {
            // Each local day once, at a different hour each, so time-of-day directives
            // count too.
            let at = start
                .checked_add(jiff::Span::new().days(day))
                .and_then(|date| date.at((day % 24) as i8, 0, 0, 0).to_zoned(zone.clone()))
                .map_err(|e| e.to_string())?;
            let dates = self.dates(&at)?;
            if *width.get_or_insert(dates.len()) != dates.len() {
                return Err(format!(
                    "format {:?}: its date changes width from day to day (e.g. {dates:?}); \
                     use zero-padded directives such as %Y%m%d",
                    self.text
                ));
            }
            seen.insert(dates);
        }
        if seen.len() < DAY_SPAN_CHECKED as usize {
            return Err(format!(
                "format {:?}: a daily sequence restarts at 1 every day, so its format needs a \
                 date with year, month and day (e.g. {DAILY_FORMAT_DEFAULT}), or two days' ids \
                 would repeat",
                self.text
            ));
        }
        Ok(())
    }

    /// The id of number `seq` at time `at`.
    pub fn render(&self, seq: u64, at: &Zoned) -> Result<String, String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Date(directives) => out.push_str(&strftime(directives, at)?),
                Part::Seq { width } => out.push_str(&format!("{seq:0width$}")),
            }
        }
        Ok(out)
    }

    /// The rendered dates alone (for the uniqueness check).
    fn dates(&self, at: &Zoned) -> Result<String, String> {
        let mut out = String::new();
        for part in &self.parts {
            if let Part::Date(directives) = part {
                out.push_str(&strftime(directives, at)?);
                out.push('\u{0}');
            }
        }
        Ok(out)
    }
}

impl fmt::Display for SeqFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

const SYNTAX: &str = "write literal text with {date:STRFTIME} and one {seq} or {seq:0N} last, \
                      e.g. {date:%Y%m%d}{seq:06}";

/// A piece of a template: literal text, or what stands between `{` and `}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece<'t> {
    Literal(&'t str),
    Placeholder(&'t str),
}

/// Splits a template (sequence formats and tag id formats alike) into literal text and
/// placeholders; `None` if a brace is unmatched (a `}` alone, a `{` without its `}`, or a
/// `{` inside a placeholder).
pub(crate) fn split_template(text: &str) -> Option<Vec<Piece<'_>>> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let Some(open) = rest.find(['{', '}']) else {
            pieces.push(Piece::Literal(rest));
            break;
        };
        if open > 0 {
            pieces.push(Piece::Literal(&rest[..open]));
        }
        let inner = rest[open..].strip_prefix('{')?;
        let close = inner.find('}')?;
        if inner[..close].contains('{') {
            return None;
        }
        pieces.push(Piece::Placeholder(&inner[..close]));
        rest = &inner[close + 1..];
    }
    Some(pieces)
}

fn placeholder(text: &str, inner: &str) -> Result<Part, String> {
    if inner == "seq" {
        return Ok(Part::Seq { width: 0 });
    }
    if let Some(width) = inner.strip_prefix("seq:0") {
        return match width.parse::<usize>() {
            Ok(width) if (1..=SEQ_WIDTH_MAX).contains(&width) => Ok(Part::Seq { width }),
            _ => Err(format!(
                "format {text:?}: {{{inner}}} pads to 1 to {SEQ_WIDTH_MAX} digits, e.g. {{seq:06}}"
            )),
        };
    }
    match inner.strip_prefix("date:") {
        Some(directives) if !directives.is_empty() => Ok(Part::Date(directives.to_string())),
        _ => Err(format!("format {text:?}: {{{inner}}} is not a placeholder; {SYNTAX}")),
    }
}

pub(crate) fn strftime(directives: &str, at: &Zoned) -> Result<String, String> {
    jiff::fmt::strtime::format(directives, at)
        .map_err(|e| format!("date directives {directives:?}: {e}"))
}

/// A time zone by name: `UTC`, a fixed offset (`+08:00`, `-05:30`) or an IANA name
/// (`Asia/Shanghai`, from the system's time-zone database).
pub fn time_zone(name: &str) -> Result<TimeZone, String> {
    if name == "UTC" || name == "Z" {
        return Ok(TimeZone::UTC);
    }
    if let Some(offset) = fixed_offset(name) {
        return Ok(TimeZone::fixed(offset));
    }
    TimeZone::get(name).map_err(|e| {
        format!(
            "time zone {name:?}: {e}; use UTC, a fixed offset such as +08:00, or an IANA name \
             such as Asia/Shanghai (needs the system's tzdata)"
        )
    })
}

fn fixed_offset(name: &str) -> Option<Offset> {
    let sign = match name.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (hours, minutes) = name[1..].split_once(':')?;
    let (hours, minutes) = (hours.parse::<i32>().ok()?, minutes.parse::<i32>().ok()?);
    if hours.to_string().len() > 2 || !(0..=59).contains(&minutes) || hours > 18 {
        return None;
    }
    Offset::from_seconds(sign * (hours * 3_600 + minutes * 60)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64, zone: &TimeZone) -> Zoned {
        Timestamp::from_millisecond(ms).expect("time").to_zoned(zone.clone())
    }

    #[test]
    fn formats_render_parse_and_refuse_what_could_repeat() {
        let f = SeqFormat::parse(DAILY_FORMAT_DEFAULT).unwrap_or_else(|e| panic!("{e}"));
        // 2026-11-22T10:00:00Z
        let utc = at(1_795_341_600_000, &TimeZone::UTC);
        assert_eq!(f.render(1, &utc).as_deref(), Ok("20261122000001"));
        assert_eq!(f.render(1_234_567, &utc).as_deref(), Ok("202611221234567"));
        assert_eq!(f.check_daily(&TimeZone::UTC), Ok(()));
        let shanghai = time_zone("+08:00").unwrap_or_else(|e| panic!("{e}"));
        // 2026-11-22T16:30:00Z is already the 23rd in +08:00.
        let late = at(1_795_365_000_000, &shanghai);
        assert_eq!(f.render(7, &late).as_deref(), Ok("20261123000007"));
        let order = SeqFormat::parse("ORD-{date:%Y%m%d}-{seq}X").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(order.render(42, &utc).as_deref(), Ok("ORD-20261122-42X"));

        for (bad, says) in [
            ("{date:%Y%m%d}", "exactly one {seq}"),
            ("{seq}{seq}", "exactly one {seq}"),
            ("{seq}{date:%Y}", "last placeholder"),
            ("{seq:00}", "pads to 1 to 18"),
            ("{seq:019}", "pads to 1 to 18"),
            ("{day}{seq}", "is not a placeholder"),
            ("{date:%Y{seq}", "unmatched brace"),
            ("a}{seq}", "unmatched brace"),
            ("{date:%Y%}{seq}", "date directives"),
        ] {
            let err = SeqFormat::parse(bad).expect_err(bad);
            assert!(err.contains(says), "{bad}: {err}");
        }
        for (daily, says) in [
            ("{date:%m%d}{seq:04}", "year, month and day"),
            ("{date:%Y%m}{seq:04}", "year, month and day"),
            ("{date:%Y%-m%-d}{seq:04}", "changes width"),
            ("{seq}", "year, month and day"),
        ] {
            let format = SeqFormat::parse(daily).unwrap_or_else(|e| panic!("{daily}: {e}"));
            let err = format.check_daily(&TimeZone::UTC).expect_err(daily);
            assert!(err.contains(says), "{daily}: {err}");
        }
    }

    #[test]
    fn time_zones_by_name_offset_or_iana() {
        assert_eq!(time_zone("UTC"), Ok(TimeZone::UTC));
        let plus8 = time_zone("+08:00").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(plus8.to_fixed_offset().ok(), Offset::from_seconds(8 * 3600).ok());
        assert!(time_zone("-05:30").is_ok());
        for bad in ["+8", "+08:60", "+123:00", "Mars/Olympus"] {
            assert!(time_zone(bad).is_err(), "{bad}");
        }
    }
}
