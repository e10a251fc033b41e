//! The worker suite: what every `WorkerStore` backend must do (leases with fencing tokens and
//! time marks, store-assigned ids), written once against the trait and instantiated per
//! backend with [`worker_suite!`] in the modules at the end of this file, beside the checks
//! only one backend can make.
//!
//! **Time.** Lease expiry is the store's to judge, by its own clock, which the checks cannot
//! set: they read it ([`LeaseStore::now_ms`]) to bracket the expiries the store writes, and
//! move it through [`RowTamper::age_rows`], which makes a space's rows as old as they would
//! be that much later (the database servers: every expiry moved back; memory and SQLite: their
//! injected clock moved on). Boundaries are checked [`SLACK_MS`] either side, since a
//! server's clock keeps running between two statements. Time marks are the caller's time, as
//! ids are: plain numbers around [`T0`].
//!
//! Two checks also delete or restore lease rows as an operator or a backup restore would,
//! under a live holder. The checks that need a [`RowTamper`] instantiate only where the
//! backend's module gives one ([`worker_suite!`]'s second argument).
//!
//! The worker tables have fixed names, so on MySQL and PostgreSQL every check of a run shares
//! them (in the run's fresh database). Checks therefore keep to spaces of their own, named
//! after the check; `assign_worker_…` is the only check that assigns ids, so the database's
//! one assignment sequence is its alone.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;

use idmint_store::{
    ASSIGN_WORKER_ID_MAX, AssignRequest, HOLDER_LEN_MAX, LEASE_MARGIN_MS_MAX, LEASE_TTL_MS_MAX,
    LEASE_WORKER_ID_MAX, Lease, LeaseRecord, LeaseRequest, StoreError, WORKER_SPACE_LEN_MAX,
    WORKER_TIME_MS_MAX, WorkerSpace, WorkerStore,
};

/// The suite's runner: one check on a fresh subject's store.
pub use crate::conformance::run;

/// The caller's time the marks are written around, in milliseconds since the Unix epoch.
const T0: u64 = 1_700_000_000_000;
/// Below every token a store draws: its clock in microseconds, past `T0`.
const TOKEN_FLOOR: u64 = T0 * 1_000;
/// The lease every check asks for.
const TTL_MS: u64 = 10_000;
/// The safety margin every check asks for.
const MARGIN_MS: u64 = 4_000;
/// How far from a boundary of the store's time a check stays: more than a server's clock can
/// run between a check's statements on a loaded machine.
const SLACK_MS: u64 = 2_000;
/// Aging that leaves a fresh lease expired, but within its margin.
const WITHIN_MARGIN_MS: u64 = TTL_MS + MARGIN_MS - SLACK_MS;
/// Aging that makes a fresh lease's id reusable.
const REUSABLE_AFTER_MS: u64 = TTL_MS + MARGIN_MS + SLACK_MS;
/// The latest time mark every request accepts: marks at or below it are ordinary.
const MARK_MAX_MS: u64 = T0 + 60_000;
/// How far the store's clock may read from this machine's in
/// [`the_stores_clock_reads_utc_milliseconds`].
const CLOCK_AGREEMENT_MS_MAX: u64 = 60_000;
/// Concurrent acquirers in the exhaustion check: one per id of a 4-bit layout.
const ACQUIRER_COUNT: u64 = 16;
/// Ids held by the paging check: more than one page of the database backends' walk (256).
const HELD_PAST_A_PAGE: u64 = 300;
/// Tasks acquiring them.
const PAGING_TASK_COUNT: u64 = 10;

const _: () = assert!(HELD_PAST_A_PAGE.is_multiple_of(PAGING_TASK_COUNT));
const _: () = assert!(SLACK_MS < MARGIN_MS && SLACK_MS < TTL_MS);

/// A worker store under test, with whatever must live as long as it does.
pub type WorkerSubject = crate::conformance::Subject<dyn WorkerStore>;

/// What an operator, a restore or the passing of time does to lease rows behind the store's
/// back.
#[async_trait]
pub trait RowTamper: Send + Sync {
    /// Deletes every lease row of `space`, as `DELETE FROM idmint_workers` would.
    async fn delete_rows(&self, space: &WorkerSpace);
    /// Every lease row of `space` as it stands, as a backup keeps it.
    async fn snapshot_rows(&self, space: &WorkerSpace) -> Box<dyn Any + Send + Sync>;
    /// Replaces the lease rows of `space` by those of `snapshot`, as a restore would.
    async fn restore_rows(&self, space: &WorkerSpace, snapshot: &(dyn Any + Send + Sync));
    /// Makes the lease rows of `space` as old as they will be `ms` later by the store's
    /// clock: every expiry `ms` earlier (or the store's injected clock `ms` on).
    async fn age_rows(&self, space: &WorkerSpace, ms: u64);
}

/// Generates one `#[tokio::test]` per worker check in the calling module (the test kit's
/// [`idmint_testkit::suite!`] over this module's checks).
///
/// `$tampered`, when given, is an `async fn() -> Option<(WorkerSubject, Arc<dyn
/// RowTamper>)>`: a fresh store and a way to change its rows and its time behind its back,
/// for the checks of expiry and of rows deleted or restored.
///
/// `$factory` is an `async fn() -> Option<WorkerSubject>`: a store on which the check's own
/// spaces are empty, or `None` when the backend cannot run here (the test kit has recorded
/// the skip for the run's summary).
macro_rules! worker_suite {
    ($factory:path, $tampered:path) => {
        $crate::workers::worker_suite!($factory);
        idmint_testkit::suite! {
            checks: crate::workers, runner: run_tampered, subject: $tampered,
            tests: [
                leases_stay_inside_the_requested_range,
                concurrent_takeovers_give_each_expired_id_once,
                acquisition_walks_past_a_page_of_held_ids,
                acquisition_passes_over_ids_marked_ahead_of_the_clock,
                renew_extends_the_lease_and_never_shortens_it,
                renew_after_expiry_is_lease_lost,
                an_expired_id_is_reused_only_after_the_margin,
                release_frees_the_id_after_the_margin,
                raise_mark_only_grows,
                rows_deleted_under_a_live_holder,
                rows_restored_from_an_older_snapshot,
            ],
        }
    };
    ($factory:path) => {
        idmint_testkit::suite! {
            checks: crate::workers, runner: run, subject: $factory,
            tests: [
                acquirers_get_the_lowest_free_ids,
                concurrent_acquirers_get_distinct_ids_until_exhausted,
                a_live_lease_is_never_taken_by_a_caller_whose_marks_run_ahead,
                the_stores_clock_reads_utc_milliseconds,
                assign_worker_gives_increasing_ids_and_refuses_past_max,
                spaces_are_independent,
                invalid_requests_are_refused_and_nothing_is_written,
            ],
        }
    };
}
pub(crate) use worker_suite;

/// Runs one tampering check on the subject's store and its tamperer, then releases the
/// subject.
pub async fn run_tampered<F: Future<Output = ()>>(
    (subject, tamper): (WorkerSubject, Arc<dyn RowTamper>),
    check: impl FnOnce(Arc<dyn WorkerStore>, Arc<dyn RowTamper>) -> F,
) {
    check(Arc::clone(&subject.store), tamper).await;
    drop(subject);
}

