//! Model-based property tests of the double buffer: a random sequence of takes, installs and
//! regressed installs is run against the buffer and against a plain model of its two
//! segments; every take must return exactly the ids the model predicts.

use idmint_core::{Count, DoubleBuffer, IdRange, InstallError, PreloadRatio};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Take(u64),
    TakeOne,
    Install { len: u64, gap: u64 },
    InstallBelow(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..40).prop_map(Op::Take),
        2 => Just(Op::TakeOne),
        2 => (1u64..30, 0u64..5).prop_map(|(len, gap)| Op::Install { len, gap }),
        1 => (1u64..20).prop_map(Op::InstallBelow),
    ]
}

/// The model: the two segments as plain numbers, and the store's next free id.
#[derive(Default)]
struct Model {
    current: Option<(u64, u64)>,
    next: Option<(u64, u64)>,
    store_max_id: u64,
}

impl Model {
    fn take(&mut self, mut n: u64) -> Vec<u64> {
        let mut ids = Vec::new();
        for _ in 0..2 {
            if let Some((cursor, end)) = self.current.as_mut() {
                let got = n.min(*end - *cursor);
                ids.extend(*cursor..*cursor + got);
                *cursor += got;
                n -= got;
                if n == 0 || self.next.is_none() {
                    break;
                }
                self.current = self.next.take();
            }
        }
        ids
    }

    fn install(&mut self, start: u64, end: u64) -> Result<(), InstallError> {
        let spent = self.current.is_none_or(|(cursor, end)| cursor == end);
        if self.next.is_some() {
            return Err(InstallError::Full);
        }
        if spent {
            self.current = Some((start, end));
        } else {
            self.next = Some((start, end));
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn takes_match_the_model_exactly(ops in prop::collection::vec(op(), 1..120)) {
        let buffer = DoubleBuffer::new(PreloadRatio::DEFAULT);
        let mut model = Model { store_max_id: 1, ..Model::default() };
        let mut last_id = 0;
        for op in ops {
            match op {
                Op::Take(n) => {
                    let take = buffer.take(Count::new(n).expect("count"));
                    let ids: Vec<u64> = take.ranges().flat_map(|r| r.ids()).collect();
                    prop_assert_eq!(take.count(), ids.len() as u64);
                    prop_assert_eq!(take.first(), ids.first().copied());
                    prop_assert_eq!(&ids, &model.take(n), "take({}) differs from the model", n);
                    if let Some(&first) = ids.first() {
                        prop_assert!(first > last_id, "ids went down across takes");
                    }
                    prop_assert!(ids.windows(2).all(|w| w[0] < w[1]));
                    last_id = ids.last().copied().unwrap_or(last_id);
                    if (ids.len() as u64) < n {
                        prop_assert!(take.refill_needed(), "a short take must ask for a refill");
                    }
                }
                Op::TakeOne => {
                    let (id, refill_needed) = buffer.take_one();
                    let expected = model.take(1);
                    prop_assert_eq!(id, expected.first().copied(), "take_one differs from the model");
                    if let Some(id) = id {
                        prop_assert!(id > last_id, "ids went down across takes");
                        last_id = id;
                    } else {
                        prop_assert!(refill_needed, "an empty take_one must ask for a refill");
                    }
                }
                Op::Install { len, gap } => {
                    let start = model.store_max_id + gap;
                    let range = IdRange::new(start, start + len).expect("range");
                    let expected = model.install(start, start + len);
                    prop_assert_eq!(buffer.install(range), expected);
                    if expected.is_ok() {
                        model.store_max_id = start + len;
                    }
                }
                Op::InstallBelow(back) => {
                    let start = model.store_max_id.saturating_sub(back).max(1);
                    let range = IdRange::new(start, start + 5).expect("range");
                    let result = buffer.install(range);
                    if start < model.store_max_id && model.store_max_id > 1 {
                        let is_regression = matches!(result, Err(InstallError::Regression { .. }));
                        prop_assert!(is_regression, "a range below the high-water mark was installed");
                    } else if result.is_ok() {
                        // Not below anything ever installed: a legal install.
                        prop_assert_eq!(model.install(start, start + 5), Ok(()));
                        model.store_max_id = start + 5;
                    }
                }
            }
        }
    }

    #[test]
    fn preload_point_is_crossed_exactly_once_per_segment(
        len in 1u64..500, permille in 1u32..=1000, chunk in 1u64..50,
    ) {
        let ratio = PreloadRatio::new(f64::from(permille) / 1000.0).expect("ratio");
        let buffer = DoubleBuffer::new(ratio);
        buffer.install(IdRange::new(1, 1 + len).expect("range")).expect("install");
        let preload_id = 1 + ratio.preload_offset(len);
        let mut covering_takes = 0;
        loop {
            let take = buffer.take(Count::new(chunk).expect("count"));
            if take.count() == 0 {
                break;
            }
            let covers = take.ranges().any(|r| r.ids().contains(&preload_id));
            covering_takes += u32::from(covers);
            if take.count() == chunk {
                // A full take asks for a refill exactly when it covers the preload id.
                prop_assert_eq!(take.refill_needed(), covers);
            } else {
                prop_assert!(take.refill_needed(), "a short take must ask for a refill");
            }
        }
        prop_assert_eq!(covering_takes, 1);
    }
}
