//! A store for tests: the memory reference store with knobs on `allocate` (count calls,
//! hang, fail, inject seeded faults, answer late, go backwards) and on
//! `compare_and_set_max_id` (hang, fail, inject seeded faults). Other calls pass through
//! unchanged. [`TestStore::restore_max_id`] rewrites a row as a restored backup would.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use idmint::Tag;
use idmint_core::{Description, StartId, Step};
use idmint_store::{
    Allocation, MemoryStore, RangeStore, SegmentStore, StoreError, TagRecord, TagSpec,
};

/// How `allocate` and `compare_and_set_max_id` behave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// Never answers.
    Hang,
    /// Answers `Unavailable` at once.
    Fail,
    /// Fails `fail_permille` of calls and delays each by up to `delay_ms_max`, from `seed`.
    Faulty {
        fail_permille: u64,
        delay_ms_max: u64,
    },
    /// `allocate` returns the previous allocation again (a store restored from a backup);
    /// `compare_and_set_max_id` acts on the row as it is.
    Regress,
    /// `allocate` reserves at once and answers `ms` later (a slow network: the range is
    /// taken in the store while the node waits); `compare_and_set_max_id` is not delayed.
    Latency(u64),
    /// `allocate` refuses a tag with a 4-byte character as MySQL's store does on Leaf's
    /// `utf8` (utf8mb3) table: `TagNotStorable`.
    Utf8mb3,
}

pub struct TestStore {
    inner: MemoryStore,
    mode: Mutex<Mode>,
    rng: Mutex<u64>,
    pub allocations: AtomicU64,
    in_flight: AtomicU64,
    pub max_in_flight: AtomicU64,
    /// Compare-and-sets applied that raised `max_id`: jumps past a store that went back.
    pub raised: AtomicU64,
    last: Mutex<Option<Allocation>>,
    /// The length of every range `allocate` reserved, in order.
    pub lengths: Mutex<Vec<u64>>,
}

impl TestStore {
    pub fn new(seed: u64) -> Arc<TestStore> {
        Arc::new(TestStore {
            inner: MemoryStore::new(),
            mode: Mutex::new(Mode::Normal),
            rng: Mutex::new(seed | 1),
            allocations: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            raised: AtomicU64::new(0),
            last: Mutex::new(None),
            lengths: Mutex::new(Vec::new()),
        })
    }

    pub fn set_mode(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    pub async fn create(&self, tag: &str, step: u64) -> Tag {
        create_tag(&self.inner, tag, step).await
    }

    /// The row's `max_id`, read past the knobs.
    pub async fn max_id(&self, tag: &Tag) -> u64 {
        self.inner.get_tag(tag).await.unwrap().unwrap().max_id
    }

    /// Sets the row's `max_id` to `max_id`, up or down, past the knobs: what restoring a
    /// backup (or failing over to a lagging replica) does to a running system.
    pub async fn restore_max_id(&self, tag: &Tag, max_id: u64) {
        loop {
            let now = self.max_id(tag).await;
            if self.inner.compare_and_set_max_id(tag, now, max_id).await.unwrap() {
                return;
            }
        }
    }

    /// xorshift64: enough randomness for fault injection, replayable from the seed.
    fn roll(&self, below: u64) -> u64 {
        let mut x = self.rng.lock().unwrap();
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x % below.max(1)
    }

    async fn allocate_with_mode(
        &self,
        tag: &Tag,
        step: Option<Step>,
    ) -> Result<Allocation, StoreError> {
        if *self.mode.lock().unwrap() == Mode::Regress
            && let Some(allocation) = *self.last.lock().unwrap()
        {
            return Ok(allocation);
        }
        self.inject_faults().await?;
        if *self.mode.lock().unwrap() == Mode::Utf8mb3
            && tag.as_str().chars().any(|c| c.len_utf8() > 3)
        {
            let (table, charset) = ("leaf_alloc".to_string(), "utf8mb3".to_string());
            return Err(StoreError::TagNotStorable { tag: tag.clone(), table, charset });
        }
        let allocation = self.inner.allocate(tag, step).await?;
        *self.last.lock().unwrap() = Some(allocation);
        self.lengths.lock().unwrap().push(allocation.range.len());
        let mode = *self.mode.lock().unwrap();
        if let Mode::Latency(ms) = mode {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        Ok(allocation)
    }

    /// Applies the hanging and failing modes; the others let the call through.
    async fn inject_faults(&self) -> Result<(), StoreError> {
        let mode = *self.mode.lock().unwrap();
        match mode {
            Mode::Normal | Mode::Regress | Mode::Latency(_) | Mode::Utf8mb3 => {}
            Mode::Hang => std::future::pending::<()>().await,
            Mode::Fail => return Err(StoreError::Unavailable("injected failure".into())),
            Mode::Faulty { fail_permille, delay_ms_max } => {
                let delay = self.roll(delay_ms_max + 1);
                let fail = self.roll(1000) < fail_permille;
                tokio::time::sleep(Duration::from_millis(delay)).await;
                if fail {
                    return Err(StoreError::Unavailable("injected fault".into()));
                }
            }
        }
        Ok(())
    }
}

/// Creates `tag` in any store, starting at id 1 with `step`.
pub async fn create_tag(store: &dyn SegmentStore, tag: &str, step: u64) -> Tag {
    let tag = Tag::parse(tag).unwrap();
    let spec = TagSpec {
        tag: tag.clone(),
        step: Step::new(step).unwrap(),
        start: Some(StartId::DEFAULT),
        force: false,
        description: Description::default(),
    };
    store.create_tag(&spec).await.unwrap();
    tag
}

#[async_trait]
impl RangeStore for TestStore {
    async fn allocate(&self, tag: &Tag, step: Option<Step>) -> Result<Allocation, StoreError> {
        self.allocations.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        let result = self.allocate_with_mode(tag, step).await;
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        result
    }
    async fn compare_and_set_max_id(
        &self,
        tag: &Tag,
        expected: u64,
        new: u64,
    ) -> Result<bool, StoreError> {
        self.inject_faults().await?;
        let applied = self.inner.compare_and_set_max_id(tag, expected, new).await?;
        if applied && new > expected {
            self.raised.fetch_add(1, Ordering::SeqCst);
        }
        Ok(applied)
    }
    async fn get_tag(&self, tag: &Tag) -> Result<Option<TagRecord>, StoreError> {
        self.inner.get_tag(tag).await
    }
    async fn list_tags(&self) -> Result<Vec<TagRecord>, StoreError> {
        self.inner.list_tags().await
    }
    async fn tombstone(&self, tag: &Tag) -> Result<Option<u64>, StoreError> {
        self.inner.tombstone(tag).await
    }
    async fn ping(&self) -> Result<(), StoreError> {
        self.inner.ping().await
    }
    fn describe(&self) -> String {
        "test://".to_string()
    }
}

#[async_trait]
impl SegmentStore for TestStore {
    async fn create_tag(&self, spec: &TagSpec) -> Result<TagRecord, StoreError> {
        self.inner.create_tag(spec).await
    }

    async fn set_step(&self, tag: &Tag, step: Step) -> Result<TagRecord, StoreError> {
        self.inner.set_step(tag, step).await
    }

    async fn delete_tag(&self, tag: &Tag) -> Result<(), StoreError> {
        self.inner.delete_tag(tag).await
    }
}