/// Successive acquirers get the lowest free ids, 0 then 1 then 2, each a fresh lease: a token
/// from the store's clock, above the one before, no time mark, expiring one TTL after the
/// store's clock read it; the rows record their holders.
pub async fn acquirers_get_the_lowest_free_ids(store: Arc<dyn WorkerStore>) {
    let space = space("lowest");
    let mut last_token = 0;
    for (worker_id, holder) in ["a:1/1", "b:2/2", "c:3/3"].into_iter().enumerate() {
        let before = store_now(&store).await;
        let lease = store.acquire_lease(&request(&space, 15, holder)).await.unwrap();
        let after = store_now(&store).await;
        assert_expires_one_ttl_after(lease.expires_ms, before, after);
        assert_token_from_the_clock(lease.token, before, after);
        assert!(lease.token > last_token, "{lease:?} after token {last_token}");
        last_token = lease.token;
        let expected = Lease {
            space: space.clone(),
            worker_id: worker_id as u64,
            token: lease.token,
            holder_id: lease.holder_id,
            expires_ms: lease.expires_ms,
            mark: 0,
        };
        assert_eq!(lease, expected);
        assert_eq!(store.list_leases(&space).await.unwrap()[worker_id], record_of(&lease, holder));
    }
    let listed = store.list_leases(&space).await.unwrap();
    let holders: Vec<_> = listed.iter().map(|r| (r.worker_id, r.holder.as_str())).collect();
    assert_eq!(holders, [(0, "a:1/1"), (1, "b:2/2"), (2, "c:3/3")]);
    assert!(listed.iter().all(|r| r.token >= TOKEN_FLOOR && r.mark == 0));
}

/// Sixteen nodes acquiring a 4-bit space at once get the sixteen ids, each once; the
/// seventeenth is refused as exhausted.
pub async fn concurrent_acquirers_get_distinct_ids_until_exhausted(store: Arc<dyn WorkerStore>) {
    let space = space("crowd");
    let max = ACQUIRER_COUNT - 1;
    let leases = acquire_concurrently(&store, &space, max, ACQUIRER_COUNT, 1).await;
    let ids: BTreeSet<u64> = leases.iter().map(|l| l.worker_id).collect();
    assert_eq!(ids, (0..=max).collect(), "{leases:?}");
    assert!(leases.iter().all(|l| l.token >= TOKEN_FLOOR), "{leases:?}");

    let refused = store.acquire_lease(&request(&space, max, "late")).await;
    assert_eq!(refused, Err(StoreError::WorkersExhausted { space: space.clone(), max }));
    assert_eq!(store.list_leases(&space).await.unwrap().len() as u64, ACQUIRER_COUNT);
}

/// Issue 31: whether a lease expired is the store's to say, so a request carries no clock of
/// the caller's. A caller whose marks run a minute ahead (what a node whose clock runs fast
/// accepts) never takes a live lease over; the holder still renews it. That a fast node
/// cannot take a live lease end to end is `idmint`'s
/// `a_node_whose_clock_runs_fast_cannot_take_a_live_nodes_lease`.
pub async fn a_live_lease_is_never_taken_by_a_caller_whose_marks_run_ahead(
    store: Arc<dyn WorkerStore>,
) {
    let space = space("live");
    let holder = store.acquire_lease(&request(&space, 1, "holder")).await.unwrap();
    let fast = LeaseRequest { mark_max: MARK_MAX_MS + 60_000, ..request(&space, 1, "fast") };
    let other = store.acquire_lease(&fast).await.unwrap();
    assert_eq!((holder.worker_id, other.worker_id), (0, 1));
    assert_eq!(
        store.acquire_lease(&fast).await,
        Err(StoreError::WorkersExhausted { space: space.clone(), max: 1 })
    );
    let renewed = store.renew_lease(&holder, TTL_MS).await.unwrap();
    assert_eq!((renewed.worker_id, renewed.token), (0, holder.token));
}

/// The store's clock is milliseconds since the Unix epoch in UTC: within
/// [`CLOCK_AGREEMENT_MS_MAX`] of this machine's (the test servers keep time as any host
/// does; an hour off would be a local time taken for UTC), and it does not go back between
/// two reads. (The MySQL expression is arithmetic on `UTC_TIMESTAMP(6)`, so a session's time
/// zone plays no part; sqlx sets the session to UTC anyway, so this test could not show it.)
pub async fn the_stores_clock_reads_utc_milliseconds(store: Arc<dyn WorkerStore>) {
    let local = idmint_store::StoreClock::now_ms(&idmint_store::LocalClock);
    let first = store_now(&store).await;
    let second = store_now(&store).await;
    assert!(local.abs_diff(first) < CLOCK_AGREEMENT_MS_MAX, "store {first} ms, here {local} ms");
    assert!(second >= first, "the store's clock went back: {first} then {second}");
}

/// A node configured with a worker-id range (`snowflake.worker_ids`, for Leaf or
/// uid-generator nodes beside idmint) takes ids inside it only: `k` nodes racing for a range
/// of `k` ids get the `k` ids, each once, the next is refused with
/// [`StoreError::NoWorkerIdInRange`], and the free rows outside the range (left by an earlier
/// configuration, expired long ago) are never taken. A range starting above its end is
/// refused before the store is asked.
pub async fn leases_stay_inside_the_requested_range(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("ranged");
    // An earlier configuration held ids 0..=9; all of them are free again after aging.
    for worker_id in 0..=9 {
        let lease = store.acquire_lease(&request(&space, 15, "earlier")).await.unwrap();
        assert_eq!(lease.worker_id, worker_id);
    }
    tamper.age_rows(&space, REUSABLE_AFTER_MS).await;
    let (min, max) = (8, 11);
    let ranged = |holder: &str| LeaseRequest { min_worker: min, ..request(&space, max, holder) };
    let tasks: Vec<_> = (0..=max - min)
        .map(|task| {
            let store = Arc::clone(&store);
            let req = ranged(&format!("ranged-{task}"));
            tokio::spawn(async move { store.acquire_lease(&req).await.unwrap() })
        })
        .collect();
    let mut ids = BTreeSet::new();
    for task in tasks {
        ids.insert(task.await.unwrap().worker_id);
    }
    assert_eq!(ids, (min..=max).collect(), "the range's ids, each once");
    let refused = store.acquire_lease(&ranged("one-too-many")).await;
    assert_eq!(refused, Err(StoreError::NoWorkerIdInRange { space: space.clone(), min, max }));
    let message = refused.unwrap_err().to_string();
    assert!(message.contains("no worker id left in range 8-11"), "{message}");
    let listed = store.list_leases(&space).await.unwrap();
    let below: Vec<_> = listed.iter().filter(|r| r.worker_id < min).collect();
    assert!(below.iter().all(|r| r.holder == "earlier" && r.token >= TOKEN_FLOOR), "{below:?}");
    assert!(listed.iter().all(|r| r.worker_id <= max), "{listed:?}");
    let upside_down = LeaseRequest { min_worker: 5, ..request(&space, 4, "x") };
    assert!(matches!(
        store.acquire_lease(&upside_down).await,
        Err(StoreError::InvalidValue(m)) if m.contains("min_worker 5 is above max_worker 4")
    ));
}

/// Nodes racing for expired ids take each over exactly once: every id goes to one of them
/// with a larger token and its previous owner's time mark.
pub async fn concurrent_takeovers_give_each_expired_id_once(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("takeover-race");
    let max = 7;
    let mut old_tokens = Vec::new();
    for worker_id in 0..=max {
        let lease = store.acquire_lease(&request(&space, max, "old")).await.unwrap();
        assert_eq!(lease.worker_id, worker_id);
        store.raise_mark(&lease, mark_of(worker_id)).await.unwrap();
        old_tokens.push(lease.token);
    }
    tamper.age_rows(&space, REUSABLE_AFTER_MS).await;
    let leases = acquire_concurrently(&store, &space, max, max + 1, 1).await;
    let ids: BTreeSet<u64> = leases.iter().map(|l| l.worker_id).collect();
    assert_eq!(ids, (0..=max).collect(), "{leases:?}");
    for lease in &leases {
        assert_eq!(lease.mark, mark_of(lease.worker_id), "{lease:?}");
        assert!(lease.token > old_tokens[lease.worker_id as usize], "{lease:?} {old_tokens:?}");
    }
    let refused = store.acquire_lease(&request(&space, max, "late")).await;
    assert_eq!(refused, Err(StoreError::WorkersExhausted { space: space.clone(), max }));
}

