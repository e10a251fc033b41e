//! The checker: reads a history of acknowledged ids and reports every breach of idmint's
//! promises, with the first examples. It knows nothing of the scenario that made the history,
//! so the same checks judge every run, and the unsafe scenario proves they can fail.
//!
//! - **Unique**: no id acknowledged twice within a tag (Jepsen's `unique-ids` check), nor `0`.
//!   Two tags may share ids (each segment tag counts from its own row).
//! - **Increasing per node**: each client's ids of a tag from one node increase, request after
//!   request and within a batch (a client's requests are sequential, so this is the node's
//!   order).
//! - **One owner per worker id** (snowflake layouts): the time spans of the ids two nodes made
//!   with one worker id do not overlap. Two nodes on one worker id at once breach this even
//!   when no id happens to collide.
//! - **Real-time order** (strict tags and the timestamp oracle, the tags a scenario names):
//!   a request answered before another was sent, on any node, got values below all of the
//!   later one's; no value answered twice, batches kept as ranges included ([`crate::order`]).

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use idmint_core::snowflake::Layout;

use crate::load::{Op, Outcome};
use crate::order::{self, Answer};

/// Examples kept per kind of breach.
const EXAMPLES_MAX: usize = 5;

/// What the checker found.
#[derive(Debug, Default, Clone)]
pub struct Checked {
    /// Requests in the history.
    pub ops: u64,
    /// Ids acknowledged.
    pub ids: u64,
    /// Ids acknowledged per tag, by tag name.
    pub ids_by_tag: BTreeMap<String, u64>,
    /// Ids acknowledged more than once within a tag, counting each extra copy.
    pub duplicates: u64,
    /// Ids `0` acknowledged.
    pub zeros: u64,
    /// Places where a client's id of a tag from a node was not above its previous id of that
    /// tag from that node.
    pub not_increasing: u64,
    /// Pairs of nodes whose ids of one worker id overlap in time (snowflake only).
    pub owner_overlaps: u64,
    /// Values of the tags checked for real-time order (strict tags, the oracle).
    pub ordered_values: u64,
    /// Requests of those tags that got a value at or below one answered before they were sent.
    pub order_violations: u64,
    /// Requests of those tags that got a value another request got too.
    pub repeats: u64,
    /// The first examples of each breach, for people.
    pub examples: Vec<String>,
}

impl Checked {
    /// The ids per tag, for people: `order 5313000, user 5313000`.
    pub fn ids_by_tag_text(&self) -> String {
        let parts: Vec<String> =
            self.ids_by_tag.iter().map(|(tag, n)| format!("{tag} {n}")).collect();
        parts.join(", ")
    }

    /// Did the history breach any promise?
    pub fn flagged(&self) -> bool {
        let order = self.order_violations + self.repeats;
        self.duplicates + self.zeros + self.not_increasing + self.owner_overlaps + order > 0
    }
}

/// Checks `history`; `nodes` names the node indices, `layout` is given for snowflake ids,
/// `ordered` names the tags whose values must increase in real time across the cluster.
pub fn check(
    history: &[Op],
    nodes: &[String],
    layout: Option<Layout>,
    ordered: &[&str],
) -> Checked {
    let mut checked = Checked { ops: history.len() as u64, ..Checked::default() };
    check_unique(history, nodes, &mut checked);
    check_increasing(history, nodes, &mut checked);
    if let Some(layout) = layout {
        check_owners(history, nodes, layout, &mut checked);
    }
    for tag in ordered {
        check_real_time(history, nodes, tag, &mut checked);
    }
    checked
}

