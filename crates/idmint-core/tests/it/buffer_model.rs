//! Model-based property tests of the double buffer: a random sequence of takes, installs,
//! regressed installs, floor raises and (rarely) a freeze is run against the buffer and
//! against a plain model of its two segments; every take must return exactly the ids the
//! model predicts, and after a freeze the tail to give back must be exactly the model's.

use idmint_core::{Count, DoubleBuffer, IdRange, InstallError, PreloadRatio};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Take(u64),
    TakeOne,
    Install {
        len: u64,
        gap: u64,
    },
    InstallBelow(u64),
    /// Raises the floor to the store's next id plus `rise`, minus 10: from below it (no
    /// effect) to above it (the next installs regress).
    RaiseFloor {
        rise: u64,
    },
    Freeze,
}

fn op() -> impl Strategy<Value = Op> {
    // The freeze is rare: most sequences run long before it, or never reach it.
    prop_oneof![
        12 => (1u64..40).prop_map(Op::Take),
        8 => Just(Op::TakeOne),
        8 => (1u64..30, 0u64..5).prop_map(|(len, gap)| Op::Install { len, gap }),
        4 => (1u64..20).prop_map(Op::InstallBelow),
        2 => (0u64..20).prop_map(|rise| Op::RaiseFloor { rise }),
        1 => Just(Op::Freeze),
    ]
}

/// The model: the two segments as plain numbers, the store's next free id and what the
/// buffer should report about itself.
#[derive(Default)]
struct Model {
    /// `(next id, end)` of the segment ids are taken from.
    current: Option<(u64, u64)>,
    /// `(start, end)` of the segment loaded ahead.
    next: Option<(u64, u64)>,
    store_max_id: u64,
    /// End of the last range installed, or the highest floor raised.
    high_water: u64,
    handed_out: u64,
    frozen: bool,
}

impl Model {
    fn take(&mut self, mut n: u64) -> Vec<u64> {
        let mut ids = Vec::new();
        if self.frozen {
            return ids;
        }
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
        self.handed_out += ids.len() as u64;
        ids
    }

    fn install(&mut self, start: u64, end: u64) -> Result<(), InstallError> {
        if start < self.high_water {
            let range = IdRange::new(start, end).expect("range");
            return Err(InstallError::Regression { range, high_water: self.high_water });
        }
        if self.next.is_some() {
            return Err(InstallError::Full);
        }
        let spent = self.current.is_none_or(|(cursor, end)| cursor == end);
        // A frozen buffer keeps the range unserved, to be given back.
        if spent && !self.frozen {
            self.current = Some((start, end));
        } else {
            self.next = Some((start, end));
        }
        self.high_water = end;
        Ok(())
    }

    fn remaining(&self) -> u64 {
        if self.frozen {
            return 0;
        }
        self.current.map_or(0, |(cursor, end)| end - cursor) + self.next.map_or(0, |(s, e)| e - s)
    }

    /// Once frozen: the rest of the current segment joined to the next one if contiguous,
    /// otherwise the next one alone, otherwise the rest of the current one.
    fn unissued_tail(&self) -> Option<IdRange> {
        if !self.frozen {
            return None;
        }
        let rest = self.current.filter(|(cursor, end)| cursor < end);
        let (start, end) = match (rest, self.next) {
            (Some((cursor, end)), Some((start, next_end))) if end == start => (cursor, next_end),
            (_, Some(next)) => next,
            (Some(rest), None) => rest,
            (None, None) => return None,
        };
        IdRange::new(start, end)
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
                    prop_assert_eq!(take.frozen(), model.frozen);
                    if model.frozen {
                        prop_assert!(!take.refill_needed(), "a frozen buffer asks for no refill");
                    } else if (ids.len() as u64) < n {
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
                        // Frozen: no refill; otherwise an empty take must ask for one.
                        prop_assert_eq!(refill_needed, !model.frozen);
                    }
                }
                Op::Install { len, gap } => {
                    let start = model.store_max_id + gap;
                    let range = IdRange::new(start, start + len).expect("range");
                    let expected = model.install(start, start + len);
                    prop_assert_eq!(buffer.install(range, 0), expected);
                    // The store moved past the range unless the buffer was full (then the
                    // library would not have refilled: the same range comes again).
                    if expected != Err(InstallError::Full) {
                        model.store_max_id = start + len;
                    }
                }
                Op::InstallBelow(back) => {
                    let start = model.store_max_id.saturating_sub(back).max(1);
                    let range = IdRange::new(start, start + 5).expect("range");
                    let expected = model.install(start, start + 5);
                    prop_assert_eq!(buffer.install(range, 0), expected);
                    if expected.is_ok() {
                        model.store_max_id = model.store_max_id.max(start + 5);
                    }
                }
                Op::RaiseFloor { rise } => {
                    let floor = (model.store_max_id + rise).saturating_sub(10);
                    buffer.raise_floor(floor);
                    model.high_water = model.high_water.max(floor);
                }
                Op::Freeze => {
                    buffer.freeze();
                    model.frozen = true;
                }
            }
            let snapshot = buffer.snapshot();
            prop_assert_eq!(snapshot.handed_out, model.handed_out, "handed_out after {:?}", op);
            prop_assert_eq!(snapshot.high_water, model.high_water);
            prop_assert_eq!(snapshot.frozen, model.frozen);
            prop_assert_eq!(buffer.is_frozen(), model.frozen);
            prop_assert_eq!(buffer.remaining(), model.remaining());
            prop_assert_eq!(buffer.unissued_tail(), model.unissued_tail(), "tail after {:?}", op);
            if model.frozen {
                prop_assert!(!buffer.refill_due(), "a frozen buffer asks for no refill");
                if let Some(tail) = buffer.unissued_tail() {
                    // Give-back safety: nothing handed out is in the tail.
                    prop_assert!(tail.start() > last_id, "tail {:?} holds a handed-out id", tail);
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
        buffer.install(IdRange::new(1, 1 + len).expect("range"), 0).expect("install");
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
