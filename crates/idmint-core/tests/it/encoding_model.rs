//! Encodings over the whole id range (`0..=i64::MAX`): every id round-trips in every
//! encoding with and without a fixed width, fixed-width strings of one encoding sort as
//! their ids do (for base36, base62 and Crockford alike: the alphabets are in ASCII order),
//! and a width below an id's digit count is refused.

use idmint_core::encoding::{ENCODED_ID_MAX, Encoding, EncodingError};
use proptest::prelude::*;

const ALL: [Encoding; 4] =
    [Encoding::Decimal, Encoding::Base36, Encoding::Base62, Encoding::Crockford32];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn every_id_round_trips(id in 0..=ENCODED_ID_MAX, extra in 0usize..4) {
        for encoding in ALL {
            let text = encoding.encode(id, None).unwrap();
            prop_assert_eq!(text.len(), encoding.digits(id));
            prop_assert_eq!(encoding.decode(&text), Ok(id));
            let width = encoding.digits_max() + extra;
            let fixed = encoding.encode(id, Some(width)).unwrap();
            prop_assert_eq!(fixed.len(), width);
            prop_assert_eq!(encoding.decode(&fixed), Ok(id));
        }
    }

    #[test]
    fn fixed_width_strings_sort_as_their_ids(a in 0..=ENCODED_ID_MAX, b in 0..=ENCODED_ID_MAX) {
        for encoding in ALL {
            let width = Some(encoding.digits_max());
            let (sa, sb) = (encoding.encode(a, width).unwrap(), encoding.encode(b, width).unwrap());
            prop_assert_eq!(sa.cmp(&sb), a.cmp(&b), "{} {} {}", encoding, sa, sb);
        }
    }

    #[test]
    fn a_width_too_small_is_refused(id in 1..=ENCODED_ID_MAX) {
        for encoding in ALL {
            let needs = encoding.digits(id);
            if needs > 1 {
                let refused = encoding.encode(id, Some(needs - 1));
                prop_assert_eq!(
                    refused,
                    Err(EncodingError::TooWide { id, width: needs - 1, needs })
                );
            }
        }
    }
}