/// The real-time order and repeats of one tag's answers (lists and ranges alike).
fn check_real_time(history: &[Op], nodes: &[String], tag: &str, checked: &mut Checked) {
    let ops: Vec<&Op> = history.iter().filter(|op| &*op.tag == tag && op.count() > 0).collect();
    let answers: Vec<Answer> = ops
        .iter()
        .filter_map(|op| {
            let (first, last) = op.span()?;
            Some(Answer { sent_us: op.sent_us, done_us: op.done_us(), first, last })
        })
        .collect();
    checked.ordered_values += ops.iter().map(|op| op.count()).sum::<u64>();
    let found = order::check(&answers, EXAMPLES_MAX);
    checked.order_violations += found.violations;
    checked.repeats += found.repeats;
    let show = |op: &Op| {
        let (first, last) = op.span().unwrap_or_default();
        format!(
            "{first}..={last} from {} (client {}, sent {:.3} ms, answered {:.3} ms)",
            nodes[op.node],
            op.client,
            op.sent_us as f64 / 1e3,
            op.done_us() as f64 / 1e3
        )
    };
    for (a, b) in found.violation_examples {
        let (a, b) = (show(ops[a]), show(ops[b]));
        checked.examples.push(format!("real-time order broken on {tag}: {a}, then {b}"));
    }
    for (a, b) in found.repeat_examples {
        let (a, b) = (show(ops[a]), show(ops[b]));
        checked.examples.push(format!("value of {tag} answered twice: {a} and {b}"));
    }
}

fn check_unique(history: &[Op], nodes: &[String], checked: &mut Checked) {
    // (tag number, id, request index): sorted, a repeat within a tag is two neighbours.
    let mut tags: HashMap<&str, u32> = HashMap::new();
    let mut counts: Vec<u64> = Vec::new();
    let mut all: Vec<(u32, u64, u32)> = Vec::new();
    for (index, op) in history.iter().enumerate() {
        let next = tags.len() as u32;
        let tag = *tags.entry(&op.tag).or_insert(next);
        if tag == next {
            counts.push(0);
        }
        counts[tag as usize] += op.count();
        // Ranges are judged by the real-time checker's repeat sweep, never expanded here.
        all.extend(op.ids().iter().map(|&id| (tag, id, index as u32)));
    }
    checked.ids = counts.iter().sum();
    checked.ids_by_tag =
        tags.into_iter().map(|(name, tag)| (name.to_string(), counts[tag as usize])).collect();
    all.sort_unstable();
    let mut shown = 0;
    for pair in all.windows(2) {
        if (pair[0].0, pair[0].1) == (pair[1].0, pair[1].1) {
            checked.duplicates += 1;
            if shown < EXAMPLES_MAX {
                shown += 1;
                let (a, b) = (&history[pair[0].2 as usize], &history[pair[1].2 as usize]);
                checked.examples.push(format!(
                    "duplicate id {} of {}: from {} at {} ms (client {}) and from {} at {} ms (client {})",
                    pair[0].1, a.tag, nodes[a.node], a.done_ms(), a.client, nodes[b.node], b.done_ms(), b.client
                ));
            }
        }
    }
    let zero_ranges =
        history.iter().filter(|op| matches!(op.outcome, Outcome::Range { first: 0, .. }));
    checked.zeros = all.iter().filter(|(_, id, _)| *id == 0).count() as u64;
    checked.zeros += zero_ranges.count() as u64;
    if checked.zeros > 0 {
        checked.examples.push(format!("{} ids were 0", checked.zeros));
    }
}

fn check_increasing(history: &[Op], nodes: &[String], checked: &mut Checked) {
    let mut last: HashMap<(&str, u32, usize), u64> = HashMap::new();
    let mut shown = 0;
    for op in history {
        // A range increases within itself: its first and last value stand for it.
        let span;
        let values = match &op.outcome {
            Outcome::Range { first, last } => {
                span = [*first, *last];
                &span[..if first == last { 1 } else { 2 }]
            }
            _ => op.ids(),
        };
        for &id in values {
            let previous = last.insert((&op.tag, op.client, op.node), id);
            if previous.is_some_and(|p| id <= p) {
                checked.not_increasing += 1;
                if shown < EXAMPLES_MAX {
                    shown += 1;
                    checked.examples.push(format!(
                        "not increasing: client {} got {id} of {} from {} at {} ms after {}",
                        op.client,
                        op.tag,
                        nodes[op.node],
                        op.done_ms(),
                        previous.unwrap_or_default()
                    ));
                }
            }
        }
    }
}

