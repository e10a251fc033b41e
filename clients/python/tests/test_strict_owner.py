"""The client asks a strict tag's owner directly. Two nodes on the shared MariaDB; the owner
is found from the nodes' own answers (``idmint-node``, ``idmint-owner``) and the client is
given the other node first. After a few takes that learn the names, every take goes to the
owner: the other node's request count (its own ``/metrics``) does not move while the owner's
grows by every take, and the ids increase. Then the owner is killed with -9 mid-run: the
takes go on through the other node, no id twice."""

import asyncio
import threading
import time

import idmint
from conftest import assert_increasing, assert_unique, unique

ROUTE = "/v1/segment/{tag}"  # the route label of the client's strict takes
WARM_UP = 5
TAKES = 200


def owner_first(mysql_nodes, tag):
    """The tag's owner and the other node, as the nodes name them: both name one owner,
    which is one of them."""
    a, b = mysql_nodes
    (a_name, a_owner), (b_name, b_owner) = a.named(tag), b.named(tag)
    assert a_name and b_name and a_owner, "a strict take's answer names no node or no owner"
    assert a_owner == b_owner, f"the nodes name different owners: {a_owner}, {b_owner}"
    assert a_owner in (a_name, b_name), f"the owner {a_owner} is neither {a_name} nor {b_name}"
    return (a, b) if a_owner == a_name else (b, a)


def test_after_a_few_takes_every_strict_take_goes_to_the_owner(mysql_nodes):
    tag = unique("owner")
    mysql_nodes[0].create_tag(tag, strict=True)
    owner, other = owner_first(mysql_nodes, tag)
    with idmint.Client([other.url, owner.url]) as client:
        ids = [client.next_id(tag) for _ in range(WARM_UP)]
        other_before, owner_before = other.requests(ROUTE), owner.requests(ROUTE)
        ids += [client.next_id(tag) for _ in range(TAKES)]
        assert other.requests(ROUTE) == other_before, "takes went to the node that is not the owner"
        answered = owner.requests(ROUTE) - owner_before
        assert answered >= TAKES, f"the owner answered {answered} of {TAKES} takes"
    assert_increasing(ids, "the client's takes")


def test_the_asyncio_client_asks_the_owner_too(mysql_nodes):
    tag = unique("aowner")
    mysql_nodes[0].create_tag(tag, strict=True)
    owner, other = owner_first(mysql_nodes, tag)

    async def run():
        async with idmint.AsyncClient([other.url, owner.url]) as client:
            ids = [await client.next_id(tag) for _ in range(WARM_UP)]
            before = other.requests(ROUTE), owner.requests(ROUTE)
            ids += [await client.next_id(tag) for _ in range(TAKES)]
            return ids, before

    ids, (other_before, owner_before) = asyncio.run(run())
    assert other.requests(ROUTE) == other_before, "takes went to the node that is not the owner"
    assert owner.requests(ROUTE) - owner_before >= TAKES
    assert_increasing(ids, "the client's takes")


def test_the_owner_killed_with_minus_9_mid_run_the_takes_go_on_elsewhere(mysql_nodes):
    tag = unique("owner-killed")
    mysql_nodes[0].create_tag(tag, strict=True)
    owner, other = owner_first(mysql_nodes, tag)
    lists = [[], []]
    errors = []
    stop_at = [float("inf")]
    # The other node takes over one lease TTL and margin after the kill (about 4 s): a take
    # waits for it there, within the client's timeout.
    with idmint.Client([other.url, owner.url], timeout=5.0) as client:

        def take(ids):
            try:
                while sum(map(len, lists)) < stop_at[0]:
                    ids.append(client.next_id(tag))
            except Exception as e:  # reported below
                errors.append(e)

        threads = [threading.Thread(target=take, args=(ids,)) for ids in lists]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(map(len, lists)) < 200 and not errors:
            assert time.monotonic() < deadline, "too slow before the kill"
            time.sleep(0.001)
        asked = owner.requests(ROUTE)
        assert asked >= 150, f"only {asked} takes asked of the owner before the kill"
        other_before = other.requests(ROUTE)
        owner.kill9()
        stop_at[0] = sum(map(len, lists)) + 300
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert assert_unique(lists) >= 500
    for n, ids in enumerate(lists):
        assert_increasing(ids, f"thread {n}")
    assert other.requests(ROUTE) > other_before, "no take went to the other node after the kill"
