//! `client_grpc`: the Rust client's ids per second in the caller's process, and the gRPC
//! API's requests per second, each beside a floor measured in the same process and run
//! (issue 9). docs/PERFORMANCE.md's client figures come from `scripts/bench-client`; the
//! HTTP half of this comparison is scripts/bench-grpc-client.sh, which also runs this.
//!
//! Run: `cargo bench -p idmint-client --bench client_grpc` (harness = false; about 60 s of
//! fixed phases; prints markdown tables). What runs, in order:
//!
//! - One idmint server (`idmint_server::serve`: HTTP and gRPC on one port, every middleware)
//!   over a `MemoryStore` on 127.0.0.1:0, tag `bench` with step 100 000, on its own runtime
//!   of [`SERVER_WORKERS`] workers (what `idmint serve` starts on this 2-core machine).
//!   Beside it, on the same runtime, a bare `idmint.v1.IdMint` service mounted on axum the
//!   way idmint mounts its own (same transport, no middleware, no library): its `NextIds`
//!   answers a counter. It is the gRPC floor.
//! - In-process, one taking thread (this one), ids counted after a warm-up, each checked to
//!   be above the last by the same code in every loop: a bare `AtomicU64::fetch_add(1)`
//!   (the floor); the server's own `TagGenerator` (the library over its local store, for
//!   context), `try_next_id` and `next_id().await`; then the client (`Client::connect`, its
//!   gRPC leases on a runtime of [`CLIENT_WORKERS`] worker): `TagIds::try_next_id`,
//!   `TagIds::next_id().await` and `Client::next_id("bench").await`. A `try_next_id` loop
//!   spins while the buffer is empty and reports how often and how long it was.
//! - gRPC load with tonic's generated client: [`GRPC_IN_FLIGHT`] requests in flight over
//!   [`GRPC_CONNECTIONS`] HTTP/2 connections, `NextIds` with count 1 and 1000, against idmint
//!   and against the bare service alternating, [`GRPC_ROUNDS`] rounds, on a load runtime of
//!   [`LOAD_WORKERS`] workers. Every answer is checked: `count` ids, increasing per task.
//!
//! The server, the client's runtime, the taking thread and the load share the machine's
//! cores; the numbers are this whole arrangement's, not a server's alone.

use std::hint::black_box;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use axum::serve::ListenerExt;
use idmint::{Segments, Tag};
use idmint_core::{Description, StartId, Step};
use idmint_proto::v1::id_mint_client::IdMintClient;
use idmint_proto::v1::id_mint_server::{IdMint, IdMintServer};
use idmint_proto::v1::{
    DecodeIdRequest, DecodeIdResponse, DecodeSnowflakeRequest, DecodeSnowflakeResponse,
    DecodeTsoRequest, DecodeTsoResponse, NextIdsRequest, NextIdsResponse, NextRangeRequest,
    NextRangeResponse, NextSequenceIdsRequest, NextSequenceIdsResponse, NextSnowflakeIdsRequest,
    NextSnowflakeIdsResponse, ReturnRangeRequest, ReturnRangeResponse, StreamIdsRequest,
    StreamIdsResponse, TsoRequest, TsoResponse,
};
use idmint_store::{MemoryStore, TagSpec};
use tokio::runtime::Runtime;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::{Request, Response, Status};

/// The tag every measurement takes from.
const TAG: &str = "bench";
/// Its step in the server's store (the server's adaptive step grows from it).
const TAG_STEP: u64 = 100_000;

/// Workers of the server's runtime: one per core, as `idmint serve` on this machine.
const SERVER_WORKERS: usize = 2;
/// Workers of the client's runtime (its lease calls and refills); the taking thread is
/// the benchmark's main thread, outside it.
const CLIENT_WORKERS: usize = 1;
/// Workers of the gRPC load generator's runtime (as wrk's `-t2` in the HTTP half).
const LOAD_WORKERS: usize = 2;

/// Warm-up of the client's loops: its first leases are small until it has measured a rate.
const CLIENT_WARM_UP: Duration = Duration::from_secs(2);
/// Measured time of the client's per-handle loops and the floor.
const CLIENT_MEASURED: Duration = Duration::from_secs(4);
/// Warm-up and measured time of the context rows (the library, the by-name call).
const CONTEXT_WARM_UP: Duration = Duration::from_secs(1);
const CONTEXT_MEASURED: Duration = Duration::from_secs(3);
/// Takes between two clock reads of a loop.
const BATCH: u64 = 1 << 16;
/// Longest a `try_next_id` loop spins on an empty buffer before the run fails.
const DRY_SPELL_MAX: Duration = Duration::from_secs(5);

