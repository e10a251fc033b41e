//! The known name nearest to a misspelled one, for "did you mean …?" (an unknown file key, an
//! `IDMINT_*` variable idmint does not read): the edit distance (Levenshtein, in characters)
//! to each candidate, a few lines rather than a dependency. A leaf: it imports no other
//! configuration module.

/// Edits (a character inserted, removed or replaced) that turn `a` into `b`.
pub(super) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    // One row of the table at a time: `row[j]` is the distance from `a`'s prefix so far to
    // `b[..j]`.
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let replaced = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = replaced.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// The candidate nearest to `typed` by `distance`, when it is near enough to be a
/// misspelling of it: at most a third of `typed`'s length away, or 2 edits for a short
/// name. Ties go to the first candidate.
pub(super) fn nearest<T>(
    typed: &str,
    candidates: impl IntoIterator<Item = T>,
    distance: impl Fn(&T) -> usize,
) -> Option<T> {
    let within = (typed.chars().count() / 3).max(2);
    let mut best: Option<(usize, T)> = None;
    for candidate in candidates {
        let d = distance(&candidate);
        if d <= within && best.as_ref().is_none_or(|(nearest, _)| d < *nearest) {
            best = Some((d, candidate));
        }
    }
    best.map(|(_, candidate)| candidate)
}
