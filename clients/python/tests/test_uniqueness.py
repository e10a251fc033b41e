"""A million ids through one client from many threads (sync) and many tasks (asyncio): none
twice, each thread's and task's ids increasing (so within every range too), leases sized
by consumption."""

import asyncio
import threading

import idmint
from conftest import assert_increasing, assert_unique, unique

TOTAL = 1_000_000
THREADS = 8
TASKS = 50


def test_a_million_ids_from_many_threads_are_unique_and_increase_per_thread(node):
    tag = unique("threads")
    node.create_tag(tag)
    lists = [[] for _ in range(THREADS)]
    errors = []
    with idmint.Client([node.url]) as client:

        def take(ids):
            try:
                for _ in range(TOTAL // THREADS):
                    ids.append(client.next_id(tag))
            except Exception as e:  # reported below, with the thread's count
                errors.append(e)

        threads = [threading.Thread(target=take, args=(ids,)) for ids in lists]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Leases followed the consumption: they grew from the 1 000-id floor.
        assert client._tags[tag].last_lease_size >= 16_000, client._tags[tag].last_lease_size
    assert not errors, errors
    assert assert_unique(lists) == TOTAL
    for n, ids in enumerate(lists):
        assert_increasing(ids, f"thread {n}")


def test_a_million_ids_from_many_tasks_are_unique_and_increase_per_task(node):
    tag = unique("tasks")
    node.create_tag(tag)

    async def run():
        async with idmint.AsyncClient([node.url]) as client:

            async def take():
                ids = []
                for k in range(TOTAL // TASKS):
                    ids.append(await client.next_id(tag))
                    if k % 1000 == 0:
                        await asyncio.sleep(0)  # let the other tasks interleave
                return ids

            return await asyncio.gather(*(take() for _ in range(TASKS)))

    lists = asyncio.run(run())
    assert assert_unique(lists) == TOTAL
    for n, ids in enumerate(lists):
        assert_increasing(ids, f"task {n}")


def test_batches_and_non_blocking_takes_mix_without_repeats(node):
    tag = unique("mix")
    node.create_tag(tag)
    with idmint.Client([node.url], min_lease=10) as client:
        assert client.try_next_id(tag) is None  # nothing leased yet: a fetch starts
        taken = client.next_ids(tag, 500)
        assert_increasing(taken, "batch")
        for _ in range(5_000):
            one = client.try_next_id(tag)
            if one is not None:
                assert one > taken[-1]
                taken.append(one)
        taken += client.next_ids(tag, 2_000)
    assert_increasing(taken, "all")