/// With more ids held than one page of the database backends' walk, the lowest free id is
/// still found, whether it is expired among the held ones or the first never held.
pub async fn acquisition_walks_past_a_page_of_held_ids(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("paging");
    let max = 511;
    let per_task = HELD_PAST_A_PAGE / PAGING_TASK_COUNT;
    let mut leases = acquire_concurrently(&store, &space, max, PAGING_TASK_COUNT, per_task).await;
    leases.sort_by_key(|l| l.worker_id);
    let ids: Vec<u64> = leases.iter().map(|l| l.worker_id).collect();
    assert_eq!(ids, (0..HELD_PAST_A_PAGE).collect::<Vec<_>>());

    // Every lease but one is renewed after half the TTL: only id 270 expires.
    let expiring = 270;
    tamper.age_rows(&space, TTL_MS / 2).await;
    for lease in leases.iter().filter(|l| l.worker_id != expiring) {
        store.renew_lease(lease, TTL_MS + REUSABLE_AFTER_MS).await.unwrap();
    }
    tamper.age_rows(&space, REUSABLE_AFTER_MS).await;
    let taken = store.acquire_lease(&request(&space, max, "taker")).await.unwrap();
    assert_eq!(taken.worker_id, expiring);
    assert!(taken.token > leases[expiring as usize].token, "{taken:?}");
    let fresh = store.acquire_lease(&request(&space, max, "fresh")).await.unwrap();
    assert_eq!(fresh.worker_id, HELD_PAST_A_PAGE);
    assert!(fresh.token > taken.token, "{fresh:?} after {taken:?}");
}

/// Free ids whose time mark a clock that jumped ahead left in the future are passed over for
/// a lower-marked one; when only such ids are free the request is refused, naming the
/// earliest mark, and nothing is written; once the caller's clock has passed a mark its id is
/// taken.
pub async fn acquisition_passes_over_ids_marked_ahead_of_the_clock(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("ahead");
    let day_ms = 86_400_000;
    let marks = [T0 + day_ms + 7, T0 + 1_000, T0 + day_ms, T0 + day_ms + 5];
    let mut first_tokens = Vec::new();
    for (worker_id, mark) in marks.into_iter().enumerate() {
        let lease = store.acquire_lease(&request(&space, 3, "jumped")).await.unwrap();
        assert_eq!(lease.worker_id, worker_id as u64);
        first_tokens.push(lease.token);
        store.raise_mark(&lease, mark).await.unwrap();
        store.release_lease(&lease).await.unwrap();
    }
    tamper.age_rows(&space, MARGIN_MS + SLACK_MS).await;
    let taken = store.acquire_lease(&request(&space, 3, "b")).await.unwrap();
    assert_eq!((taken.worker_id, taken.mark), (1, T0 + 1_000));
    assert!(taken.token > first_tokens[1], "{taken:?} {first_tokens:?}");

    let before = store.list_leases(&space).await.unwrap();
    let refused = store.acquire_lease(&request(&space, 3, "c")).await;
    let ahead = StoreError::WorkerMarksAhead {
        space: space.clone(),
        earliest_mark_ms: T0 + day_ms,
        mark_max: MARK_MAX_MS,
    };
    assert_eq!(refused, Err(ahead));
    assert_eq!(store.list_leases(&space).await.unwrap(), before, "a refusal wrote");

    let caught_up = LeaseRequest { mark_max: T0 + day_ms, ..request(&space, 3, "c") };
    let taken = store.acquire_lease(&caught_up).await.unwrap();
    assert_eq!((taken.worker_id, taken.mark), (2, T0 + day_ms));
    let held = store.acquire_lease(&request(&space, 3, "d")).await;
    assert!(matches!(held, Err(StoreError::WorkerMarksAhead { .. })), "{held:?}");
}

/// Renewing moves the expiry to one TTL after the store's clock, as stored; a renewal asking
/// for less than the lease already has leaves it, and a lease expiring in a moment (but not
/// yet) is still renewed.
pub async fn renew_extends_the_lease_and_never_shortens_it(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("renew");
    let lease = store.acquire_lease(&request(&space, 3, "a")).await.unwrap();

    let before = store_now(&store).await;
    let renewed = store.renew_lease(&lease, 3 * TTL_MS).await.unwrap();
    let after = store_now(&store).await;
    assert!(
        before + 3 * TTL_MS <= renewed.expires_ms && renewed.expires_ms <= after + 3 * TTL_MS,
        "{renewed:?} not 3 TTLs after {before}..={after}"
    );
    assert_eq!(renewed, Lease { expires_ms: renewed.expires_ms, ..lease.clone() });
    assert_eq!(only_row(&store, &space).await.expires_ms, renewed.expires_ms);

    let kept = store.renew_lease(&renewed, 1).await.unwrap();
    assert_eq!(kept, renewed, "a shorter renewal must not shorten the lease");
    assert_eq!(only_row(&store, &space).await.expires_ms, renewed.expires_ms);

    // Aged to within SLACK_MS of its expiry: still held, so renewed.
    tamper.age_rows(&space, 3 * TTL_MS - SLACK_MS).await;
    let before = store_now(&store).await;
    let last = store.renew_lease(&kept, TTL_MS).await.unwrap();
    let after = store_now(&store).await;
    assert_expires_one_ttl_after(last.expires_ms, before, after);
    assert_eq!((last.worker_id, last.token), (0, lease.token));
}

/// A renewal after expiry (by the store's clock) is refused as lost even though nobody took
/// the id, and changes nothing; so is every call with a lease whose token the row does not
/// hold.
pub async fn renew_after_expiry_is_lease_lost(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("expired");
    let lease = store.acquire_lease(&request(&space, 3, "a")).await.unwrap();
    tamper.age_rows(&space, TTL_MS + SLACK_MS).await;
    let before = only_row(&store, &space).await;
    let lost = Err(StoreError::LeaseLost { space: space.clone(), worker_id: 0 });

    assert_eq!(store.renew_lease(&lease, TTL_MS).await, lost);
    assert_eq!(only_row(&store, &space).await, before);

    // Leases no store made: another token, or values no row can hold.
    let forgeries = [
        Lease { token: lease.token + 1, ..lease.clone() },
        Lease { holder_id: lease.holder_id ^ 1, ..lease.clone() },
        Lease { token: u64::MAX, ..lease.clone() },
        Lease { worker_id: u64::MAX, ..lease.clone() },
    ];
    for forged in &forgeries {
        let lost = Err(StoreError::LeaseLost { space: space.clone(), worker_id: forged.worker_id });
        assert_eq!(store.renew_lease(forged, TTL_MS).await, lost, "{forged:?}");
        assert_eq!(store.raise_mark(forged, T0 + 1).await, lost.clone().map(drop));
        assert_eq!(store.release_lease(forged).await, lost.map(drop));
    }
    assert_eq!(only_row(&store, &space).await, before);
}

