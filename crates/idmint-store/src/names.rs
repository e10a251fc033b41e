//! Names of the worker-id machinery that the errors must name too: the lease and assignment
//! tables, and [`WorkerSpace`] (its parser, which refuses with a [`StoreError`](crate::StoreError),
//! is in `worker.rs`). A leaf: it imports no other module of the crate.

use std::fmt;
use std::sync::Arc;

/// The lease table: one row per `(space, worker_id)` ever held, with its holder, fencing
/// token and holder id, expiry and time high-water mark.
pub const WORKERS_TABLE: &str = "idmint_workers";
/// The assignment table (uid-generator's `WORKER_NODE`): one row per start of a node with an
/// assigned id; the row's auto-increment `id` is the worker id.
pub const WORKER_NODE_TABLE: &str = "idmint_worker_node";

/// The name of a set of worker ids: a layout's name. 1 to [`WORKER_SPACE_LEN_MAX`](crate::WORKER_SPACE_LEN_MAX)
/// characters of `A-Z a-z 0-9 _ . : -`. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WorkerSpace(pub(crate) Arc<str>);

impl WorkerSpace {
    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for WorkerSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

impl fmt::Debug for WorkerSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "WorkerSpace({:?})", &*self.0)
    }
}
