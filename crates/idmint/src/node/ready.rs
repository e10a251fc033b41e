//! Readiness per engine: [`Engine`] names what a node may run, [`Node::engine_ready`] says
//! whether one engine can serve now, [`Node::readiness`] reports every engine the node runs,
//! and [`Node::ready`] gates on the engines the deployment uses (`NodeConfig::ready_engines`).
//!
//! So a segment route is ready when segments are: a snowflake generator that settles after a
//! start does not take a segment-only node out of its load balancer, unless the deployment
//! says it uses snowflake ids. An engine the node does not run (not configured) is not
//! reported; one refused for good at start (no worker id free, a layout out of time) is
//! reported but never gates, since readiness would not come back by itself and the node
//! serves its other ids. Knows no HTTP or status code.

use std::fmt;

use super::{Node, NodeError};

/// An engine of a node, as readiness names it (`/ready?engine=NAME`, `ready_engines`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Engine {
    /// Segment ids of the node's store (the node's foundation: its store answers).
    Segment,
    /// The snowflake generator (and its ring).
    Snowflake,
    /// Didi Tinyid's `biz_type`s (their database answers).
    Tinyid,
    /// Sequences (Redis answers).
    Sequences,
}

impl Engine {
    /// Every engine, in the order readiness reports them.
    pub const ALL: [Engine; 4] =
        [Engine::Segment, Engine::Snowflake, Engine::Tinyid, Engine::Sequences];

    /// The engine's name: `segment`, `snowflake`, `tinyid` or `sequences`.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Segment => "segment",
            Engine::Snowflake => "snowflake",
            Engine::Tinyid => "tinyid",
            Engine::Sequences => "sequences",
        }
    }

    /// The engine named `name`; the error names the engines there are.
    pub fn parse(name: &str) -> Result<Engine, String> {
        Engine::ALL.into_iter().find(|engine| engine.name() == name.trim()).ok_or_else(|| {
            format!("{name:?} is not an engine; use segment, snowflake, tinyid or sequences")
        })
    }

    /// A comma-separated list of engines (`segment,snowflake`), at least one, each once.
    pub fn parse_list(text: &str) -> Result<Vec<Engine>, String> {
        let mut engines = Vec::new();
        for name in text.split(',') {
            let engine = Engine::parse(name)?;
            if !engines.contains(&engine) {
                engines.push(engine);
            }
        }
        Ok(engines)
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One engine's readiness, as [`Node::readiness`] reports it.
#[derive(Debug)]
pub struct EngineReadiness {
    /// The engine.
    pub engine: Engine,
    /// Whether its state decides the node's readiness: the deployment uses it
    /// (`ready_engines`) and it is not refused for good.
    pub gates: bool,
    /// Whether it can serve now, or why not.
    pub state: Result<(), NodeError>,
}

/// What an engine's state means for the node's readiness.
enum Standing {
    /// Not run by this node: not reported.
    Absent,
    /// Refused for good at start: reported, never gating.
    Final(NodeError),
    /// Running or starting: reported, gating when the deployment uses it.
    Live(Result<(), NodeError>),
}

impl Node {
    /// Whether the node can serve: it is not shutting down, and every engine the deployment
    /// uses (`NodeConfig::ready_engines`) that it runs can serve now. The first that cannot
    /// is the error. An engine refused for good at start (not configured, no worker id free)
    /// does not make the node not ready: it serves its other kinds of ids, and readiness
    /// would not come back by itself.
    pub async fn ready(&self) -> Result<(), NodeError> {
        for &engine in &self.ready_engines {
            if let Standing::Live(Err(error)) = self.standing(engine).await {
                return Err(error);
            }
        }
        // A node whose list leaves segments out is still not ready while it shuts down.
        if self.cancel.is_cancelled() {
            return Err(NodeError::Segment(crate::segment::Error::ShuttingDown));
        }
        Ok(())
    }

    /// Every engine this node runs (or tries to start), whether it gates the node's
    /// readiness and whether it can serve now: what `/ready`'s body lists.
    pub async fn readiness(&self) -> Vec<EngineReadiness> {
        let mut engines = Vec::new();
        for engine in Engine::ALL {
            let gates = self.ready_engines.contains(&engine);
            match self.standing(engine).await {
                Standing::Absent => {}
                Standing::Final(error) => {
                    engines.push(EngineReadiness { engine, gates: false, state: Err(error) });
                }
                Standing::Live(state) => engines.push(EngineReadiness { engine, gates, state }),
            }
        }
        engines
    }

    /// Whether `engine` can serve now, whatever the node's readiness gates on: the probe of
    /// one engine (`/ready?engine=snowflake`). An engine the node does not run answers why
    /// (not configured, not served), as its routes do.
    pub async fn engine_ready(&self, engine: Engine) -> Result<(), NodeError> {
        match engine {
            Engine::Segment => Ok(self.segments.ready().await?),
            Engine::Snowflake => Ok(self.snowflake.get()?.generator.readiness()?),
            Engine::Tinyid => Ok(self.tinyid()?.segments().ready().await?),
            Engine::Sequences => Ok(self.sequences()?.ready().await?),
        }
    }

    /// The engines whose readiness gates the node's (`NodeConfig::ready_engines`).
    pub fn ready_engines(&self) -> &[Engine] {
        &self.ready_engines
    }

    /// `engine`'s state, and what it means for the node's readiness.
    async fn standing(&self, engine: Engine) -> Standing {
        let state = self.engine_ready(engine).await;
        match state {
            Err(NodeError::NotConfigured { .. } | NodeError::TinyidNotServed) => Standing::Absent,
            // Refused at start for a reason only the operator ends: the generator never ran.
            Err(error @ NodeError::Snowflake(_)) if self.snowflake.engine().is_none() => {
                Standing::Final(error)
            }
            state => Standing::Live(state),
        }
    }
}