/// An expired id is not reused while within its margin after expiry (by the store's clock),
/// and is reused once past it, with a larger token and its previous owner's time mark; from
/// then on the previous owner's renewals, marks and release are refused as lost and change
/// nothing.
pub async fn an_expired_id_is_reused_only_after_the_margin(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("reuse");
    let old = store.acquire_lease(&request(&space, 3, "old")).await.unwrap();
    let mark = T0 + 3_000;
    store.raise_mark(&old, mark).await.unwrap();

    tamper.age_rows(&space, WITHIN_MARGIN_MS).await;
    let other = store.acquire_lease(&request(&space, 3, "other")).await.unwrap();
    assert_eq!(other.worker_id, 1, "id 0 was reused before its margin passed");

    tamper.age_rows(&space, REUSABLE_AFTER_MS - WITHIN_MARGIN_MS).await;
    let before = store_now(&store).await;
    let new = store.acquire_lease(&request(&space, 3, "new")).await.unwrap();
    let after = store_now(&store).await;
    assert_ne!(new.fence_token(), old.fence_token(), "a takeover must draw a new token");
    assert_expires_one_ttl_after(new.expires_ms, before, after);
    let expected = Lease {
        space: space.clone(),
        worker_id: 0,
        token: new.token,
        holder_id: new.holder_id,
        expires_ms: new.expires_ms,
        mark,
    };
    assert_eq!(new, expected);
    assert!(new.token > old.token, "{new:?} after {old:?}");
    let row = store.list_leases(&space).await.unwrap().remove(0);
    assert_eq!(row, record_of(&new, "new"));

    let lost = Err(StoreError::LeaseLost { space: space.clone(), worker_id: 0 });
    assert_eq!(store.renew_lease(&old, TTL_MS).await, lost);
    assert_eq!(store.raise_mark(&old, mark + 10_000).await, lost.clone().map(drop));
    assert_eq!(store.release_lease(&old).await, lost.map(drop));
    assert_eq!(store.list_leases(&space).await.unwrap().remove(0), row);

    let renewed = store.renew_lease(&new, TTL_MS).await.unwrap();
    assert_eq!((renewed.token, renewed.mark), (new.token, mark));
}

/// Releasing sets the expiry to the store's now (never later than it was) and keeps the time
/// mark; the id is reused once the margin after the release has passed, not before.
pub async fn release_frees_the_id_after_the_margin(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("release");
    let lease = store.acquire_lease(&request(&space, 3, "a")).await.unwrap();
    store.raise_mark(&lease, T0 + 500).await.unwrap();
    let before = store_now(&store).await;
    store.release_lease(&lease).await.unwrap();
    let after = store_now(&store).await;
    let row = only_row(&store, &space).await;
    assert_eq!((row.token, row.mark), (lease.token, T0 + 500));
    assert!((before..=after).contains(&row.expires_ms), "{row:?} not in {before}..={after}");
    // Releasing again, later, does not push the expiry back out.
    tamper.age_rows(&space, SLACK_MS).await;
    let aged = only_row(&store, &space).await.expires_ms;
    store.release_lease(&lease).await.unwrap();
    assert_eq!(only_row(&store, &space).await.expires_ms, aged);

    // Aged SLACK_MS so far: within the margin by as much.
    let early = store.acquire_lease(&request(&space, 3, "b")).await;
    assert_eq!(early.unwrap().worker_id, 1, "a released id was reused within the margin");
    tamper.age_rows(&space, MARGIN_MS).await;
    let reused = store.acquire_lease(&request(&space, 3, "c")).await.unwrap();
    assert_eq!((reused.worker_id, reused.mark), (0, T0 + 500));
    assert!(reused.token > lease.token, "{reused:?} after {lease:?}");
    let lost = Err(StoreError::LeaseLost { space: space.clone(), worker_id: 0 });
    assert_eq!(store.release_lease(&lease).await, lost);
}

/// The time mark takes the larger of its value and the one raised to; a renewal reports it,
/// and a takeover carries it over.
pub async fn raise_mark_only_grows(store: Arc<dyn WorkerStore>, tamper: Arc<dyn RowTamper>) {
    let space = space("marks");
    let lease = store.acquire_lease(&request(&space, 3, "a")).await.unwrap();
    for (raise, expected) in [(T0 + 500, T0 + 500), (T0 + 300, T0 + 500), (T0 + 700, T0 + 700)] {
        store.raise_mark(&lease, raise).await.unwrap();
        assert_eq!(only_row(&store, &space).await.mark, expected, "after raising to {raise}");
    }
    // Raising to the mark already held is accepted and changes nothing.
    store.raise_mark(&lease, T0 + 700).await.unwrap();
    let renewed = store.renew_lease(&lease, TTL_MS).await.unwrap();
    assert_eq!(renewed.mark, T0 + 700);

    tamper.age_rows(&space, REUSABLE_AFTER_MS).await;
    let next = store.acquire_lease(&request(&space, 3, "b")).await.unwrap();
    assert_eq!((next.worker_id, next.mark), (0, T0 + 700));
}

/// Assigned ids are distinct under concurrency and increase; once the next id would pass
/// `max_worker` the request is refused, and stays refused, with no id handed out. The ids
/// are one sequence shared by the spaces of a store.
pub async fn assign_worker_gives_increasing_ids_and_refuses_past_max(store: Arc<dyn WorkerStore>) {
    let space = space("assigned");
    let tasks: Vec<_> = (0..8)
        .map(|port| {
            let (store, req) = (Arc::clone(&store), assign(&space, ASSIGN_WORKER_ID_MAX, port));
            tokio::spawn(async move { store.assign_worker(&req).await.unwrap() })
        })
        .collect();
    let mut ids = BTreeSet::new();
    for task in tasks {
        ids.insert(task.await.unwrap());
    }
    assert_eq!(ids.len(), 8, "{ids:?}");
    assert!(ids.iter().all(|id| *id >= 1), "0 is never assigned: {ids:?}");

    let mut last = *ids.last().unwrap();
    let max = last + 3;
    let other = space_of("assigned-other");
    for _ in 0..3 {
        // Alternating spaces: the sequence is the store's, not the space's.
        let id = store.assign_worker(&assign(&other, max, 1)).await.unwrap();
        assert!(id > last && id <= max, "{id} after {last}, max {max}");
        last = id;
    }
    assert_eq!(last, max);
    for _ in 0..2 {
        assert_eq!(
            store.assign_worker(&assign(&space, max, 1)).await,
            Err(StoreError::WorkersExhausted { space: space.clone(), max })
        );
    }
    let id = store.assign_worker(&assign(&space, max + 10, 1)).await.unwrap();
    assert!(id > max && id <= max + 10, "{id}");
}

/// Leases of one space never affect another's, including spaces whose names differ only in
/// case: each starts at id 0, is exhausted on its own, and keeps its own marks.
pub async fn spaces_are_independent(store: Arc<dyn WorkerStore>) {
    let (upper, lower) = (space("Independent"), space("independent"));
    let a = store.acquire_lease(&request(&upper, 1, "a")).await.unwrap();
    let b = store.acquire_lease(&request(&lower, 1, "b")).await.unwrap();
    assert_eq!((a.worker_id, b.worker_id), (0, 0));
    store.raise_mark(&a, T0 + 900).await.unwrap();
    store.acquire_lease(&request(&upper, 1, "a2")).await.unwrap();
    assert_eq!(
        store.acquire_lease(&request(&upper, 1, "a3")).await,
        Err(StoreError::WorkersExhausted { space: upper.clone(), max: 1 })
    );
    let b2 = store.acquire_lease(&request(&lower, 1, "b2")).await.unwrap();
    assert_eq!(b2.worker_id, 1);

    let lower_rows = store.list_leases(&lower).await.unwrap();
    assert_eq!(lower_rows, [record_of(&b, "b"), record_of(&b2, "b2")]);
    assert_eq!(store.list_leases(&upper).await.unwrap()[0].mark, T0 + 900);
    assert_eq!(store.list_leases(&space("independent-unused")).await, Ok(Vec::new()));
}

