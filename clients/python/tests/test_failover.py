"""Two nodes on the shared MariaDB, the one serving the client killed with -9 while threads
(and, in the second test, tasks) take a million ids: the client keeps serving from its
buffer and the other node, with no id twice and each thread's ids increasing."""

import asyncio
import threading
import time

import idmint
from conftest import assert_increasing, assert_unique, unique

TOTAL = 1_000_000
KILL_AT = 300_000
THREADS = 4
TASKS = 20


def test_a_node_killed_with_minus_9_mid_run_costs_no_repeat_and_no_error(mysql_nodes):
    first, second = mysql_nodes
    tag = unique("failover")
    first.create_tag(tag)
    lists = [[] for _ in range(THREADS)]
    errors = []
    # A fresh client gives its first tag the first server as home.
    with idmint.Client([first.url, second.url], timeout=0.5) as client:

        def take(ids):
            try:
                for _ in range(TOTAL // THREADS):
                    ids.append(client.next_id(tag))
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=take, args=(ids,)) for ids in lists]
        for t in threads:
            t.start()
        while sum(map(len, lists)) < KILL_AT and any(t.is_alive() for t in threads):
            time.sleep(0.001)
        issued_before = second.call("GET", f"/v1/tags/{tag}")[1]
        first.kill9()
        for t in threads:
            t.join()
    assert not errors, errors
    assert assert_unique(lists) == TOTAL
    for n, ids in enumerate(lists):
        assert_increasing(ids, f"thread {n}")
    status, shown = second.call("GET", f"/v1/tags/{tag}")
    before = (issued_before.get("segments") or {}).get("ids_issued", 0) if isinstance(issued_before, dict) else 0
    assert shown["segments"]["ids_issued"] > before, f"no failover to the second node: {shown}"


def test_tasks_fail_over_too(mysql_nodes):
    first, second = mysql_nodes
    tag = unique("afailover")
    first.create_tag(tag)
    taken = [0]

    async def run():
        async with idmint.AsyncClient([first.url, second.url], timeout=0.5) as client:

            async def take():
                ids = []
                for k in range(TOTAL // TASKS):
                    ids.append(await client.next_id(tag))
                    taken[0] += 1
                    if k % 1000 == 0:
                        await asyncio.sleep(0)
                return ids

            async def killer():
                while taken[0] < KILL_AT:
                    await asyncio.sleep(0.001)
                first.kill9()

            results = await asyncio.gather(killer(), *(take() for _ in range(TASKS)))
            return results[1:]

    lists = asyncio.run(run())
    assert assert_unique(lists) == TOTAL
    for n, ids in enumerate(lists):
        assert_increasing(ids, f"task {n}")
    assert first.process.poll() is not None, "the first node was not killed"
    status, shown = second.call("GET", f"/v1/tags/{tag}")
    assert shown["segments"]["ids_issued"] > 0, f"no failover to the second node: {shown}"
