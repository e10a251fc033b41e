//! The real-time order checker, for strict tags and the timestamp oracle: if request A was
//! answered before request B was sent, every value A got is below every value B got; and no
//! value is answered twice. It reads answers (a send time, an answer time, both on the
//! harness's one monotonic clock, and the batch `first..=last`); it knows nothing of nodes or
//! scenarios.
//!
//! Times are conservative: a send time is read before the request is written and an answer
//! time after the whole answer was read, so "A answered before B was sent" on the harness's
//! clock means the server answered A before B reached any server. Answers whose intervals
//! overlap are concurrent, and any order between them is allowed.
//!
//! Both checks are a sort and a sweep, `O(n log n)`: order sorts the answers by send time and
//! by answer time and carries the largest value answered so far; repeats sort by first value
//! and carry the largest last value so far.

/// One answered request: when it was sent and answered (µs on the harness's clock) and its
/// values, `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// When the request was sent, in µs.
    pub sent_us: u64,
    /// When its answer was read, in µs (at least `sent_us`).
    pub done_us: u64,
    /// The smallest value answered.
    pub first: u64,
    /// The largest value answered (at least `first`).
    pub last: u64,
}

/// What the order checker found: counts and the first examples, as pairs of indices into the
/// answers it was given (the earlier answer first).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Findings {
    /// Requests that got a value at or below a value answered before they were sent.
    pub violations: u64,
    /// Requests that got a value an earlier-starting batch also got (values answered twice).
    pub repeats: u64,
    /// Up to `examples_max` violations: (the request answered before, the later request).
    pub violation_examples: Vec<(usize, usize)>,
    /// Up to `examples_max` repeats: (a request holding the value, the request repeating it).
    pub repeat_examples: Vec<(usize, usize)>,
}

/// Checks `answers` for real-time order and repeats, keeping at most `examples_max` examples
/// of each.
pub fn check(answers: &[Answer], examples_max: usize) -> Findings {
    let mut found = Findings::default();
    check_order(answers, examples_max, &mut found);
    check_repeats(answers, examples_max, &mut found);
    found
}

fn check_order(answers: &[Answer], examples_max: usize, found: &mut Findings) {
    let mut by_sent: Vec<usize> = (0..answers.len()).collect();
    by_sent.sort_unstable_by_key(|&i| answers[i].sent_us);
    let mut by_done = by_sent.clone();
    by_done.sort_unstable_by_key(|&i| answers[i].done_us);
    // The largest value of every answer read strictly before the current send time, and whose.
    let mut highest: Option<(u64, usize)> = None;
    let mut done = by_done.iter().peekable();
    for &b in &by_sent {
        let sent_us = answers[b].sent_us;
        while let Some(&&a) = done.peek() {
            if answers[a].done_us >= sent_us {
                break;
            }
            if highest.is_none_or(|(last, _)| answers[a].last > last) {
                highest = Some((answers[a].last, a));
            }
            done.next();
        }
        if let Some((last, a)) = highest
            && last >= answers[b].first
        {
            found.violations += 1;
            if found.violation_examples.len() < examples_max {
                found.violation_examples.push((a, b));
            }
        }
    }
}

fn check_repeats(answers: &[Answer], examples_max: usize, found: &mut Findings) {
    let mut by_first: Vec<usize> = (0..answers.len()).collect();
    by_first.sort_unstable_by_key(|&i| (answers[i].first, answers[i].last));
    let mut highest: Option<(u64, usize)> = None;
    for &b in &by_first {
        if let Some((last, a)) = highest
            && last >= answers[b].first
        {
            found.repeats += 1;
            if found.repeat_examples.len() < examples_max {
                found.repeat_examples.push((a, b));
            }
        }
        if highest.is_none_or(|(last, _)| answers[b].last > last) {
            highest = Some((answers[b].last, b));
        }
    }
}

#[cfg(test)]
mod tests {
    //! Hand-made histories (a violation found, a concurrent overlap left alone, a repeat, a
    //! tie), then seeded random ones judged against a brute-force reading of the definition.

    use super::*;

    fn at(sent_us: u64, done_us: u64, first: u64, last: u64) -> Answer {
        Answer { sent_us, done_us, first, last }
    }

    #[test]
    fn a_later_request_below_an_earlier_answer_is_a_violation() {
        // A answered 100..=109 at 10 µs; B, sent at 20 µs, got 50..=59.
        let history = [at(0, 10, 100, 109), at(20, 30, 50, 59)];
        let found = check(&history, 5);
        assert_eq!((found.violations, found.repeats), (1, 0));
        assert_eq!(found.violation_examples, vec![(0, 1)]);
        // The same values the other way round are in order.
        let history = [at(0, 10, 50, 59), at(20, 30, 100, 109)];
        assert_eq!(check(&history, 5), Findings::default());
    }

