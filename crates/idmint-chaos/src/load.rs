//! The clients: concurrent HTTP callers that go round the nodes like a load balancer (and
//! round the workload's tags and batch sizes), one request at a time each, and record every
//! answer, acknowledged ids included, with the client, the node, the tag, the send time and
//! the latency (µs, on the harness's monotonic clock). The history is what the checker reads.
//! A strict tag's batch and the oracle's answer (`first`..`last`) are kept as a range.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What one request came back with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 200 with these ids, in the order served.
    Ids(Vec<u64>),
    /// 200 with the consecutive values `first..=last` (a strict tag's batch, the oracle's
    /// timestamps): kept as a range, since the long profile answers 10^7 and more.
    Range {
        /// The first value.
        first: u64,
        /// The last value (at least `first`).
        last: u64,
    },
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
    /// When it was sent, in µs since the scenario started (the real-time order check's
    /// clock).
    pub sent_us: u64,
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

    /// When the answer was read, in µs since the scenario started.
    pub fn done_us(&self) -> u64 {
        self.sent_us + self.latency_us
    }

    /// The ids acknowledged as a list, if any ([`Outcome::Range`]: none here, see
    /// [`Op::span`]).
    pub fn ids(&self) -> &[u64] {
        match &self.outcome {
            Outcome::Ids(ids) => ids,
            _ => &[],
        }
    }

    /// How many values were acknowledged.
    pub fn count(&self) -> u64 {
        match &self.outcome {
            Outcome::Ids(ids) => ids.len() as u64,
            Outcome::Range { first, last } => last - first + 1,
            _ => 0,
        }
    }

    /// The smallest and largest value acknowledged, if any.
    pub fn span(&self) -> Option<(u64, u64)> {
        match &self.outcome {
            Outcome::Ids(ids) => Some((*ids.iter().min()?, *ids.iter().max()?)),
            Outcome::Range { first, last } => Some((*first, *last)),
            _ => None,
        }
    }
}

/// What the clients ask for.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The tags and, for each, its path without `count`, e.g. `("order", "/v1/segment/order")`;
    /// each client goes round them.
    pub tags: Vec<(Arc<str>, String)>,
    /// Ids per request: each client goes round these batch sizes.
    pub counts: Vec<u64>,
    /// Concurrent clients.
    pub clients: u32,
    /// Ids per second asked for by all clients together (each paces its requests to its
    /// share); bounds the history's size in long runs.
    pub rate_ids_per_s: u64,
    /// A request without an answer after this is recorded as [`Outcome::Unreachable`].
    pub timeout_ms: u64,
    /// Record a batch of consecutive ids as [`Outcome::Range`] (strict tags: their batches
    /// are ranges, and the order checker reads ranges).
    pub ranges: bool,
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
            counts: vec![count],
            clients,
            rate_ids_per_s,
            timeout_ms: TIMEOUT_MS_DEFAULT,
            ranges: false,
        }
    }

    /// The same clients going round the batch sizes `counts`, recording ranges (strict tags
    /// and the oracle).
    pub fn strict(mut self, counts: &[u64]) -> Workload {
        assert!(counts.iter().all(|&c| c > 0), "a batch has an id");
        self.counts = counts.to_vec();
        self.ranges = true;
        self
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

    /// Stops loads run side by side and returns one history, ordered by send time; each
    /// load's clients are numbered after the loads' before it, so no two share a number.
    pub fn stop_all(loads: Vec<Load>, runtime: &tokio::runtime::Handle) -> Vec<Op> {
        for load in &loads {
            load.stop.store(true, Ordering::Relaxed);
        }
        let mut history = Vec::new();
        let mut first_client = 0;
        for load in loads {
            let clients = load.clients.len() as u32;
            let mut ops = load.stop(runtime);
            ops.iter_mut().for_each(|op| op.client += first_client);
            history.extend(ops);
            first_client += clients;
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
    let count_mean = workload.counts.iter().sum::<u64>() as f64 / workload.counts.len() as f64;
    let interval = Duration::from_secs_f64(
        count_mean * f64::from(workload.clients) / workload.rate_ids_per_s.max(1) as f64,
    );
    let mut next_send = tokio::time::Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let Some((node, tag, url)) = next_request(targets, workload, &mut turn) else {
            // Every node has left: wait for one to join.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let sent = Instant::now();
        let outcome = request(http, &url, workload.ranges).await;
        let ok = matches!(outcome, Outcome::Ids(_) | Outcome::Range { .. });
        // The answer's time is read before the send time is turned into numbers: both on one
        // monotonic clock.
        let latency_us = sent.elapsed().as_micros() as u64;
        let sent_us = sent.duration_since(t0).as_micros() as u64;
        ops.push(Op { client, node, tag, at_ms: sent_us / 1000, sent_us, latency_us, outcome });
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

/// The node, tag and URL of a client's next request, going round the nodes that are in
/// (a node that left is an empty URL), then the tags, then the batch sizes; `None` when every
/// node has left.
fn next_request(
    targets: &Targets,
    workload: &Workload,
    turn: &mut usize,
) -> Option<(usize, Arc<str>, String)> {
    let targets = targets.lock().expect("targets lock");
    for _ in 0..targets.len() {
        let (node, round) = (*turn % targets.len(), *turn / targets.len());
        *turn += 1;
        if targets[node].is_empty() {
            continue;
        }
        // The tag turns once per round of the nodes, so every node serves every tag, and the
        // batch size once per round of the tags.
        let (tag, path) = &workload.tags[round % workload.tags.len()];
        let count = workload.counts[(round / workload.tags.len()) % workload.counts.len()];
        return Some((node, Arc::clone(tag), format!("{}{path}?count={count}", targets[node])));
    }
    None
}

/// One request: its ids (as a range with `ranges` when they are consecutive, and always for
/// the oracle's `first`..`last`), or the refusal.
async fn request(http: &reqwest::Client, url: &str, ranges: bool) -> Outcome {
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
        if body.get("ids").is_none() {
            return timestamps(&body);
        }
        let ids = body["ids"].as_array().and_then(|ids| {
            ids.iter().map(serde_json::Value::as_u64).collect::<Option<Vec<u64>>>()
        });
        match ids {
            Some(ids) if ranges && consecutive(&ids) => {
                Outcome::Range { first: ids[0], last: ids[ids.len() - 1] }
            }
            Some(ids) => Outcome::Ids(ids),
            None => Outcome::Refused { status, code: "not_ids".into() },
        }
    } else {
        let code = body["error"]["code"].as_str().unwrap_or("?").to_string();
        Outcome::Refused { status, code }
    }
}

/// The oracle's answer, `{"first", "last", "count", …}`, as a range; one whose `count` does
/// not match `first..=last` is a wrong answer, never skipped.
fn timestamps(body: &serde_json::Value) -> Outcome {
    let (first, last, count) =
        (body["first"].as_u64(), body["last"].as_u64(), body["count"].as_u64());
    match (first, last, count) {
        (Some(first), Some(last), Some(count)) if last >= first && last - first + 1 == count => {
            Outcome::Range { first, last }
        }
        _ => Outcome::Refused { status: 200, code: "not_ids".into() },
    }
}

/// Whether `ids` is one run of consecutive values (and not empty).
fn consecutive(ids: &[u64]) -> bool {
    !ids.is_empty() && ids.windows(2).all(|w| w[0].checked_add(1) == Some(w[1]))
}
