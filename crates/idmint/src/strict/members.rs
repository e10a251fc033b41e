//! The live nodes of a cluster's strict engines, and which of them a tag belongs to.
//!
//! Every node holds a slot of the lease space [`MEMBERS_SPACE`] (its holder the node's peer
//! URL), renewed as its strict leases are; the rows whose leases are live by the store's
//! clock are the members. A tag belongs to the member that scores highest for it
//! (rendezvous hashing: SipHash of the tag and the member), so tags spread over the members
//! and a join or a leave moves only the tags of the member that came or went. Membership
//! only places tags: who serves a tag is still decided by the tag's own lease alone, so a
//! stale view costs a handover, never two owners. A node joins at its first strict take (or
//! the oracle's): a node that serves none touches no lease table (a Tinyid node on Tinyid's
//! database creates nothing there).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use idmint_core::Tag;
use idmint_store::{LeaseRequest, LeaseStore, WorkerSpace};

use crate::clock::Clock;
use crate::fence::Fence;

/// The lease space of the members.
pub const MEMBERS_SPACE: &str = "strict-members";
/// The most members a cluster has (slots of [`MEMBERS_SPACE`]).
pub const MEMBERS_MAX: u64 = 1_024;

/// This node's membership and its view of the others.
pub(super) struct Members {
    store: Arc<dyn LeaseStore>,
    me: String,
    ttl_ms: u64,
    margin_ms: u64,
    /// This node's slot, once held.
    slot: tokio::sync::Mutex<Option<Fence<()>>>,
    /// The live members' peer URLs, this node's among them, as last read.
    live: Mutex<Vec<String>>,
    /// Whether this node has joined (at its first strict take).
    joined: AtomicBool,
}

impl Members {
    pub(super) fn new(
        store: Arc<dyn LeaseStore>,
        me: String,
        ttl_ms: u64,
        margin_ms: u64,
    ) -> Members {
        let live = Mutex::new(vec![me.clone()]);
        let slot = tokio::sync::Mutex::new(None);
        Members { store, me, ttl_ms, margin_ms, slot, live, joined: AtomicBool::new(false) }
    }

    fn space() -> WorkerSpace {
        WorkerSpace::parse(MEMBERS_SPACE).expect("a valid space name")
    }

    fn request(&self) -> LeaseRequest {
        LeaseRequest {
            space: Members::space(),
            min_worker: 0,
            max_worker: MEMBERS_MAX - 1,
            holder: self.me.clone(),
            ttl_ms: self.ttl_ms,
            margin_ms: self.margin_ms,
            mark_max: 0,
        }
    }

    /// Joins the members (at the next [`Members::refresh`]); whether this node had joined.
    pub(super) fn join(&self) -> bool {
        self.joined.swap(true, Ordering::AcqRel)
    }

    /// Renews (or takes) this node's slot and reads the live members again, once joined. A
    /// store that does not answer leaves the last view.
    pub(super) async fn refresh(&self, clock: &dyn Clock) {
        if !self.joined.load(Ordering::Acquire) {
            return;
        }
        {
            let mut slot = self.slot.lock().await;
            match &*slot {
                Some(fence) => {
                    if let Some(renewal) = fence.renew(|_| self.request(), clock, |()| {}).await {
                        let mut state = fence.lock();
                        fence.install(&mut state, renewal.lease, renewal.until_ms);
                    }
                }
                None => {
                    let asked_ms = clock.now_ms();
                    if let Ok(lease) = Fence::<()>::acquire(&*self.store, &self.request()).await {
                        let store = (Arc::clone(&self.store), "strict membership lease");
                        *slot = Some(Fence::leased(store, lease, (self.ttl_ms, 0, asked_ms), ()));
                    }
                }
            }
        }
        let (Ok(now_ms), Ok(rows)) =
            (self.store.now_ms().await, self.store.list_leases(&Members::space()).await)
        else {
            return;
        };
        let mut live: Vec<String> =
            rows.into_iter().filter(|r| r.expires_ms > now_ms).map(|r| r.holder).collect();
        live.push(self.me.clone());
        live.sort_unstable();
        live.dedup();
        *self.live.lock().unwrap_or_else(PoisonError::into_inner) = live;
    }

    /// The member `tag` belongs to.
    pub(super) fn home(&self, tag: &Tag) -> String {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.iter().max_by_key(|member| score(tag, member)).cloned().unwrap_or(self.me.clone())
    }

    /// Whether `member` was live at the last read.
    pub(super) fn is_live(&self, member: &str) -> bool {
        self.live.lock().unwrap_or_else(PoisonError::into_inner).iter().any(|m| m == member)
    }

    /// Gives this node's slot back (a shutdown): the others stop placing tags here.
    pub(super) async fn leave(&self) {
        let fence = self.slot.lock().await.take();
        if let Some(fence) = fence {
            let lease = fence.close(&mut fence.lock(), "the node is shutting down");
            if let Some(lease) = lease {
                fence.release(lease).await;
            }
        }
    }
}

/// `member`'s score for `tag`: SipHash-1-3 (fixed key) of both, so every node computes the
/// same placement from the same members.
fn score(tag: &Tag, member: &str) -> u64 {
    use std::hash::Hasher;
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(0, 0);
    hasher.write(tag.as_str().as_bytes());
    hasher.write_u8(0xff);
    hasher.write(member.as_bytes());
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Tags spread over the members, and a member leaving moves only its own tags.
    #[test]
    fn tags_spread_and_a_leave_moves_only_the_leavers_tags() {
        let members = ["http://a:1", "http://b:1", "http://c:1"];
        fn home<'a>(live: &[&'a str], tag: &Tag) -> &'a str {
            live.iter().max_by_key(|m| score(tag, m)).unwrap()
        }
        let tags: Vec<Tag> = (0..300).map(|i| Tag::parse(&format!("t{i}")).unwrap()).collect();
        for member in members {
            let owned = tags.iter().filter(|t| home(&members, t) == member).count();
            assert!((60..=140).contains(&owned), "{member} homes {owned} of 300 tags");
        }
        let after: [&str; 2] = ["http://a:1", "http://c:1"];
        for tag in &tags {
            let before = home(&members, tag);
            if before != "http://b:1" {
                assert_eq!(home(&after, tag), before, "{tag} moved though its home stayed");
            }
        }
    }
}