/// gRPC requests in flight at once (wrk's `-c32` in the HTTP half); below the server's
/// default limit per client address (64), so none is refused.
const GRPC_IN_FLIGHT: usize = 32;
/// HTTP/2 connections they share.
const GRPC_CONNECTIONS: usize = 2;
const GRPC_WARM_UP: Duration = Duration::from_secs(1);
const GRPC_MEASURED: Duration = Duration::from_secs(3);
/// Rounds of each gRPC measurement, idmint and the bare service alternating.
const GRPC_ROUNDS: u32 = 2;
/// Ids per request of the two gRPC rounds.
const GRPC_COUNTS: [u64; 2] = [1, 1_000];

/// Issue 9's target for the client's per-id path: 10 × Tinyid's published client figure.
const CLIENT_TARGET_IDS_PER_S: f64 = 100e6;

const _: () = assert!(GRPC_IN_FLIGHT.is_multiple_of(GRPC_CONNECTIONS));

fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; `cargo test --benches` does not, and a minute of load
    // is not a test.
    if !std::env::args().any(|arg| arg == "--bench") {
        println!(
            "client_grpc: a benchmark; run it with `cargo bench -p idmint-client --bench client_grpc`"
        );
        return Ok(());
    }
    let server_runtime = runtime("server", SERVER_WORKERS)?;
    let client_runtime = runtime("client", CLIENT_WORKERS)?;
    let load_runtime = runtime("load", LOAD_WORKERS)?;
    let idmint = server_runtime.block_on(Server::idmint()).context("starting idmint")?;
    let bare = server_runtime.block_on(Server::bare()).context("starting the bare service")?;
    println!(
        "idmint at {} (MemoryStore, tag {TAG} step {TAG_STEP}), bare gRPC counter at {}",
        idmint.url, bare.url
    );

    let taken = in_process(&client_runtime, &idmint)?;
    let mut loads = Vec::new();
    for round in 1..=GRPC_ROUNDS {
        for count in GRPC_COUNTS {
            for (name, server) in [("idmint", &idmint), ("bare", &bare)] {
                let load = grpc_load(&load_runtime, &server.url, count)
                    .with_context(|| format!("gRPC load on {name}, count {count}"))?;
                println!(
                    "  gRPC round {round}, {name}, count {count}: {:.0} req/s",
                    load.requests_per_s()
                );
                loads.push((name, count, load));
            }
        }
    }
    server_runtime.block_on(async {
        idmint.stop().await?;
        bare.stop().await
    })?;

    print_in_process(&taken);
    print_grpc(&loads);
    Ok(())
}

/// One in-process loop's result.
struct Taken {
    name: &'static str,
    what: &'static str,
    tally: Tally,
    seconds: f64,
}

impl Taken {
    fn ids_per_s(&self) -> f64 {
        self.tally.ids as f64 / self.seconds
    }
}

/// Runs the in-process loops on this thread, in order; the client is connected after the
/// library row and closed after its rows.
fn in_process(client_runtime: &Runtime, idmint: &Server) -> anyhow::Result<Vec<Taken>> {
    let mut taken = Vec::new();
    let counter = Arc::new(AtomicU64::new(0));
    let counter = black_box(&counter);
    taken.push(measure(
        "fetch_add",
        "bare `AtomicU64::fetch_add(1)` (floor)",
        CLIENT_WARM_UP,
        CLIENT_MEASURED,
        |tally| {
            for _ in 0..BATCH {
                tally.id(counter.fetch_add(1, Ordering::Relaxed) + 1);
            }
            Ok(())
        },
    )?);

    let segments = idmint.segments.as_ref().context("the idmint server has its segments")?;
    let generator = segments.generator(&Tag::parse(TAG)?)?;
    taken.push(measure(
        "library try_next_id",
        "the server's `TagGenerator::try_next_id` (library, local memory store)",
        CONTEXT_WARM_UP,
        CONTEXT_MEASURED,
        |tally| {
            for _ in 0..BATCH {
                tally.take(|| generator.try_next_id())?;
            }
            Ok(())
        },
    )?);

    taken.push(measure(
        "library next_id",
        "the server's `TagGenerator::next_id().await` (library, local memory store)",
        CONTEXT_WARM_UP,
        CONTEXT_MEASURED,
        |tally| {
            client_runtime.block_on(async {
                for _ in 0..BATCH {
                    tally.id(generator.next_id().await?);
                }
                Ok(())
            })
        },
    )?);

    let client = client_runtime
        .block_on(idmint_client::Client::connect([idmint.url.as_str()]))
        .context("connecting the client")?;
    let ids = client.tag(TAG)?;
    taken.push(measure(
        "client try_next_id",
        "`TagIds::try_next_id()` (sync)",
        CLIENT_WARM_UP,
        CLIENT_MEASURED,
        |tally| {
            for _ in 0..BATCH {
                tally.take(|| ids.try_next_id())?;
            }
            Ok(())
        },
    )?);
    taken.push(measure(
        "client next_id",
        "`TagIds::next_id().await` (`block_on` per 65 536 ids)",
        CLIENT_WARM_UP,
        CLIENT_MEASURED,
        |tally| {
            client_runtime.block_on(async {
                for _ in 0..BATCH {
                    tally.id(ids.next_id().await?);
                }
                Ok(())
            })
        },
    )?);
    taken.push(measure(
        "client next_id by name",
        "`Client::next_id(\"bench\").await` (tag parsed and looked up per id)",
        CONTEXT_WARM_UP,
        CONTEXT_MEASURED,
        |tally| {
            client_runtime.block_on(async {
                for _ in 0..BATCH {
                    tally.id(client.next_id(TAG).await?);
                }
                Ok(())
            })
        },
    )?);
    client_runtime.block_on(client.close());
    Ok(taken)
}