    #[test]
    fn concurrent_requests_may_be_answered_in_any_order() {
        // B was sent before A was answered: they overlap in time, either order is allowed.
        let history = [at(0, 30, 100, 109), at(10, 40, 50, 59), at(29, 31, 60, 60)];
        assert_eq!(check(&history, 5), Findings::default());
        // An answer read at the very microsecond the next request is sent proves nothing.
        let history = [at(0, 20, 100, 100), at(20, 30, 50, 50)];
        assert_eq!(check(&history, 5), Findings::default());
        // An equal value after a strictly earlier answer is a violation (not above it).
        let history = [at(0, 19, 100, 100), at(20, 30, 100, 101)];
        assert_eq!(check(&history, 5).violations, 1);
    }

    #[test]
    fn a_value_answered_twice_is_a_repeat_even_when_concurrent() {
        let history = [at(0, 30, 100, 109), at(10, 40, 109, 120), at(50, 60, 121, 121)];
        let found = check(&history, 5);
        assert_eq!((found.violations, found.repeats), (0, 1));
        assert_eq!(found.repeat_examples, vec![(0, 1)]);
        // A batch inside a wider earlier one.
        let history = [at(0, 30, 100, 200), at(10, 40, 150, 150)];
        assert_eq!(check(&history, 5).repeats, 1);
    }

    /// SplitMix64, so a failure names its seed.
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

    /// A linearizable history: each request is served at a point inside its send..answer
    /// interval, by one counter in the order of those points.
    fn linearizable(rng: &mut Rng, n: usize) -> Vec<Answer> {
        let mut served: Vec<(u64, u64, u64)> = (0..n)
            .map(|_| {
                let sent = rng.next() % 10_000;
                let done = sent + 1 + rng.next() % 200;
                let point = sent + rng.next() % (done - sent + 1);
                (point, sent, done)
            })
            .collect();
        served.sort_unstable();
        let mut next = 1;
        served
            .into_iter()
            .map(|(_, sent, done)| {
                let count = 1 + rng.next() % 5;
                let answer = at(sent, done, next, next + count - 1);
                next += count + rng.next() % 3;
                answer
            })
            .collect()
    }

    /// The definitions read literally, in `O(n^2)`.
    fn brute(history: &[Answer]) -> (u64, u64) {
        let violations = (0..history.len())
            .filter(|&b| {
                history.iter().any(|a| a.done_us < history[b].sent_us && a.last >= history[b].first)
            })
            .count() as u64;
        let mut order: Vec<usize> = (0..history.len()).collect();
        order.sort_unstable_by_key(|&i| (history[i].first, history[i].last));
        let repeats = (0..order.len())
            .filter(|&k| order[..k].iter().any(|&a| history[a].last >= history[order[k]].first))
            .count() as u64;
        (violations, repeats)
    }

    #[test]
    fn random_histories_agree_with_the_definition_and_planted_breaches_are_caught() {
        for seed in 0..300 {
            let mut rng = Rng(seed);
            let history = linearizable(&mut rng, 200);
            assert_eq!(check(&history, 5), Findings::default(), "seed {seed}");
            // A request later than another's answer given a value below it: the sweep must
            // find it, and agree with the definition on everything else.
            let mut broken = history.clone();
            let (a, b) = (rng.next() as usize % 200, rng.next() as usize % 200);
            let (a, b) = if broken[a].done_us < broken[b].sent_us { (a, b) } else { (b, a) };
            if broken[a].done_us < broken[b].sent_us {
                let first = broken[a].first.saturating_sub(rng.next() % 3);
                broken[b].first = first;
                broken[b].last = first + rng.next() % 2;
                let found = check(&broken, 5);
                assert!(found.violations >= 1, "seed {seed}: violation missed");
                assert_eq!((found.violations, found.repeats), brute(&broken), "seed {seed}");
            }
            // Shuffled values: whatever breaches, the sweep counts what the definition does.
            let mut shuffled = history.clone();
            for i in 0..shuffled.len() {
                let j = rng.next() as usize % shuffled.len();
                let (fi, li) = (shuffled[i].first, shuffled[i].last);
                (shuffled[i].first, shuffled[i].last) = (shuffled[j].first, shuffled[j].last);
                (shuffled[j].first, shuffled[j].last) = (fi, li);
            }
            let found = check(&shuffled, 5);
            assert_eq!((found.violations, found.repeats), brute(&shuffled), "seed {seed}");
        }
    }
}