/// Bad space names cannot be made, and requests outside the bounds are refused as invalid
/// before anything is written; the bounds themselves are accepted.
pub async fn invalid_requests_are_refused_and_nothing_is_written(store: Arc<dyn WorkerStore>) {
    for bad in ["", "has space", "quote'", "naïve", &"s".repeat(WORKER_SPACE_LEN_MAX + 1)] {
        assert!(invalid(WorkerSpace::parse(bad)), "space {bad:?} was accepted");
    }
    let space = space("invalid");
    let ok = request(&space, 3, "ok");
    let bad_requests = [
        LeaseRequest { max_worker: LEASE_WORKER_ID_MAX + 1, ..ok.clone() },
        LeaseRequest { ttl_ms: 0, ..ok.clone() },
        LeaseRequest { ttl_ms: LEASE_TTL_MS_MAX + 1, ..ok.clone() },
        LeaseRequest { margin_ms: LEASE_MARGIN_MS_MAX + 1, ..ok.clone() },
        LeaseRequest { mark_max: WORKER_TIME_MS_MAX + 1, ..ok.clone() },
        LeaseRequest { holder: "h".repeat(HOLDER_LEN_MAX + 1), ..ok.clone() },
        LeaseRequest { holder: "two\nlines".to_string(), ..ok.clone() },
    ];
    for req in &bad_requests {
        assert!(invalid(store.acquire_lease(req).await), "{req:?} was accepted");
    }
    assert_eq!(store.list_leases(&space).await, Ok(Vec::new()));

    let widest = LeaseRequest {
        max_worker: LEASE_WORKER_ID_MAX,
        ttl_ms: LEASE_TTL_MS_MAX,
        margin_ms: LEASE_MARGIN_MS_MAX,
        holder: "h".repeat(HOLDER_LEN_MAX),
        ..ok
    };
    let lease = store.acquire_lease(&widest).await.unwrap();
    assert!(invalid(store.renew_lease(&lease, 0).await));
    assert!(invalid(store.renew_lease(&lease, LEASE_TTL_MS_MAX + 1).await));
    assert!(invalid(store.raise_mark(&lease, WORKER_TIME_MS_MAX + 1).await));
    assert_eq!(store.list_leases(&space).await.unwrap(), [record_of(&lease, &widest.holder)]);

    let base = assign(&space, 3, 1);
    let bad_assignments = [
        AssignRequest { max_worker: ASSIGN_WORKER_ID_MAX + 1, ..base.clone() },
        AssignRequest { host: "h".repeat(HOLDER_LEN_MAX + 1), ..base.clone() },
        AssignRequest { launch_ms: WORKER_TIME_MS_MAX + 1, ..base },
    ];
    for req in &bad_assignments {
        assert!(invalid(store.assign_worker(req).await), "{req:?} was accepted");
    }
}

/// A holder whose rows are deleted under it loses its lease on its next call (no row), and
/// keeps losing it once another node has claimed the id again: the new row's token comes from
/// the store's clock, so it is above the old holder's although the row that counted is gone,
/// and its holder id is its own. The new holder's row is left as it claimed it, and it keeps
/// working.
pub async fn rows_deleted_under_a_live_holder(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("deleted");
    let old = store.acquire_lease(&request(&space, 3, "old")).await.unwrap();
    store.raise_mark(&old, T0 + 500).await.unwrap();
    tamper.delete_rows(&space).await;

    let lost = Err(StoreError::LeaseLost { space: space.clone(), worker_id: 0 });
    assert_eq!(store.renew_lease(&old, TTL_MS).await, lost, "renew with no row");
    assert_eq!(store.raise_mark(&old, T0 + 900).await, lost.clone().map(drop));
    assert_eq!(store.list_leases(&space).await.unwrap(), [], "a lost call wrote a row");

    let new = store.acquire_lease(&request(&space, 3, "new")).await.unwrap();
    assert_eq!((new.worker_id, new.mark), (0, 0), "{new:?}");
    assert!(new.token > old.token, "a token came back: {new:?} after {old:?}");
    let row = only_row(&store, &space).await;
    assert_eq!(row, record_of(&new, "new"));

    assert_eq!(store.renew_lease(&old, TTL_MS).await, lost, "old holder renewed");
    assert_eq!(store.raise_mark(&old, T0 + 900).await, lost.clone().map(drop));
    assert_eq!(store.release_lease(&old).await, lost.map(drop));
    assert_eq!(only_row(&store, &space).await, row, "a lost call changed the row");

    let before = store_now(&store).await;
    let renewed = store.renew_lease(&new, 2 * TTL_MS).await.unwrap();
    let after = store_now(&store).await;
    assert!((before + 2 * TTL_MS..=after + 2 * TTL_MS).contains(&renewed.expires_ms));
    store.raise_mark(&renewed, T0 + 700).await.unwrap();
    store.release_lease(&renewed).await.unwrap();
}

/// A row restored from a backup older than its holder's takeover hands the holder an older
/// token: that holder loses its lease at once, and keeps losing it when a third node takes the
/// restored (expired) row over. The third node's token is above the holder's, although the
/// restored row counted from an older one: tokens come from the store's clock. Its row is
/// left as it claimed it, and it keeps working.
pub async fn rows_restored_from_an_older_snapshot(
    store: Arc<dyn WorkerStore>,
    tamper: Arc<dyn RowTamper>,
) {
    let space = space("restored");
    let first = store.acquire_lease(&request(&space, 3, "first")).await.unwrap();
    // The backup holds the first lease expired long ago, as a backup taken later would.
    tamper.age_rows(&space, REUSABLE_AFTER_MS).await;
    let backup = tamper.snapshot_rows(&space).await;

    let holder = store.acquire_lease(&request(&space, 3, "holder")).await.unwrap();
    assert_eq!(holder.worker_id, 0, "{holder:?}");
    assert!(holder.token > first.token, "{holder:?} after {first:?}");
    store.raise_mark(&holder, T0 + 3_000).await.unwrap();
    tamper.restore_rows(&space, &*backup).await;

    let lost = Err(StoreError::LeaseLost { space: space.clone(), worker_id: 0 });
    assert_eq!(store.renew_lease(&holder, TTL_MS).await, lost, "older token renewed");

    let third = store.acquire_lease(&request(&space, 3, "third")).await.unwrap();
    assert_eq!(third.worker_id, 0, "{third:?}");
    assert!(third.token > holder.token, "a token came back: {third:?} after {holder:?}");
    assert_ne!(third.fence_token(), holder.fence_token(), "a fence token came back");
    let row = only_row(&store, &space).await;
    assert_eq!(row, record_of(&third, "third"));

    assert_eq!(store.renew_lease(&holder, TTL_MS).await, lost, "old holder renewed");
    assert_eq!(store.raise_mark(&holder, T0 + 9_000).await, lost.clone().map(drop));
    assert_eq!(store.release_lease(&holder).await, lost.map(drop));
    assert_eq!(only_row(&store, &space).await, row, "a lost call changed the row");

    let renewed = store.renew_lease(&third, 2 * TTL_MS).await.unwrap();
    assert_eq!(renewed.token, third.token);
    assert!(renewed.expires_ms > third.expires_ms, "{renewed:?} after {third:?}");
    store.raise_mark(&renewed, T0 + 3_000).await.unwrap();
}

/// Runs `tasks` tasks, each acquiring `per_task` leases of `space` in turn; returns them all.
pub async fn acquire_concurrently(
    store: &Arc<dyn WorkerStore>,
    space: &WorkerSpace,
    max: u64,
    tasks: u64,
    per_task: u64,
) -> Vec<Lease> {
    let tasks: Vec<_> = (0..tasks)
        .map(|task| {
            let store = Arc::clone(store);
            let req = request(space, max, &format!("task-{task}"));
            tokio::spawn(async move {
                let mut leases = Vec::new();
                for _ in 0..per_task {
                    leases.push(store.acquire_lease(&req).await.unwrap());
                }
                leases
            })
        })
        .collect();
    let mut leases = Vec::new();
    for task in tasks {
        leases.extend(task.await.unwrap());
    }
    leases
}

