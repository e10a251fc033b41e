//! [`UnknownTags`]: the bound on store lookups that requests for tags the store does not hold
//! can cause.
//!
//! A request for a tag the node does not serve costs a store call (the first refill of an
//! empty generator); concurrent requests for one name already share it (the generator's
//! single-flight refill). This adds what stops a stream of unknown names from becoming a
//! stream of store calls:
//! - a negative cache: a name the store did not hold answers `UnknownTag` without a store
//!   call for `UNKNOWN_TAG_TTL_MS`, so a tag created behind the node's back (another node, the
//!   CLI) is served within about that long; a create through this node clears it at once,
//!   and a lookup that was in flight during the create (it asked the store before the row
//!   existed) does not put the name back;
//! - a budget: at most `UNKNOWN_TAG_LOOKUPS_PER_S_MAX` lookups per second may turn out
//!   unknown; past it, names the node has not seen are refused as unavailable (retryable,
//!   never guessed as unknown) until the second is over. Tags the store holds never spend
//!   the budget, so a node starting with many real tags loads them all.
//!
//! It must not call the store or spawn tasks; it only decides.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use idmint_core::Tag;
use idmint_core::limits::{UNKNOWN_TAG_LOOKUPS_PER_S_MAX, UNKNOWN_TAG_TTL_MS, UNKNOWN_TAGS_MAX};
use tokio::time::{Duration, Instant};

/// How long one lookup budget lasts.
const BUDGET_WINDOW: Duration = Duration::from_secs(1);

/// What [`UnknownTags::admit`] decided for a name the node does not serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Ask the store.
    Lookup,
    /// The store did not hold it less than `UNKNOWN_TAG_TTL_MS` ago.
    Unknown,
    /// This second's budget of unknown lookups is spent.
    OverBudget,
}

/// Names recently found unknown, and this second's count of such lookups.
#[derive(Debug)]
pub(crate) struct UnknownTags {
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    /// Name -> when the store last did not hold it. At most `UNKNOWN_TAGS_MAX`.
    names: HashMap<Tag, Instant>,
    window_start: Instant,
    /// Lookups in the current window that found no tag.
    unknown_in_window: u64,
    /// Name -> when it was created through this node. At most `UNKNOWN_TAGS_MAX`.
    created: HashMap<Tag, Instant>,
}

impl Default for UnknownTags {
    fn default() -> UnknownTags {
        UnknownTags::new()
    }
}

impl UnknownTags {
    /// No name known unknown, a full budget.
    pub(crate) fn new() -> UnknownTags {
        let state = State {
            names: HashMap::new(),
            window_start: Instant::now(),
            unknown_in_window: 0,
            created: HashMap::new(),
        };
        UnknownTags { state: Mutex::new(state) }
    }

    /// Whether the store may be asked about `tag`, a name the node holds no generator for.
    pub(crate) fn admit(&self, tag: &Tag) -> Admission {
        let now = Instant::now();
        let mut state = self.state();
        if let Some(at) = state.names.get(tag) {
            if now.saturating_duration_since(*at) < ttl() {
                return Admission::Unknown;
            }
            state.names.remove(tag);
        }
        if now.saturating_duration_since(state.window_start) >= BUDGET_WINDOW {
            state.window_start = now;
            state.unknown_in_window = 0;
        }
        if state.unknown_in_window >= UNKNOWN_TAG_LOOKUPS_PER_S_MAX {
            return Admission::OverBudget;
        }
        Admission::Lookup
    }

    /// The store did not hold `tag`: remember it (bounded) and spend the budget.
    pub(crate) fn record(&self, tag: &Tag) {
        let now = Instant::now();
        let mut state = self.state();
        state.unknown_in_window += 1;
        // Created through this node since a lookup could have started: that lookup asked
        // before the row existed, and the tag is served on its next request.
        if state.created.get(tag).is_some_and(|at| now.saturating_duration_since(*at) < in_flight())
        {
            return;
        }
        if state.names.len() >= UNKNOWN_TAGS_MAX {
            state.names.retain(|_, at| now.saturating_duration_since(*at) < ttl());
        }
        // Still full of fresh names: the budget bounds the lookups without this one.
        if state.names.len() < UNKNOWN_TAGS_MAX {
            state.names.insert(tag.clone(), now);
        }
    }

    /// `tag` was created through this node: serve it on its next request.
    pub(crate) fn clear(&self, tag: &Tag) {
        let now = Instant::now();
        let mut state = self.state();
        state.names.remove(tag);
        if state.created.len() >= UNKNOWN_TAGS_MAX {
            state.created.retain(|_, at| now.saturating_duration_since(*at) < in_flight());
        }
        if state.created.len() < UNKNOWN_TAGS_MAX {
            state.created.insert(tag.clone(), now);
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every change is a single insert, remove or counter step: a poisoned state is whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn ttl() -> Duration {
    Duration::from_millis(UNKNOWN_TAG_TTL_MS)
}

/// The longest a store lookup may be in flight: a lookup that started before a create ends
/// at most this long after it.
fn in_flight() -> Duration {
    Duration::from_millis(idmint_core::limits::STORE_CALL_TIMEOUT_MS_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lookup that started before a create through this node and found no row ends after
    /// it: the name is not remembered as unknown, so its next request is served. A name
    /// found unknown with no create is remembered.
    #[test]
    fn a_lookup_in_flight_during_a_create_does_not_hide_the_new_tag() {
        let unknown = UnknownTags::new();
        let (created, other) = (Tag::parse("fresh").unwrap(), Tag::parse("ghost").unwrap());
        assert_eq!(unknown.admit(&created), Admission::Lookup);
        unknown.clear(&created); // the create, while the lookup is in flight
        unknown.record(&created); // the lookup ends: no row when it asked
        assert_eq!(unknown.admit(&created), Admission::Lookup);
        unknown.record(&other);
        assert_eq!(unknown.admit(&other), Admission::Unknown);
    }
}
