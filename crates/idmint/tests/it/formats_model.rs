//! Public id formats as a model check: random templates (literal text that may look like
//! digits, every encoding with and without a fixed width, dates before or after the id,
//! with and without a key) and random pairs of ids issued at random instants over the
//! years. Every text decodes back to its id, and two different ids never give one text,
//! whatever their dates: the property the template checks exist for.

use idmint::IdFormat;
use idmint::sequence::time_zone;
use idmint_core::encoding::Encoding;
use idmint_core::permute::{PERMUTE_KEY_BYTES, Permutation, PermuteKey};
use proptest::prelude::*;

const ENCODINGS: [Encoding; 4] =
    [Encoding::Decimal, Encoding::Base36, Encoding::Base62, Encoding::Crockford32];
/// Directives of one width on every day (the checked kind), including digit-only ones that
/// border the id.
const DATES: [&str; 5] = ["%Y%m%d", "%y%m%d%H", "%j", "%Y-%m-%dT%H:%M", "%H%M%S"];
/// 2020-01-01 to 2036-01-01, in ms.
const TIME_RANGE_MS: std::ops::Range<u64> = 1_577_836_800_000..2_082_758_400_000;

#[derive(Debug, Clone)]
struct Spec {
    prefix: String,
    suffix: String,
    encoding: usize,
    fixed: bool,
    date: Option<(usize, bool)>,
    key: Option<([u8; PERMUTE_KEY_BYTES], u32)>,
}

impl Spec {
    fn format(&self) -> IdFormat {
        let encoding = ENCODINGS[self.encoding];
        let permutation = self.key.map(|(key, bits)| {
            Permutation::new(&PermuteKey::from_bytes(key), bits).expect("valid width")
        });
        let max = permutation.as_ref().map_or(i64::MAX as u64, |p| p.max_id());
        let id = if self.fixed {
            format!("{{id:{encoding}:{}}}", encoding.digits(max))
        } else {
            format!("{{id:{encoding}}}")
        };
        let (before, after) = match self.date {
            Some((date, true)) => (format!("{{date:{}}}", DATES[date]), String::new()),
            Some((date, false)) => (String::new(), format!("{{date:{}}}", DATES[date])),
            None => (String::new(), String::new()),
        };
        let template = format!("{}{before}{id}{after}{}", self.prefix, self.suffix);
        IdFormat::new(&template, time_zone("UTC").expect("UTC"), permutation)
            .unwrap_or_else(|e| panic!("{template}: {e}"))
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        "[A-Z0-9-]{0,4}",
        "[a-z0-9_]{0,3}",
        0..ENCODINGS.len(),
        any::<bool>(),
        proptest::option::of((0..DATES.len(), any::<bool>())),
        proptest::option::of((any::<[u8; PERMUTE_KEY_BYTES]>(), 16u32..=63)),
    )
        .prop_map(|(prefix, suffix, encoding, fixed, date, key)| Spec {
            prefix,
            suffix,
            encoding,
            fixed,
            date,
            key,
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3_000))]

    #[test]
    fn texts_decode_back_and_never_collide(
        spec in spec(),
        raw in (any::<u64>(), any::<u64>()),
        times in (TIME_RANGE_MS, TIME_RANGE_MS),
        near in any::<bool>(),
    ) {
        let format = spec.format();
        let max = format.public_id_max();
        let a = raw.0 % max + 1;
        // Half the pairs are neighbours, where a counter's texts differ least.
        let b = if near { a % max + 1 } else { raw.1 % max + 1 };
        let render = |id: u64, at: u64| {
            format.at(&format.zoned(at)).and_then(|r| r.render(id)).expect("renders")
        };
        let (ta, tb) = (render(a, times.0), render(b, times.1));
        prop_assert_eq!(format.decode(&ta).map(|d| d.internal_id), Ok(a), "{} {}", format, ta);
        prop_assert_eq!(format.decode(&tb).map(|d| d.internal_id), Ok(b), "{} {}", format, tb);
        if a != b {
            prop_assert_ne!(&ta, &tb, "{}: two ids, one text", format);
        }
        // Same instant, different ids: also distinct (the common case).
        if a != b {
            prop_assert_ne!(render(a, times.0), render(b, times.0));
        }
    }
}
