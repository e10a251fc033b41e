//! The clients: concurrent HTTP callers that go round the nodes like a load balancer (and
//! round the workload's tags), one request at a time each, and record every answer,
//! acknowledged ids included, with the client, the node, the tag, the time and the latency.
//! The history is what the checker reads.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one request came back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 200 with these ids, in the order served.
    Ids(Vec<u64>),
    /// An error answer: the HTTP status and the body's `error.code`.
    Refused {
        /// The HTTP status.
        status: u16,
        /// The JSON body's `error.code` (`?` when there was none).
        code: String,
    },
    /// No answer: connection refused or reset, or the client's timeout.
    Unreachable,
}

/// One request of the history.
#[derive(Debug, Clone)]
pub struct Op {
    /// The client that sent it (each client's requests are sequential).
    pub client: u32,
    /// Index of the node it went to.
    pub node: usize,
    /// The tag it asked for: a segment tag, a sequence, or the snowflake layout. Ids are
    /// unique within a tag, so the checker judges each tag on its own.
    pub tag: Arc<str>,
    /// When it was sent, in ms since the scenario started.
    pub at_ms: u64,
    /// How long the answer took, in µs.
    pub latency_us: u64,
    /// The answer.
    pub outcome: Outcome,
}

impl Op {
    /// When the answer arrived, in ms since the scenario started.
    pub fn done_ms(&self) -> u64 {
        self.at_ms + self.latency_us / 1000
    }

    /// The ids acknowledged, if any.
    pub fn ids(&self) -> &[u64] {
        match &self.outcome {
            Outcome::Ids(ids) => ids,
            _ => &[],
        }
    }
}

/// What the clients ask for.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The tags and, for each, its path without `count`, e.g. `("order", "/v1/segment/order")`;
    /// each client goes round them.
    pub tags: Vec<(Arc<str>, String)>,
    /// Ids per request.
    pub count: u64,
    /// Concurrent clients.
    pub clients: u32,
    /// Ids per second asked for by all clients together (each paces its requests to its
    /// share); bounds the history's size in long runs.
    pub rate_ids_per_s: u64,
    /// A request without an answer after this is recorded as [`Outcome::Unreachable`].
    pub timeout_ms: u64,
}

/// The timeout of a request unless a scenario sets another.
const TIMEOUT_MS_DEFAULT: u64 = 5_000;

impl Workload {
    /// `clients` clients that ask for `count` ids a request, going round `tags` (tag, path),
    /// at `rate_ids_per_s` ids per second together, each request bounded by 5 s.
    pub fn new(tags: &[(&str, &str)], count: u64, clients: u32, rate_ids_per_s: u64) -> Workload {
        assert!(!tags.is_empty() && clients > 0, "a workload has a tag and a client");
        Workload {
            tags: tags.iter().map(|(tag, path)| (Arc::from(*tag), path.to_string())).collect(),
            count,
            clients,
            rate_ids_per_s,
            timeout_ms: TIMEOUT_MS_DEFAULT,
        }
    }
}

/// The nodes' base URLs, by node index; a scenario may add a node while the load runs.
pub type Targets = Arc<Mutex<Vec<String>>>;

/// Clients running on a runtime until [`Load::stop`].
pub struct Load {
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<Vec<Op>>>,
}

impl Load {
    /// Starts `workload.clients` clients against `targets`; times are measured from `t0`.
    pub fn start(
        runtime: &tokio::runtime::Handle,
        targets: &Targets,
        workload: &Workload,
        t0: Instant,
    ) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(workload.timeout_ms))
            .pool_max_idle_per_host(workload.clients as usize)
            .build()
            .expect("a reqwest client without TLS builds");
        let clients = (0..workload.clients)
            .map(|client| {
                let (stop, targets, http) = (Arc::clone(&stop), Arc::clone(targets), http.clone());
                let workload = workload.clone();
                runtime.spawn(async move {
                    run_client(client, &http, &targets, &workload, t0, &stop).await
                })
            })
            .collect();
        Load { stop, clients }
    }

    /// Stops the clients and returns the history, ordered by send time.
    pub fn stop(self, runtime: &tokio::runtime::Handle) -> Vec<Op> {
        self.stop.store(true, Ordering::Relaxed);
        let mut history = Vec::new();
        for client in self.clients {
            // A client task only ends by the stop flag; a panic in it is the harness's bug.
            history.extend(runtime.block_on(client).expect("a client task panicked"));
        }
        history.sort_by_key(|op| (op.at_ms, op.client));
        history
    }
}

async fn run_client(
    client: u32,
    http: &reqwest::Client,
    targets: &Targets,
    workload: &Workload,
    t0: Instant,
    stop: &AtomicBool,
) -> Vec<Op> {
    let mut ops = Vec::new();
    let mut turn = client as usize;
    // This client's share of the rate: one request every `interval`, never in bursts.
    let interval = Duration::from_secs_f64(
        (workload.count * u64::from(workload.clients)) as f64
            / workload.rate_ids_per_s.max(1) as f64,
    );
    let mut next_send = tokio::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let (node, tag, url) = {
            let targets = targets.lock().expect("targets lock");
            let node = turn % targets.len();
            // The tag turns once per round of the nodes, so every node serves every tag.
            let (tag, path) = &workload.tags[(turn / targets.len()) % workload.tags.len()];
            (node, Arc::clone(tag), format!("{}{path}?count={}", targets[node], workload.count))
        };
        turn += 1;
        let sent = Instant::now();
        let outcome = request(http, &url).await;
        let ok = matches!(outcome, Outcome::Ids(_));
        ops.push(Op {
            client,
            node,
            tag,
            at_ms: sent.duration_since(t0).as_millis() as u64,
            latency_us: sent.elapsed().as_micros() as u64,
            outcome,
        });
        // Behind schedule (slow answers): go on at once, but never catch up in a burst.
        next_send = (next_send + interval).max(tokio::time::Instant::now());
        // Refusals and dead nodes answer at once: a short pause keeps a client from spinning.
        if !ok {
            next_send = next_send.max(tokio::time::Instant::now() + Duration::from_millis(10));
        }
        tokio::time::sleep_until(next_send).await;
    }
    ops
}

async fn request(http: &reqwest::Client, url: &str) -> Outcome {
    let Ok(response) = http.get(url).send().await else {
        return Outcome::Unreachable;
    };
    let status = response.status().as_u16();
    let Ok(body) = response.json::<serde_json::Value>().await else {
        return if status == 200 {
            Outcome::Unreachable
        } else {
            Outcome::Refused { status, code: "?".into() }
        };
    };
    if status == 200 {
        // Every element must be a number: one that is not is a wrong answer, never skipped.
        let ids = body["ids"].as_array().and_then(|ids| {
            ids.iter().map(serde_json::Value::as_u64).collect::<Option<Vec<u64>>>()
        });
        match ids {
            Some(ids) => Outcome::Ids(ids),
            None => Outcome::Refused { status, code: "not_ids".into() },
        }
    } else {
        let code = body["error"]["code"].as_str().unwrap_or("?").to_string();
        Outcome::Refused { status, code }
    }
}