/// A lease request of `space` with the suite's TTL, margin and latest mark.
pub fn request(space: &WorkerSpace, max_worker: u64, holder: &str) -> LeaseRequest {
    LeaseRequest {
        space: space.clone(),
        min_worker: 0,
        max_worker,
        holder: holder.to_string(),
        ttl_ms: TTL_MS,
        margin_ms: MARGIN_MS,
        mark_max: MARK_MAX_MS,
    }
}

/// An assignment request of `space` from `worker.test:{port}`.
pub fn assign(space: &WorkerSpace, max_worker: u64, port: u16) -> AssignRequest {
    AssignRequest {
        space: space.clone(),
        max_worker,
        host: "worker.test".to_string(),
        port,
        launch_ms: T0,
    }
}

/// The space `name` of the worker suite (`ws.{name}`), apart from other tests' spaces.
pub fn space(name: &str) -> WorkerSpace {
    space_of(&format!("ws.{name}"))
}

/// The space `name`, as is.
pub fn space_of(name: &str) -> WorkerSpace {
    WorkerSpace::parse(name).unwrap()
}

/// The row a lease left, with `holder`.
pub fn record_of(lease: &Lease, holder: &str) -> LeaseRecord {
    LeaseRecord {
        worker_id: lease.worker_id,
        holder: holder.to_string(),
        token: lease.token,
        expires_ms: lease.expires_ms,
        mark: lease.mark,
    }
}

/// The only row of `space`.
pub async fn only_row(store: &Arc<dyn WorkerStore>, space: &WorkerSpace) -> LeaseRecord {
    let mut rows = store.list_leases(space).await.unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    rows.remove(0)
}

/// The store's clock.
pub async fn store_now(store: &Arc<dyn WorkerStore>) -> u64 {
    store.now_ms().await.unwrap()
}

/// A token drawn from the store's clock in microseconds between `before` and `after` (in
/// milliseconds), or just above it (a store that drew tokens within the same microsecond).
fn assert_token_from_the_clock(token: u64, before: u64, after: u64) {
    assert!(
        before * 1_000 <= token && token < (after + 1) * 1_000 + 1_000,
        "token {token} was not drawn from the store's clock at {before}..={after} ms"
    );
}

/// An expiry one TTL after the store's clock read between `before` and `after`.
fn assert_expires_one_ttl_after(expires_ms: u64, before: u64, after: u64) {
    assert!(
        before + TTL_MS <= expires_ms && expires_ms <= after + TTL_MS,
        "expires at {expires_ms}, not one TTL after the store's {before}..={after}"
    );
}

/// A time mark distinct per worker id.
fn mark_of(worker_id: u64) -> u64 {
    T0 + 100 * (worker_id + 1)
}

fn invalid<T: std::fmt::Debug>(result: Result<T, StoreError>) -> bool {
    matches!(result, Err(StoreError::InvalidValue(_)))
}

/// The clock the checks give a memory or SQLite store, to move its time: it starts at the
/// machine's and moves only when told.
#[derive(Debug)]
pub struct TestClock(std::sync::atomic::AtomicU64);

impl TestClock {
    /// A clock reading the machine's time now.
    pub fn new() -> Arc<TestClock> {
        let now = idmint_store::StoreClock::now_ms(&idmint_store::LocalClock);
        Arc::new(TestClock(std::sync::atomic::AtomicU64::new(now)))
    }

    /// Moves the clock `ms` on.
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
}

