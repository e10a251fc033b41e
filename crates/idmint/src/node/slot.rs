//! One shape for every optional engine of the node: running, or why not — starting (retried,
//! with the last failure), not configured, failed (final), or shut down before it ran.
//!
//! A slot is filled once, by the node's start or by the engine's retry loop; reading a
//! running engine is one acquire load. Each engine says once, in [`Slotted::refusal`], which
//! [`NodeError`] a call answers while it does not run, so every transport answers alike.

use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use super::NodeError;

/// Why an engine does not run (yet).
#[derive(Debug, Clone)]
pub(crate) enum Absence<F> {
    /// Its start failed for a reason that passes by itself and is retried: the last failure.
    Starting(String),
    /// Disabled, or a configuration it cannot run: final until the configuration changes.
    NotConfigured(String),
    /// Its start was refused for a reason only the operator ends: final.
    Failed(F),
    /// The node shut down before the engine ran.
    ShutDown,
}

/// An engine the node keeps in an [`EngineSlot`].
pub(crate) trait Slotted {
    /// What a final refusal of its start carries.
    type Failure: Clone;

    /// What a call answers while the engine does not run.
    fn refusal(absence: &Absence<Self::Failure>) -> NodeError;
}

/// One engine of the node, or why it does not run.
pub(crate) struct EngineSlot<E: Slotted> {
    inner: Arc<SlotInner<E>>,
}

struct SlotInner<E: Slotted> {
    engine: OnceLock<E>,
    /// Read only when there is no engine (a refusal), never on a request's path to it.
    absence: Mutex<Absence<E::Failure>>,
}

impl<E: Slotted> Clone for EngineSlot<E> {
    fn clone(&self) -> Self {
        EngineSlot { inner: Arc::clone(&self.inner) }
    }
}

impl<E: Slotted> EngineSlot<E> {
    /// A slot without an engine, for `absence`.
    pub(crate) fn new(absence: Absence<E::Failure>) -> EngineSlot<E> {
        let inner = SlotInner { engine: OnceLock::new(), absence: Mutex::new(absence) };
        EngineSlot { inner: Arc::new(inner) }
    }

    /// A slot holding `engine`.
    pub(crate) fn running(engine: E) -> EngineSlot<E> {
        let slot = EngineSlot::new(Absence::ShutDown);
        slot.publish(engine);
        slot
    }

    /// Installs the engine; the first one stays (the start or the one retry loop fills it).
    pub(crate) fn publish(&self, engine: E) {
        let _ = self.inner.engine.set(engine);
    }

    /// Records why there is no engine.
    pub(crate) fn set(&self, absence: Absence<E::Failure>) {
        *self.inner.absence.lock().unwrap_or_else(PoisonError::into_inner) = absence;
    }

    /// The running engine, or the refusal that says why there is none.
    pub(crate) fn get(&self) -> Result<&E, NodeError> {
        self.inner.engine.get().ok_or_else(|| self.refusal())
    }

    /// The running engine, if any.
    pub(crate) fn engine(&self) -> Option<&E> {
        self.inner.engine.get()
    }

    fn refusal(&self) -> NodeError {
        E::refusal(&self.inner.absence.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Why there is no engine, as the node's status shows it; `None` while one runs.
    pub(crate) fn reason(&self) -> Option<String> {
        self.engine().is_none().then(|| self.refusal().to_string())
    }

    /// Whether the start is being retried (no engine yet, for a reason that passes).
    pub(crate) fn starting(&self) -> bool {
        self.engine().is_none()
            && matches!(
                *self.inner.absence.lock().unwrap_or_else(PoisonError::into_inner),
                Absence::Starting(_)
            )
    }
}