/// Calls `batch` (a loop of [`BATCH`] takes) for `warm_up`, then for `measured`, and
/// answers what the measured batches took.
fn measure(
    name: &'static str,
    what: &'static str,
    warm_up: Duration,
    measured: Duration,
    mut batch: impl FnMut(&mut Tally) -> anyhow::Result<()>,
) -> anyhow::Result<Taken> {
    let mut tally = Tally::default();
    let warm_end = Instant::now() + warm_up;
    while Instant::now() < warm_end {
        batch(&mut tally)?;
    }
    let before = tally;
    let begin = Instant::now();
    loop {
        batch(&mut tally)?;
        let elapsed = begin.elapsed();
        if elapsed >= measured {
            let tally = tally.since(&before);
            let taken = Taken { name, what, tally, seconds: elapsed.as_secs_f64() };
            println!("  {name}: {:.1} M ids/s", taken.ids_per_s() / 1e6);
            return Ok(taken);
        }
    }
}

/// What one loop took: ids (each checked to be above the last), and the spells the buffer
/// was empty (a `try_next_id` answered `None`): how many, and their total time.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    last: u64,
    ids: u64,
    dry_spells: u64,
    dry: Duration,
}

impl Tally {
    #[inline(always)]
    fn id(&mut self, id: u64) {
        assert!(id > self.last, "ids went back: {id} after {}", self.last);
        self.last = id;
        self.ids += 1;
    }

    /// One id from `take`, spinning while it answers `None`.
    #[inline(always)]
    fn take(&mut self, take: impl Fn() -> Option<u64>) -> anyhow::Result<()> {
        match take() {
            Some(id) => {
                self.id(id);
                Ok(())
            }
            None => self.dry_spell(take),
        }
    }

    /// Spins on `take` until it answers an id, for at most [`DRY_SPELL_MAX`].
    #[cold]
    #[inline(never)]
    fn dry_spell(&mut self, take: impl Fn() -> Option<u64>) -> anyhow::Result<()> {
        let start = Instant::now();
        self.dry_spells += 1;
        loop {
            std::hint::spin_loop();
            if let Some(id) = take() {
                self.dry += start.elapsed();
                self.id(id);
                return Ok(());
            }
            ensure!(start.elapsed() < DRY_SPELL_MAX, "no id for {DRY_SPELL_MAX:?}");
        }
    }

    fn since(&self, before: &Tally) -> Tally {
        Tally {
            last: self.last,
            ids: self.ids - before.ids,
            dry_spells: self.dry_spells - before.dry_spells,
            dry: self.dry - before.dry,
        }
    }
}

/// One gRPC round's result.
struct Load {
    requests: u64,
    ids: u64,
    seconds: f64,
}

