//! Where a strict tag's takes go: to the configured server that is the tag's owner, when the
//! servers' answers told who that is (`idmint-node`, `idmint-owner`). A strict tag's ids are
//! never cached here, so each take is a call; one to the owner saves the forward another node
//! would make. Only a hint: every node answers a strict tag in order, so a stale owner costs
//! a forward or a failed attempt, never an id out of order. The client connects only to the
//! servers it was given: a name it cannot match to one of them is never dialled.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use idmint_core::Tag;

use crate::wire::Named;

/// The servers' names and the strict tags' owners, as answers told them.
pub(crate) struct Owners {
    state: Mutex<State>,
}

struct State {
    /// Per configured server, the name it gave itself (`idmint-node`), once learnt.
    names: Vec<Option<String>>,
    /// Per strict tag, the server to ask next.
    tags: HashMap<Tag, usize>,
}

impl Owners {
    /// No names known yet, for `servers` configured servers.
    pub(crate) fn new(servers: usize) -> Owners {
        Owners { state: Mutex::new(State { names: vec![None; servers], tags: HashMap::new() }) }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The server to ask for `tag` now, if one is known and `up`.
    pub(crate) fn route(&self, tag: &Tag, up: impl Fn(usize) -> bool) -> Option<usize> {
        self.state().tags.get(tag).copied().filter(|index| up(*index))
    }

    /// What server `index` named when it answered a take of `tag`: its own name is kept,
    /// and the tag goes next to the server named its owner. An owner no server is known by
    /// yet sends the next take to a server (`up`) whose name is not learnt, so that its name
    /// is; with none left, the failover order decides.
    pub(crate) fn learn(&self, tag: &Tag, index: usize, named: &Named, up: impl Fn(usize) -> bool) {
        let mut state = self.state();
        if let (Some(node), Some(slot)) = (&named.node, state.names.get_mut(index))
            && slot.as_ref() != Some(node)
        {
            *slot = Some(node.clone());
        }
        let Some(owner) = &named.owner else {
            state.tags.remove(tag);
            return;
        };
        let known = state.names.iter().position(|name| name.as_ref() == Some(owner));
        let next = known.or_else(|| {
            (0..state.names.len()).find(|i| *i != index && state.names[*i].is_none() && up(*i))
        });
        match next {
            Some(next) => {
                if state.tags.get(tag) != Some(&next) {
                    state.tags.insert(tag.clone(), next);
                }
            }
            None => {
                state.tags.remove(tag);
            }
        }
    }

    /// The tag's owner did not answer: the failover order decides until an answer names one.
    pub(crate) fn forget(&self, tag: &Tag) {
        self.state().tags.remove(tag);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(node: &str, owner: Option<&str>) -> Named {
        Named { node: Some(node.into()), owner: owner.map(Into::into) }
    }

    fn tag() -> Tag {
        Tag::parse("chat").unwrap()
    }

    #[test]
    fn the_owner_is_asked_once_its_server_named_itself() {
        let owners = Owners::new(3);
        let up = |_| true;
        assert_eq!(owners.route(&tag(), up), None, "nothing known");
        // Server 0 forwards to "b", which no server is known by: the next take probes the
        // first server whose name is not learnt.
        owners.learn(&tag(), 0, &named("a", Some("b")), up);
        assert_eq!(owners.route(&tag(), up), Some(1));
        // Server 1 is "c", not the owner: probe server 2.
        owners.learn(&tag(), 1, &named("c", Some("b")), up);
        assert_eq!(owners.route(&tag(), up), Some(2));
        // Server 2 is "b", the owner: asked from now on.
        owners.learn(&tag(), 2, &named("b", Some("b")), up);
        assert_eq!(owners.route(&tag(), up), Some(2));
        // A server marked down is not asked; the failover order decides.
        assert_eq!(owners.route(&tag(), |i| i != 2), None);
        // The owner moved to "a" (server 0's name): asked there.
        owners.learn(&tag(), 2, &named("b", Some("a")), up);
        assert_eq!(owners.route(&tag(), up), Some(0));
        owners.forget(&tag());
        assert_eq!(owners.route(&tag(), up), None);
    }

    #[test]
    fn an_owner_no_server_is_known_by_is_never_guessed() {
        let owners = Owners::new(2);
        owners.learn(&tag(), 0, &named("a", Some("z")), |_| true);
        owners.learn(&tag(), 1, &named("b", Some("z")), |_| true);
        assert_eq!(owners.route(&tag(), |_| true), None, "z is none of the servers");
        // Down servers are not probed.
        let fresh = Owners::new(2);
        fresh.learn(&tag(), 0, &named("a", Some("z")), |i| i != 1);
        assert_eq!(fresh.route(&tag(), |_| true), None);
        // An answer without an owner forgets the route.
        fresh.learn(&tag(), 0, &named("a", Some("a")), |_| true);
        assert_eq!(fresh.route(&tag(), |_| true), Some(0));
        fresh.learn(&tag(), 0, &Named::default(), |_| true);
        assert_eq!(fresh.route(&tag(), |_| true), None);
    }
}