impl idmint_store::StoreClock for TestClock {
    fn now_ms(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

mod memory {
    //! The worker suite on the memory backend, and `open_workers`' refusals.

    use std::sync::Arc;

    use std::any::Any;

    use async_trait::async_trait;
    use idmint_store::{
        MemoryStore, StoreError, StoreUrl, WorkerRowsSnapshot, WorkerSpace, open_workers,
    };

    use super::{RowTamper, TestClock, WorkerSubject};

    async fn fresh() -> Option<WorkerSubject> {
        Some(WorkerSubject::new(Arc::new(MemoryStore::new())))
    }

    async fn tampered() -> Option<(WorkerSubject, Arc<dyn RowTamper>)> {
        let clock = TestClock::new();
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        Some((WorkerSubject::new(store.clone()), Arc::new(Rows(store, clock))))
    }

    /// The memory store's rows, through its own hooks (the store is the check's alone, so a
    /// snapshot of every space is one of the check's), and its clock.
    struct Rows(Arc<MemoryStore>, Arc<TestClock>);

    #[async_trait]
    impl RowTamper for Rows {
        async fn age_rows(&self, _: &WorkerSpace, ms: u64) {
            self.1.advance(ms);
        }
        async fn delete_rows(&self, space: &WorkerSpace) {
            self.0.delete_worker_rows(space);
        }
        async fn snapshot_rows(&self, _: &WorkerSpace) -> Box<dyn Any + Send + Sync> {
            Box::new(self.0.snapshot_worker_rows())
        }
        async fn restore_rows(&self, _: &WorkerSpace, snapshot: &(dyn Any + Send + Sync)) {
            self.0.restore_worker_rows(snapshot.downcast_ref::<WorkerRowsSnapshot>().unwrap());
        }
    }

    worker_suite!(fresh, tampered);

    #[tokio::test]
    async fn open_workers_refuses_sets_of_stores_without_showing_a_password() {
        for url in [
            "flicker+mysql://app:s3cret-Pw@db1/ids flicker+mysql://app:s3cret-Pw@db2/ids",
            "mysql://app:s3cret-Pw@db1/ids mysql://app:s3cret-Pw@db2/ids",
            "memory:// memory://",
        ] {
            let parsed = StoreUrl::parse(url).unwrap();
            let Err(error) = open_workers(&parsed).await else { panic!("{url} was opened") };
            assert!(matches!(error, StoreError::BadUrl { .. }), "{error:?}");
            let text = error.to_string();
            assert!(text.contains("single store"), "{text}");
            assert!(!text.contains("s3cret"), "the password shows: {text}");
        }
        assert!(open_workers(&StoreUrl::Memory).await.is_ok());
    }
}

mod sqlite {
    //! The worker suite on an SQLite file, and what only a file shows: leases, marks and the
    //! assignment sequence survive reopening, two connections to one file hand out distinct
    //! ids, a refused assignment leaves no row, and an existing worker table is used as it is.

    use std::path::PathBuf;
    use std::sync::Arc;

    use idmint_store::{
        HOLDER_ID_COLUMN, LeaseStore, SqliteStore, StoreError, StoreUrl, WORKER_NODE_TABLE,
        WORKERS_TABLE, WorkerStore, open_workers,
    };
    use rusqlite::Connection;
    use tempfile::TempDir;

    use super::{
        RowTamper, T0, TOKEN_FLOOR, TTL_MS, TestClock, WorkerSubject, acquire_concurrently, assign,
        request, space,
    };

    async fn fresh() -> Option<WorkerSubject> {
        let (dir, path) = temp_db();
        let store = open_workers(&StoreUrl::Sqlite(path)).await.unwrap();
        Some(WorkerSubject::with_guard(store, dir))
    }

    async fn tampered() -> Option<(WorkerSubject, Arc<dyn RowTamper>)> {
        let (dir, path) = temp_db();
        let clock = TestClock::new();
        let store = SqliteStore::open(&path).await.unwrap().with_clock(clock.clone());
        Some((WorkerSubject::with_guard(Arc::new(store), dir), Arc::new(Rows(path, clock))))
    }

    /// The file's lease rows, through a connection of its own, and the store's clock.
    struct Rows(PathBuf, Arc<TestClock>);

    type RowColumns = (String, i64, String, i64, i64, i64, String);

    #[async_trait::async_trait]
    impl RowTamper for Rows {
        async fn age_rows(&self, _: &idmint_store::WorkerSpace, ms: u64) {
            self.1.advance(ms);
        }
        async fn delete_rows(&self, space: &idmint_store::WorkerSpace) {
            let raw = Connection::open(&self.0).unwrap();
            let sql = format!("DELETE FROM {WORKERS_TABLE} WHERE space = ?1");
            raw.execute(&sql, [space.as_str()]).unwrap();
        }
        async fn snapshot_rows(
            &self,
            space: &idmint_store::WorkerSpace,
        ) -> Box<dyn std::any::Any + Send + Sync> {
            let raw = Connection::open(&self.0).unwrap();
            let rows: Vec<RowColumns> = raw
                .prepare(&format!(
                    "SELECT space, worker_id, holder, token, expires_ms, time_mark, holder_id \
                     FROM {WORKERS_TABLE} WHERE space = ?1"
                ))
                .unwrap()
                .query_map([space.as_str()], |r| {
                    Ok((
                        r.get(0)?,
                        r.get(1)?,
                        r.get(2)?,
                        r.get(3)?,
                        r.get(4)?,
                        r.get(5)?,
                        r.get(6)?,
                    ))
                })
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            Box::new(rows)
        }
        async fn restore_rows(
            &self,
            space: &idmint_store::WorkerSpace,
            snapshot: &(dyn std::any::Any + Send + Sync),
        ) {
            self.delete_rows(space).await;
            let raw = Connection::open(&self.0).unwrap();
            for row in snapshot.downcast_ref::<Vec<RowColumns>>().unwrap() {
                raw.execute(
                    &format!(
                        "INSERT INTO {WORKERS_TABLE} \
                         (space, worker_id, holder, token, expires_ms, time_mark, holder_id) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                    ),
                    rusqlite::params![row.0, row.1, row.2, row.3, row.4, row.5, row.6],
                )
                .unwrap();
            }
        }
    }

    worker_suite!(fresh, tampered);

    #[tokio::test]
    async fn leases_marks_and_assignments_survive_reopening() {
        let (_dir, path) = temp_db();
        let store = SqliteStore::open(&path).await.unwrap();
        let space = space("durable");
        let lease = store.acquire_lease(&request(&space, 7, "a")).await.unwrap();
        store.raise_mark(&lease, T0 + 42).await.unwrap();
        let assigned = store.assign_worker(&assign(&space, 100, 1)).await.unwrap();
        drop(store);

        let store = SqliteStore::open(&path).await.unwrap();
        let listed = store.list_leases(&space).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].token, listed[0].mark), (lease.token, T0 + 42));
        let renewed = store.renew_lease(&lease, TTL_MS).await.unwrap();
        assert_eq!(renewed.mark, T0 + 42);
        let next = store.acquire_lease(&request(&space, 7, "b")).await.unwrap();
        assert_eq!(next.worker_id, 1);
        assert!(store.assign_worker(&assign(&space, 100, 1)).await.unwrap() > assigned);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn two_connections_to_one_file_hand_out_distinct_ids() {
        let (_dir, path) = temp_db();
        let first: Arc<dyn WorkerStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
        let second: Arc<dyn WorkerStore> = Arc::new(SqliteStore::open(&path).await.unwrap());
        let space = space("shared-file");
        let (a, b) = tokio::join!(
            acquire_concurrently(&first, &space, 31, 4, 4),
            acquire_concurrently(&second, &space, 31, 4, 4),
        );
        let mut ids: Vec<u64> = a.iter().chain(&b).map(|l| l.worker_id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..32).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn a_refused_assignment_keeps_no_row() {
        let (_dir, path) = temp_db();
        let store = SqliteStore::open(&path).await.unwrap();
        let space = space("refused");
        assert_eq!(store.assign_worker(&assign(&space, 2, 1)).await, Ok(1));
        assert_eq!(store.assign_worker(&assign(&space, 2, 2)).await, Ok(2));
        for port in [3, 4] {
            let refused = store.assign_worker(&assign(&space, 2, port)).await;
            assert_eq!(refused, Err(StoreError::WorkersExhausted { space: space.clone(), max: 2 }));
        }
        let raw = Connection::open(&path).unwrap();
        let rows: Vec<(i64, String, String, i64, i64)> = raw
            .prepare(&format!(
                "SELECT id, space, host, port, launch_ms FROM {WORKER_NODE_TABLE} ORDER BY id"
            ))
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let node = |id, port| (id, space.to_string(), "worker.test".to_string(), port, T0 as i64);
        assert_eq!(rows, [node(1, 1), node(2, 2)]);
    }

    #[tokio::test]
    async fn an_existing_worker_table_is_used_as_is() {
        let (_dir, path) = temp_db();
        let made = format!(
            "CREATE TABLE {WORKERS_TABLE} (space TEXT NOT NULL, worker_id INTEGER NOT NULL, \
             holder TEXT NOT NULL, token INTEGER NOT NULL, expires_ms INTEGER NOT NULL, \
             time_mark INTEGER NOT NULL, holder_id TEXT NOT NULL, note TEXT, \
             PRIMARY KEY (space, worker_id))"
        );
        let raw = Connection::open(&path).unwrap();
        raw.execute_batch(&made).unwrap();
        raw.execute(
            &format!(
                "INSERT INTO {WORKERS_TABLE} \
                 VALUES ('ws.foreign', 0, 'ops', 3, ?1, 77, '', 'kept')"
            ),
            [T0 as i64],
        )
        .unwrap();

        let store = SqliteStore::open(&path).await.unwrap();
        let space = space("foreign");
        // The row expired at T0, long before the store's clock.
        let lease = store.acquire_lease(&request(&space, 7, "a")).await.unwrap();
        assert_eq!((lease.worker_id, lease.mark), (0, 77));
        assert!(lease.token >= TOKEN_FLOOR, "{lease:?}");
        let layout: String = raw
            .query_row("SELECT sql FROM sqlite_master WHERE name = ?1", [WORKERS_TABLE], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(layout, made);
        let note: String =
            raw.query_row(&format!("SELECT note FROM {WORKERS_TABLE}"), [], |r| r.get(0)).unwrap();
        assert_eq!(note, "kept");
    }

    /// A lease table an earlier idmint made has no holder id: it is refused with the statement
    /// that adds one, untouched; once the operator has run it, it is used.
    #[tokio::test]
    async fn a_worker_table_without_holder_ids_is_refused_naming_the_fix() {
        let (_dir, path) = temp_db();
        let made = format!(
            "CREATE TABLE {WORKERS_TABLE} (space TEXT NOT NULL, worker_id INTEGER NOT NULL, \
             holder TEXT NOT NULL DEFAULT '', token INTEGER NOT NULL, \
             expires_ms INTEGER NOT NULL, time_mark INTEGER NOT NULL DEFAULT 0, \
             PRIMARY KEY (space, worker_id)) STRICT"
        );
        let raw = Connection::open(&path).unwrap();
        raw.execute_batch(&made).unwrap();
        raw.execute(
            &format!("INSERT INTO {WORKERS_TABLE} VALUES ('ws.old', 0, 'old', 3, ?1, 77)"),
            [T0 as i64],
        )
        .unwrap();

        let store = SqliteStore::open(&path).await.unwrap();
        let space = space("old");
        let refused = store.acquire_lease(&request(&space, 7, "a")).await.unwrap_err();
        let StoreError::OutdatedTable { table, column, fix } = &refused else {
            panic!("{refused:?}")
        };
        assert_eq!((*table, *column), (WORKERS_TABLE, HOLDER_ID_COLUMN));
        assert!(refused.to_string().contains("ALTER TABLE idmint_workers ADD COLUMN holder_id"));
        let layout: String = raw
            .query_row("SELECT sql FROM sqlite_master WHERE name = ?1", [WORKERS_TABLE], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(layout, made, "the table was altered");

        raw.execute_batch(fix).unwrap();
        let lease = store.acquire_lease(&request(&space, 7, "a")).await.unwrap();
        assert_eq!((lease.worker_id, lease.mark), (0, 77));
        assert!(lease.token >= TOKEN_FLOOR, "{lease:?}");
        store.renew_lease(&lease, TTL_MS).await.unwrap();
    }

    fn temp_db() -> (TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("idmint.db");
        (dir, path)
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    //! The worker suite on MySQL / MariaDB, in this run's database (the test kit's
    //! server; skipped and reported without one), and the tables idmint makes there.

    use std::any::Any;
    use std::sync::Arc;

    use idmint_store::{StoreUrl, WORKER_NODE_TABLE, WORKERS_TABLE, WorkerSpace, open_workers};
    use sqlx::{AssertSqlSafe, Connection, MySqlConnection};

    use super::{RowTamper, WorkerSubject, request, space};

    /// The run's database, with a segment table of the suite's own and a small pool.
    async fn url() -> Option<StoreUrl> {
        crate::mysql::suite_url("worker_suite", 4).await
    }

    async fn fresh() -> Option<WorkerSubject> {
        Some(WorkerSubject::new(open_workers(&url().await?).await.unwrap()))
    }

    async fn tampered() -> Option<(WorkerSubject, Arc<dyn RowTamper>)> {
        Some((fresh().await?, Arc::new(Rows)))
    }

    /// The run database's lease rows, through a connection of their own.
    struct Rows;

    type RowColumns = (String, i64, String, i64, i64, i64, String);

    async fn raw() -> MySqlConnection {
        MySqlConnection::connect(&crate::mysql::database_url().await.unwrap()).await.unwrap()
    }

    #[async_trait::async_trait]
    impl RowTamper for Rows {
        async fn age_rows(&self, space: &WorkerSpace, ms: u64) {
            let sql =
                format!("UPDATE {WORKERS_TABLE} SET expires_ms = expires_ms - ? WHERE space = ?");
            let mut raw = raw().await;
            sqlx::query(AssertSqlSafe(sql))
                .bind(ms as i64)
                .bind(space.as_str())
                .execute(&mut raw)
                .await
                .unwrap();
        }
        async fn delete_rows(&self, space: &WorkerSpace) {
            let sql = format!("DELETE FROM {WORKERS_TABLE} WHERE space = ?");
            let mut raw = raw().await;
            sqlx::query(AssertSqlSafe(sql)).bind(space.as_str()).execute(&mut raw).await.unwrap();
        }
        async fn snapshot_rows(&self, space: &WorkerSpace) -> Box<dyn Any + Send + Sync> {
            let rows: Vec<RowColumns> = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT space, worker_id, holder, token, expires_ms, time_mark, holder_id \
                 FROM {WORKERS_TABLE} WHERE space = ?"
            )))
            .bind(space.as_str())
            .fetch_all(&mut raw().await)
            .await
            .unwrap();
            Box::new(rows)
        }
        async fn restore_rows(&self, space: &WorkerSpace, snapshot: &(dyn Any + Send + Sync)) {
            self.delete_rows(space).await;
            let mut raw = raw().await;
            for row in snapshot.downcast_ref::<Vec<RowColumns>>().unwrap() {
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO {WORKERS_TABLE} \
                     (space, worker_id, holder, token, expires_ms, time_mark, holder_id) \
                     VALUES (?, ?, ?, ?, ?, ?, ?)"
                )))
                .bind(&row.0)
                .bind(row.1)
                .bind(&row.2)
                .bind(row.3)
                .bind(row.4)
                .bind(row.5)
                .bind(&row.6)
                .execute(&mut raw)
                .await
                .unwrap();
            }
        }
    }

    worker_suite!(fresh, tampered);

    #[tokio::test]
    async fn the_worker_tables_compare_bytes() {
        let Some(url) = url().await else { return };
        let store = open_workers(&url).await.unwrap();
        // Each table is created on its first use: a lease, then an assignment.
        store.acquire_lease(&request(&space("mysql-tables"), 3, "a")).await.unwrap();
        // Assigned ids come from one sequence for every space: leave room for the suite's.
        store.assign_worker(&super::assign(&space("mysql-tables"), 1 << 20, 1)).await.unwrap();
        crate::mysql::assert_tables_compare_bytes(&[WORKERS_TABLE, WORKER_NODE_TABLE]).await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    //! The worker suite on PostgreSQL, in this run's database (the test kit's
    //! server; skipped and reported without one).

    use std::any::Any;
    use std::sync::Arc;

    use idmint_store::{WORKERS_TABLE, WorkerSpace, open_workers};
    use sqlx::{AssertSqlSafe, Connection, PgConnection};

    use super::{RowTamper, WorkerSubject};

    async fn fresh() -> Option<WorkerSubject> {
        let url = crate::postgres::suite_url("worker_suite", 4).await?;
        Some(WorkerSubject::new(open_workers(&url).await.unwrap()))
    }

    async fn tampered() -> Option<(WorkerSubject, Arc<dyn RowTamper>)> {
        Some((fresh().await?, Arc::new(Rows)))
    }

    /// The run database's lease rows, through a connection of their own.
    struct Rows;

    type RowColumns = (String, i64, String, i64, i64, i64, String);

    async fn raw() -> PgConnection {
        PgConnection::connect(crate::postgres::database_url().await.unwrap()).await.unwrap()
    }

    #[async_trait::async_trait]
    impl RowTamper for Rows {
        async fn age_rows(&self, space: &WorkerSpace, ms: u64) {
            let sql =
                format!("UPDATE {WORKERS_TABLE} SET expires_ms = expires_ms - $1 WHERE space = $2");
            let mut raw = raw().await;
            sqlx::query(AssertSqlSafe(sql))
                .bind(ms as i64)
                .bind(space.as_str())
                .execute(&mut raw)
                .await
                .unwrap();
        }
        async fn delete_rows(&self, space: &WorkerSpace) {
            let sql = format!("DELETE FROM {WORKERS_TABLE} WHERE space = $1");
            let mut raw = raw().await;
            sqlx::query(AssertSqlSafe(sql)).bind(space.as_str()).execute(&mut raw).await.unwrap();
        }
        async fn snapshot_rows(&self, space: &WorkerSpace) -> Box<dyn Any + Send + Sync> {
            let rows: Vec<RowColumns> = sqlx::query_as(AssertSqlSafe(format!(
                "SELECT space::text, worker_id, holder::text, token, expires_ms, time_mark, \
                 holder_id::text FROM {WORKERS_TABLE} WHERE space = $1"
            )))
            .bind(space.as_str())
            .fetch_all(&mut raw().await)
            .await
            .unwrap();
            Box::new(rows)
        }
        async fn restore_rows(&self, space: &WorkerSpace, snapshot: &(dyn Any + Send + Sync)) {
            self.delete_rows(space).await;
            let mut raw = raw().await;
            for row in snapshot.downcast_ref::<Vec<RowColumns>>().unwrap() {
                sqlx::query(AssertSqlSafe(format!(
                    "INSERT INTO {WORKERS_TABLE} \
                     (space, worker_id, holder, token, expires_ms, time_mark, holder_id) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7)"
                )))
                .bind(&row.0)
                .bind(row.1)
                .bind(&row.2)
                .bind(row.3)
                .bind(row.4)
                .bind(row.5)
                .bind(&row.6)
                .execute(&mut raw)
                .await
                .unwrap();
            }
        }
    }

    worker_suite!(fresh, tampered);
}