fn check_owners(history: &[Op], nodes: &[String], layout: Layout, checked: &mut Checked) {
    // (worker, node) -> the lowest and highest time field of its ids.
    let mut spans: HashMap<(u64, usize), (u64, u64)> = HashMap::new();
    for op in history {
        for &id in op.ids() {
            let Some(parts) = layout.decode(id) else { continue };
            let span = spans.entry((parts.worker, op.node)).or_insert((u64::MAX, 0));
            span.0 = span.0.min(parts.time_units);
            span.1 = span.1.max(parts.time_units);
        }
    }
    let mut by_worker: HashMap<u64, Vec<(usize, u64, u64)>> = HashMap::new();
    for ((worker, node), (low, high)) in spans {
        by_worker.entry(worker).or_default().push((node, low, high));
    }
    let mut workers: Vec<_> = by_worker.into_iter().collect();
    workers.sort_unstable_by_key(|(worker, _)| *worker);
    for (worker, spans) in workers {
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                if a.1 <= b.2 && b.1 <= a.2 {
                    checked.owner_overlaps += 1;
                    let mut line = String::new();
                    let _ = write!(
                        line,
                        "worker id {worker} held at once: {} made ids in time units {}..={}, {} in {}..={}",
                        nodes[a.0], a.1, a.2, nodes[b.0], b.1, b.2
                    );
                    if checked.owner_overlaps as usize <= EXAMPLES_MAX {
                        checked.examples.push(line);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The checker must fail on each breach it names, and pass a clean history: seeded random
    //! histories with one breach planted at a random place.

    use std::collections::HashSet;
    use std::sync::Arc;

    use super::*;
    use crate::load::Outcome;

    /// A small deterministic generator (SplitMix64), so a failure names its seed.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }
    }

    const TAGS: [&str; 2] = ["order", "user"];

    /// Three nodes serving disjoint increasing ranges of two tags to four clients, like
    /// segment mode. Both tags count from the same numbers, so they share ids.
    fn clean_history(rng: &mut Rng) -> Vec<Op> {
        let tags: Vec<Arc<str>> = TAGS.iter().map(|&t| Arc::from(t)).collect();
        let mut next = [[1_000_000u64, 2_000_000, 3_000_000]; 2];
        let mut ops = Vec::new();
        for at_ms in 0..200 {
            let (client, node) = ((rng.next() % 4) as u32, (rng.next() % 3) as usize);
            let tag = (rng.next() % 2) as usize;
            let count = 1 + rng.next() % 20;
            let next = &mut next[tag][node];
            let ids = (*next..*next + count).collect();
            *next += count + rng.next() % 3;
            let (tag, outcome) = (Arc::clone(&tags[tag]), Outcome::Ids(ids));
            let sent_us = at_ms * 1000;
            ops.push(Op { client, node, tag, at_ms, sent_us, latency_us: 300, outcome });
        }
        ops
    }

    fn names() -> Vec<String> {
        vec!["n1".into(), "n2".into(), "n3".into()]
    }

    /// Does some id appear under both tags (so the clean pass shows tags are judged apart)?
    fn tags_share_an_id(history: &[Op]) -> bool {
        let of = |tag: &str| -> HashSet<u64> {
            history.iter().filter(|op| &*op.tag == tag).flat_map(|op| op.ids().to_vec()).collect()
        };
        !of(TAGS[0]).is_disjoint(&of(TAGS[1]))
    }

    #[test]
    fn a_clean_history_passes_and_each_planted_breach_is_caught() {
        for seed in 0..200 {
            let mut rng = Rng(seed);
            let history = clean_history(&mut rng);
            let clean = check(&history, &names(), None, &[]);
            assert!(!clean.flagged(), "seed {seed}: {:?}", clean.examples);
            assert_eq!(clean.ids, history.iter().map(|op| op.ids().len() as u64).sum::<u64>());
            assert!(tags_share_an_id(&history), "seed {seed}: the tags share no id");

            // An id of a tag served again by another request, anywhere later.
            let mut repeated = history.clone();
            let (from, to) = (rng.next() as usize % 100, 100 + rng.next() as usize % 100);
            let (id, tag) = (repeated[from].ids()[0], Arc::clone(&repeated[from].tag));
            repeated[to].outcome = Outcome::Ids(vec![id]);
            repeated[to].tag = tag;
            assert!(
                check(&repeated, &names(), None, &[]).duplicates >= 1,
                "seed {seed}: repeat missed"
            );

            // A node going back by one id of a tag for a client (and nothing else).
            let mut back = history.clone();
            let at = 1 + rng.next() as usize % 199;
            let op = &back[at];
            let earlier = back[..at]
                .iter()
                .rev()
                .find(|o| o.client == op.client && o.node == op.node && o.tag == op.tag);
            if let Some(earlier) = earlier.map(|o| o.ids()[o.ids().len() - 1]) {
                back.insert(
                    at + 1,
                    Op { outcome: Outcome::Ids(vec![earlier]), ..back[at].clone() },
                );
                let found = check(&back, &names(), None, &[]);
                assert!(found.not_increasing >= 1, "seed {seed}: regression missed");
            }
        }
    }

    #[test]
    fn a_zero_id_is_flagged() {
        let mut history = clean_history(&mut Rng(7));
        history[150].outcome = Outcome::Ids(vec![0]);
        history[150].client = 99;
        let found = check(&history, &names(), None, &[]);
        assert_eq!((found.zeros, found.duplicates), (1, 0), "{:?}", found.examples);
    }

    #[test]
    fn two_nodes_on_one_worker_id_are_flagged_even_without_a_colliding_id() {
        let layout = Layout::preset("snowflake").expect("the snowflake preset");
        let id = |t: u64, worker: u64, seq: u64| layout.compose(t, worker, seq).expect("fits");
        let op = |node: usize, at_ms: u64, ids: Vec<u64>| Op {
            client: node as u32,
            node,
            tag: Arc::from("snowflake"),
            at_ms,
            sent_us: at_ms * 1000,
            latency_us: 100,
            outcome: Outcome::Ids(ids),
        };
        // Worker 7 on n1 for units 100..=110, then n2 from 111: a handover, clean.
        let handover =
            vec![op(0, 0, vec![id(100, 7, 0), id(110, 7, 0)]), op(1, 1, vec![id(111, 7, 0)])];
        assert!(!check(&handover, &names(), Some(layout), &[]).flagged());
        // n2 makes worker 7's ids at unit 105, inside n1's span, with another sequence.
        let shared =
            vec![op(0, 0, vec![id(100, 7, 0), id(110, 7, 0)]), op(1, 1, vec![id(105, 7, 3)])];
        let found = check(&shared, &names(), Some(layout), &[]);
        assert_eq!((found.duplicates, found.owner_overlaps), (0, 1), "{:?}", found.examples);
    }

    /// A strict tag's ranges from three nodes: in order they pass; a later request answered
    /// below an earlier answer, or a value answered twice, is flagged, on the named tags only.
    #[test]
    fn real_time_order_and_repeats_are_checked_on_ranges_of_the_named_tags() {
        let op = |node: usize, sent_us: u64, latency_us: u64, first: u64, last: u64| Op {
            client: node as u32,
            node,
            tag: Arc::from("order"),
            at_ms: sent_us / 1000,
            sent_us,
            latency_us,
            outcome: Outcome::Range { first, last },
        };
        let clean =
            vec![op(0, 0, 500, 1, 100), op(1, 1_000, 500, 101, 101), op(2, 2_000, 500, 102, 201)];
        let found = check(&clean, &names(), None, &["order"]);
        assert!(!found.flagged(), "{:?}", found.examples);
        assert_eq!((found.ids, found.ordered_values), (201, 201));
        // n3 answers below what n1 answered before n3's request was sent.
        let mut late = clean.clone();
        late.push(op(2, 3_000, 500, 50, 50));
        let found = check(&late, &names(), None, &["order"]);
        assert_eq!((found.order_violations, found.repeats), (1, 1), "{:?}", found.examples);
        assert!(found.flagged());
        // Unnamed, the tag is judged per node only: no order check.
        assert_eq!(check(&late, &names(), None, &[]).order_violations, 0);
        // Concurrent requests answered out of order are fine; a shared value is not.
        let concurrent = vec![op(0, 0, 5_000, 200, 299), op(1, 1_000, 500, 100, 199)];
        assert!(!check(&concurrent, &names(), None, &["order"]).flagged());
        let shared = vec![op(0, 0, 5_000, 200, 299), op(1, 1_000, 500, 150, 200)];
        assert_eq!(check(&shared, &names(), None, &["order"]).repeats, 1);
    }
}
