//! Model-based property tests of the double buffer: a random sequence of takes by a few
//! holders, give-backs of ids a holder holds, replays of earlier give-backs, installs,
//! regressed installs, floor raises and (rarely) a freeze is run against the buffer and
//! against a plain model of its two segments; every take and give-back must do exactly what
//! the model predicts, and after a freeze the tail to give back must be exactly the model's.
//!
//! Independently of the model, the test checks what users rely on: no id is handed out while
//! a holder holds it, an id is handed out again only after it was given back, and no id is
//! given back twice.

use std::collections::{BTreeMap, BTreeSet};

use idmint_core::{Count, DoubleBuffer, IdRange, InstallError, PreloadRatio};
use proptest::prelude::*;

/// How many takers hold ids at once.
const HOLDERS: usize = 3;

#[derive(Debug, Clone)]
enum Op {
    Take {
        n: u64,
        holder: usize,
    },
    TakeOne {
        holder: usize,
    },
    /// `holder` (`None`: the holder that took last) gives back part of a range it holds: the
    /// `from_end`-th from its last (0: the last), without its first `skip` ids and its last
    /// `short` ids. Mostly the tail of the last take, the case that can succeed.
    GiveBack {
        holder: Option<usize>,
        from_end: usize,
        skip: u64,
        short: u64,
    },
    /// An earlier successful give-back arrives again (a retried RPC).
    Replay(usize),
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
    let holder = prop_oneof![2 => Just(None), 1 => (0..HOLDERS).prop_map(Some)];
    let from_end = prop_oneof![3 => Just(0usize), 1 => 1usize..3];
    let short = prop_oneof![3 => Just(0u64), 1 => 1u64..5];
    prop_oneof![
        12 => (1u64..40, 0..HOLDERS).prop_map(|(n, holder)| Op::Take { n, holder }),
        8 => (0..HOLDERS).prop_map(|holder| Op::TakeOne { holder }),
        8 => (holder, from_end, 0u64..40, short).prop_map(|(holder, from_end, skip, short)| {
            Op::GiveBack { holder, from_end, skip, short }
        }),
        2 => any::<usize>().prop_map(Op::Replay),
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
    /// `(start, next id, end)` of the segment ids are taken from.
    current: Option<(u64, u64, u64)>,
    /// Whether a take asked the current segment for more ids than it had left: the buffer's
    /// cursor then stepped past its end, and no give-back in it can match the cursor again.
    overshot: bool,
    /// `(start, end)` of the segment loaded ahead.
    next: Option<(u64, u64)>,
    store_max_id: u64,
    /// End of the last range installed, or the highest floor raised.
    high_water: u64,
    handed_out: u64,
    frozen: bool,
    /// The highest end of any range given back: nothing below it is given back again.
    given_back_below: u64,
}

impl Model {
    fn take(&mut self, mut n: u64) -> Vec<u64> {
        let mut ids = Vec::new();
        if self.frozen {
            return ids;
        }
        for _ in 0..2 {
            if let Some((_, cursor, end)) = self.current.as_mut() {
                let got = n.min(*end - *cursor);
                self.overshot |= n > got;
                ids.extend(*cursor..*cursor + got);
                *cursor += got;
                n -= got;
                if n == 0 || self.next.is_none() {
                    break;
                }
                self.current = self.next.take().map(|(start, end)| (start, start, end));
                self.overshot = false;
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
        let spent = self.current.is_none_or(|(_, cursor, end)| cursor == end);
        // A frozen buffer keeps the range unserved, to be given back.
        if spent && !self.frozen {
            self.current = Some((start, start, end));
            self.overshot = false;
        } else {
            self.next = Some((start, end));
        }
        self.high_water = end;
        Ok(())
    }

    /// The rules of `DoubleBuffer::give_back`: not frozen, above every range given back,
    /// inside the current segment, and the last ids handed out (the cursor at the range's end
    /// and never past the segment's end).
    fn give_back(&mut self, start: u64, end: u64) -> bool {
        let Some((seg_start, cursor, seg_end)) = self.current.as_mut() else {
            return false;
        };
        let ok = !self.frozen
            && start >= self.given_back_below
            && *seg_start <= start
            && end <= *seg_end
            && *cursor == end
            && !self.overshot;
        if ok {
            *cursor = start;
            self.handed_out -= end - start;
            self.given_back_below = end;
        }
        ok
    }

    fn remaining(&self) -> u64 {
        if self.frozen {
            return 0;
        }
        self.current.map_or(0, |(_, cursor, end)| end - cursor)
            + self.next.map_or(0, |(s, e)| e - s)
    }

    /// Once frozen: the rest of the current segment joined to the next one if contiguous,
    /// otherwise the next one alone, otherwise the rest of the current one.
    fn unissued_tail(&self) -> Option<IdRange> {
        if !self.frozen {
            return None;
        }
        let rest = self.current.filter(|(_, cursor, end)| cursor < end).map(|(_, c, e)| (c, e));
        let (start, end) = match (rest, self.next) {
            (Some((cursor, end)), Some((start, next_end))) if end == start => (cursor, next_end),
            (_, Some(next)) => next,
            (Some(rest), None) => rest,
            (None, None) => return None,
        };
        IdRange::new(start, end)
    }
}

/// Who holds which ids, kept apart from the model: what the safety checks compare against.
#[derive(Default)]
struct Ledger {
    /// The ranges each holder holds, in the order it took them.
    held: [Vec<IdRange>; HOLDERS],
    /// The holder of every id held.
    holder_of: BTreeMap<u64, usize>,
    /// Every id ever handed out.
    ever: BTreeSet<u64>,
    /// Ids given back and not handed out again since.
    returned: BTreeSet<u64>,
    /// Every id ever given back.
    given_back: BTreeSet<u64>,
    /// The give-backs that succeeded, for replays.
    log: Vec<IdRange>,
}

impl Ledger {
    /// Records ids handed out to `holder`: none may be held by anyone, and one handed out
    /// before must have been given back since.
    fn hand_out(
        &mut self,
        holder: usize,
        ranges: impl Iterator<Item = IdRange>,
    ) -> Result<(), TestCaseError> {
        for range in ranges {
            for id in range.ids() {
                let before = self.holder_of.insert(id, holder);
                prop_assert!(before.is_none(), "id {} handed out while {:?} holds it", id, before);
                if !self.ever.insert(id) {
                    prop_assert!(self.returned.remove(&id), "id {} handed out twice", id);
                }
            }
            self.held[holder].push(range);
        }
        Ok(())
    }

    /// The range `GiveBack` asks `holder` to give back, if it holds any.
    fn pick(&self, holder: usize, from_end: usize, skip: u64, short: u64) -> Option<IdRange> {
        let held = &self.held[holder];
        let r = *held.get(held.len().checked_sub(1 + from_end % held.len().max(1))?)?;
        let start = r.start() + skip % r.len();
        IdRange::new(start, r.end().saturating_sub(short).max(start + 1))
    }

    /// Records a give-back `holder` made of ids it holds: they are no longer held, and none
    /// was given back before.
    fn give_back(&mut self, holder: usize, range: IdRange) -> Result<(), TestCaseError> {
        for id in range.ids() {
            prop_assert_eq!(self.holder_of.remove(&id), Some(holder), "id {} not held", id);
            prop_assert!(self.given_back.insert(id), "id {} given back twice", id);
            self.returned.insert(id);
        }
        let held = &mut self.held[holder];
        let i = held.iter().position(|r| r.start() <= range.start() && range.end() <= r.end());
        let Some(i) = i else {
            return Err(TestCaseError::fail(format!("{range:?} is not one holder's range")));
        };
        let r = held.remove(i);
        let parts = [IdRange::new(r.start(), range.start()), IdRange::new(range.end(), r.end())];
        for (j, part) in parts.into_iter().flatten().enumerate() {
            held.insert(i + j, part);
        }
        self.log.push(range);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn takes_and_give_backs_match_the_model_exactly(ops in prop::collection::vec(op(), 1..120)) {
        let buffer = DoubleBuffer::new(PreloadRatio::DEFAULT);
        let mut model = Model { store_max_id: 1, ..Model::default() };
        let mut ledger = Ledger::default();
        // The highest id handed out and not given back, and who took it.
        let (mut last_id, mut last_taker) = (0, 0);
        for op in ops {
            match op {
                Op::Take { n, holder } => {
                    let take = buffer.take(Count::new(n).expect("count"));
                    ledger.hand_out(holder, take.ranges())?;
                    if take.count() > 0 {
                        last_taker = holder;
                    }
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
                Op::TakeOne { holder } => {
                    let (id, refill_needed) = buffer.take_one();
                    let one = id.and_then(|id| IdRange::new(id, id + 1));
                    ledger.hand_out(holder, one.into_iter())?;
                    if id.is_some() {
                        last_taker = holder;
                    }
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
                Op::GiveBack { holder, from_end, skip, short } => {
                    let holder = holder.unwrap_or(last_taker);
                    let Some(range) = ledger.pick(holder, from_end, skip, short) else {
                        continue;
                    };
                    let given_back = buffer.give_back(range);
                    let expected = model.give_back(range.start(), range.end());
                    prop_assert_eq!(given_back, expected, "give_back({:?}) vs the model", range);
                    if given_back {
                        // Only the very last ids handed out can come back.
                        prop_assert_eq!(range.end() - 1, last_id, "gave back {:?} below", range);
                        last_id = range.start() - 1;
                        ledger.give_back(holder, range)?;
                    }
                }
                Op::Replay(i) => {
                    let Some(&range) = ledger.log.get(i % ledger.log.len().max(1)) else {
                        continue;
                    };
                    // Whoever holds these ids now got them after the give-back: taking them
                    // back again would hand them out under that holder.
                    let given_back = buffer.give_back(range);
                    prop_assert_eq!(given_back, model.give_back(range.start(), range.end()));
                    prop_assert!(!given_back, "a replayed give-back of {:?} was accepted", range);
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
                    let held = ledger.holder_of.range(tail.start()..tail.end()).next();
                    prop_assert!(held.is_none(), "tail {:?} holds a held id: {:?}", tail, held);
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
