//! The UUID/ULID generator on the machine's clock: 1 000 000 v7 ids and 1 000 000 ULIDs
//! strictly increasing within the node, two threads sharing one generator never getting the
//! same id, and interoperability with the `uuid` and `ulid` crates both ways (their parsers
//! read our ids with the right version, variant and time; ours reads theirs).

use std::collections::HashSet;
use std::sync::Arc;

use idmint::SystemClock;
use idmint::Uuids;
use idmint::segment::Count;
use idmint_core::limits::BATCH_COUNT_MAX;
use idmint_core::uuid::{UuidFormat, ulid_decode, ulid_encode, ulid_unix_ms, uuid_v7_unix_ms};

const IDS: u64 = 1_000_000;

#[test]
fn a_million_uuid_v7_increase_and_read_back_with_the_uuid_crate() {
    let uuids = Uuids::new(Arc::new(SystemClock));
    let ids = million(|count| uuids.v7(count).unwrap(), || uuids.next_v7().unwrap());
    for (i, &id) in ids.iter().enumerate() {
        let theirs = uuid::Uuid::from_u128(id);
        assert_eq!(theirs.get_version(), Some(uuid::Version::SortRand), "{theirs}");
        assert_eq!(theirs.get_variant(), uuid::Variant::RFC4122, "{theirs}");
        if i % 1_000 == 0 {
            let (seconds, nanos) = theirs.get_timestamp().unwrap().to_unix();
            assert_eq!(seconds * 1_000 + u64::from(nanos) / 1_000_000, uuid_v7_unix_ms(id));
            let text = UuidFormat::Standard.encode(id);
            assert_eq!(uuid::Uuid::parse_str(&text), Ok(theirs));
            assert_eq!(text, theirs.hyphenated().to_string());
            assert_eq!(UuidFormat::Hex.encode(id), theirs.simple().to_string());
        }
    }
}

#[test]
fn a_million_ulids_increase_and_read_back_with_the_ulid_crate() {
    let uuids = Uuids::new(Arc::new(SystemClock));
    let ids = million(|count| uuids.ulid(count).unwrap(), || uuids.next_ulid().unwrap());
    for &id in ids.iter().step_by(1_000) {
        let text = ulid_encode(id);
        let theirs = ulid::Ulid::from_string(&text).unwrap();
        assert_eq!(theirs.0, id);
        assert_eq!(theirs.timestamp_ms(), ulid_unix_ms(id));
        assert_eq!(theirs.to_string(), text);
    }
}

#[test]
fn two_threads_sharing_one_generator_never_get_the_same_id() {
    let uuids = Arc::new(Uuids::new(Arc::new(SystemClock)));
    let per_thread = Count::new(BATCH_COUNT_MAX).unwrap();
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let uuids = Arc::clone(&uuids);
            std::thread::spawn(move || {
                let (mut v4, mut v7, mut ulids) = (Vec::new(), Vec::new(), Vec::new());
                for _ in 0..5 {
                    v4.extend(uuids.v4(per_thread));
                    v7.extend(uuids.v7(per_thread).unwrap());
                    ulids.extend(uuids.ulid(per_thread).unwrap());
                    v7.push(uuids.next_v7().unwrap());
                    ulids.push(uuids.next_ulid().unwrap());
                }
                // Each thread's own ids increase: calls are ordered by the lock.
                assert!(v7.windows(2).all(|w| w[0] < w[1]));
                assert!(ulids.windows(2).all(|w| w[0] < w[1]));
                (v4, v7, ulids)
            })
        })
        .collect();
    let (mut v4, mut v7, mut ulids) = (HashSet::new(), HashSet::new(), HashSet::new());
    let mut total = 0;
    for thread in threads {
        let (a, b, c) = thread.join().unwrap();
        total += a.len();
        v4.extend(a);
        v7.extend(b);
        ulids.extend(c);
    }
    assert_eq!(v4.len(), total, "a UUID v4 repeated");
    assert_eq!(v7.len(), total + 10, "a UUID v7 repeated");
    assert_eq!(ulids.len(), total + 10, "a ULID repeated");
    assert!(v4.iter().all(|&id| {
        let theirs = uuid::Uuid::from_u128(id);
        theirs.get_version() == Some(uuid::Version::Random)
            && theirs.get_variant() == uuid::Variant::RFC4122
    }));
}

#[test]
fn our_parsers_read_the_crates_ids() {
    for _ in 0..1_000 {
        for theirs in [uuid::Uuid::new_v4(), uuid::Uuid::now_v7()] {
            let standard = UuidFormat::Standard.decode(&theirs.hyphenated().to_string());
            assert_eq!(standard, Ok(theirs.as_u128()));
            assert_eq!(UuidFormat::Hex.decode(&theirs.simple().to_string()), Ok(theirs.as_u128()));
        }
        let theirs = ulid::Ulid::generate();
        assert_eq!(ulid_decode(&theirs.to_string()), Ok(theirs.0));
    }
}

/// [`IDS`] ids: batches of every size up to `BATCH_COUNT_MAX` from `batch`, single ids from
/// `one` in between; asserts they strictly increase.
fn million(batch: impl Fn(Count) -> Vec<u128>, one: impl Fn() -> u128) -> Vec<u128> {
    let mut ids = Vec::with_capacity(IDS as usize);
    let mut size = 1;
    while (ids.len() as u64) < IDS {
        let count = size.min(IDS - ids.len() as u64).min(BATCH_COUNT_MAX);
        ids.extend(batch(Count::new(count).unwrap()));
        if (ids.len() as u64) < IDS {
            ids.push(one());
        }
        size = size * 3 + 1;
    }
    assert_eq!(ids.len() as u64, IDS);
    for (i, pair) in ids.windows(2).enumerate() {
        assert!(pair[0] < pair[1], "id {} ({:#x}) is not above {:#x}", i + 1, pair[1], pair[0]);
    }
    ids
}