impl Load {
    fn requests_per_s(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    fn ids_per_s(&self) -> f64 {
        self.ids as f64 / self.seconds
    }
}

/// [`GRPC_IN_FLIGHT`] tasks call `NextIds(TAG, count)` on `url` in a loop over
/// [`GRPC_CONNECTIONS`] connections; answers completed in the measured window count.
fn grpc_load(runtime: &Runtime, url: &str, count: u64) -> anyhow::Result<Load> {
    runtime.block_on(async {
        let mut channels = Vec::with_capacity(GRPC_CONNECTIONS);
        for _ in 0..GRPC_CONNECTIONS {
            let endpoint = tonic::transport::Endpoint::from_shared(url.to_string())?;
            channels.push(endpoint.connect().await.context("gRPC connect")?);
        }
        let begin = Instant::now() + GRPC_WARM_UP;
        let end = begin + GRPC_MEASURED;
        let tasks: Vec<JoinHandle<anyhow::Result<(u64, u64)>>> = (0..GRPC_IN_FLIGHT)
            .map(|i| {
                let mut grpc = IdMintClient::new(channels[i % GRPC_CONNECTIONS].clone());
                tokio::spawn(async move {
                    let (mut last, mut requests, mut ids) = (0u64, 0u64, 0u64);
                    loop {
                        let request = NextIdsRequest { tag: TAG.to_string(), count };
                        let answer = grpc.next_ids(request).await?.into_inner();
                        let done = Instant::now();
                        ensure!(
                            answer.ids.len() as u64 == count,
                            "{} ids, not {count}",
                            answer.ids.len()
                        );
                        for id in answer.ids {
                            ensure!(id > last, "ids went back: {id} after {last}");
                            last = id;
                        }
                        if done >= end {
                            return Ok((requests, ids));
                        }
                        if done >= begin {
                            requests += 1;
                            ids += count;
                        }
                    }
                })
            })
            .collect();
        let mut load = Load { requests: 0, ids: 0, seconds: GRPC_MEASURED.as_secs_f64() };
        for task in tasks {
            let (requests, ids) = task.await??;
            load.requests += requests;
            load.ids += ids;
        }
        Ok(load)
    })
}

/// A server on 127.0.0.1:0 and how to stop it.
struct Server {
    url: String,
    /// The library on the idmint server's store, for the library row; `None` for the bare
    /// service.
    segments: Option<Arc<Segments>>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<io::Result<()>>,
}

impl Server {
    /// idmint over a fresh memory store, with tag [`TAG`].
    async fn idmint() -> anyhow::Result<Server> {
        let config = idmint::NodeConfig::new(idmint_store::StoreUrl::Memory);
        let store = Arc::new(MemoryStore::new());
        let node = idmint::NodeBuilder::new(config).segment_store(store.clone()).start().await?;
        let node = Arc::new(node);
        let spec = TagSpec {
            tag: Tag::parse(TAG)?,
            step: Step::new(TAG_STEP)?,
            start: Some(StartId::DEFAULT),
            force: false,
            description: Description::new("client_grpc benchmark")?,
        };
        node.create_tag(&spec).await?;
        // The library row's engine: the server's code on the server's store.
        let segments = Segments::start(store, idmint::segment::SegmentConfig::default())?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let state = idmint_server::AppState::new(node);
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let task = tokio::spawn(idmint_server::serve(listener, state, shutdown));
        Ok(Server { url: url(address), segments: Some(segments), stop, task })
    }

    /// The bare `IdMint` service on axum, as idmint mounts its own, without its middleware.
    async fn bare() -> anyhow::Result<Server> {
        let service = IdMintServer::new(BareCounter { counter: AtomicU64::new(0) });
        let router = axum::Router::new().route_service(idmint_server::GRPC_ROUTE, service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        // As idmint's listener does: small answers go out at once.
        let listener = listener.tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            let _ = stopped.await;
        };
        let task = tokio::spawn(async move {
            axum::serve(listener, router).with_graceful_shutdown(shutdown).await
        });
        Ok(Server { url: url(address), segments: None, stop, task })
    }

    async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(());
        Ok(self.task.await??)
    }
}

fn url(address: SocketAddr) -> String {
    format!("http://{address}")
}

/// The gRPC floor: `NextIds` answers `count` ids from an `AtomicU64`; nothing else is
/// served.
struct BareCounter {
    counter: AtomicU64,
}

type Answer<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl IdMint for BareCounter {
    async fn next_ids(&self, request: Request<NextIdsRequest>) -> Answer<NextIdsResponse> {
        let NextIdsRequest { tag, count } = request.into_inner();
        let first = self.counter.fetch_add(count, Ordering::Relaxed) + 1;
        Ok(Response::new(NextIdsResponse {
            tag,
            ids: (first..first + count).collect(),
            texts: Vec::new(),
        }))
    }

    async fn next_range(&self, _: Request<NextRangeRequest>) -> Answer<NextRangeResponse> {
        Err(Status::unimplemented("bare counter"))
    }

    async fn return_range(&self, _: Request<ReturnRangeRequest>) -> Answer<ReturnRangeResponse> {
        Err(Status::unimplemented("bare counter"))
    }

    async fn next_snowflake_ids(
        &self,
        _: Request<NextSnowflakeIdsRequest>,
    ) -> Answer<NextSnowflakeIdsResponse> {
        Err(Status::unimplemented("bare counter"))
    }

    async fn next_sequence_ids(
        &self,
        _: Request<NextSequenceIdsRequest>,
    ) -> Answer<NextSequenceIdsResponse> {
        Err(Status::unimplemented("bare counter"))
    }

    type StreamIdsStream =
        Pin<Box<dyn futures_util::Stream<Item = Result<StreamIdsResponse, Status>> + Send>>;

    async fn stream_ids(&self, _: Request<StreamIdsRequest>) -> Answer<Self::StreamIdsStream> {
        Err(Status::unimplemented("bare counter"))
    }

    async fn decode_snowflake(
        &self,
        _: Request<DecodeSnowflakeRequest>,
    ) -> Answer<DecodeSnowflakeResponse> {
        Err(Status::unimplemented("bare counter"))
    }

    async fn decode_id(&self, _: Request<DecodeIdRequest>) -> Answer<DecodeIdResponse> {
        Err(Status::unimplemented("bare counter"))
    }

    async fn tso(&self, _: Request<TsoRequest>) -> Answer<TsoResponse> {
        Err(Status::unimplemented("bare counter"))
    }

    async fn decode_tso(&self, _: Request<DecodeTsoRequest>) -> Answer<DecodeTsoResponse> {
        Err(Status::unimplemented("bare counter"))
    }
}

fn runtime(name: &str, workers: usize) -> io::Result<Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name(name)
        .enable_all()
        .build()
}

fn print_in_process(taken: &[Taken]) {
    let floor = taken.first().map_or(f64::NAN, Taken::ids_per_s);
    println!();
    println!(
        "In process, 1 taking thread ({} s measured after a warm-up):",
        CLIENT_MEASURED.as_secs()
    );
    println!();
    println!("| variant | what it measures | ids/s | ratio to `fetch_add` | buffer empty |");
    println!("|---|---|---:|---:|---|");
    for t in taken {
        let dry = match t.tally.dry_spells {
            0 => "–".to_string(),
            spells => format!(
                "{spells} times, {:.1} % of the time",
                100.0 * t.tally.dry.as_secs_f64() / t.seconds
            ),
        };
        println!(
            "| `{}` | {} | {:.1} M | {:.2} | {dry} |",
            t.name,
            t.what,
            t.ids_per_s() / 1e6,
            t.ids_per_s() / floor,
        );
    }
    for t in taken.iter().filter(|t| t.name.starts_with("client")) {
        let verdict = if t.ids_per_s() >= CLIENT_TARGET_IDS_PER_S { "met" } else { "NOT met" };
        println!(
            "target ≥ {:.0} M ids/s, `{}`: {:.1} M, {verdict}",
            CLIENT_TARGET_IDS_PER_S / 1e6,
            t.name,
            t.ids_per_s() / 1e6
        );
    }
}

fn print_grpc(loads: &[(&str, u64, Load)]) {
    println!();
    println!(
        "gRPC NextIds, {GRPC_IN_FLIGHT} in flight over {GRPC_CONNECTIONS} connections ({GRPC_ROUNDS} \
         rounds of {} s, alternating):",
        GRPC_MEASURED.as_secs()
    );
    println!();
    println!(
        "| count | idmint req/s | idmint ids/s (mean) | bare counter req/s | bare counter ids/s (mean) | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|---:|");
    for count in GRPC_COUNTS {
        let of = |name: &str| -> Vec<&Load> {
            loads.iter().filter(|(n, c, _)| *n == name && *c == count).map(|(_, _, l)| l).collect()
        };
        let (idmint, bare) = (of("idmint"), of("bare"));
        let rounds = |loads: &[&Load]| -> String {
            let rates: Vec<String> =
                loads.iter().map(|l| format!("{:.0}", l.requests_per_s())).collect();
            rates.join(", ")
        };
        let ids = |loads: &[&Load]| -> f64 {
            loads.iter().map(|l| l.ids_per_s()).sum::<f64>() / loads.len() as f64
        };
        let requests = |loads: &[&Load]| -> u64 { loads.iter().map(|l| l.requests).sum() };
        println!(
            "| {count} | {} | {:.0} | {} | {:.0} | {:.2} |",
            rounds(&idmint),
            ids(&idmint),
            rounds(&bare),
            ids(&bare),
            requests(&idmint) as f64 / requests(&bare) as f64,
        );
    }
}
