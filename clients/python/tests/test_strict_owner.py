"""The client asks a strict tag's owner directly. Two nodes on the shared MariaDB; the owner
is found from the nodes' own answers (``idmint-node``, ``idmint-owner``) and the client is
given the other node first. After a few takes that learn the names, every take goes to the
owner: the other node's request count (its own ``/metrics``) does not move while the owner's
grows by every take, and the ids increase. Then the owner is killed with -9 mid-run: the
takes go on through the other node, no id twice. And the rule itself, without a server."""

import asyncio
import threading
import time

import idmint
from idmint._core import Owners
from idmint._wire import Named
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


class _Health:
    """Endpoints' health as ``Owners.pick`` reads it: the servers in ``up`` are up."""

    def __init__(self, up):
        self.up = set(up)

    def is_up(self, index):
        return index in self.up


def test_a_take_asks_the_owner_then_the_servers_not_named_yet():
    owners = Owners(3)
    everyone = _Health([0, 1, 2])
    assert owners.pick("t", everyone) is None, "no owner known"
    # Server 0 answers: it is "n0" and the owner is "n2", a name no server gave yet.
    owners.learn("t", 0, "n0", "n2")
    assert owners.pick("t", everyone) in (1, 2), "a server not named yet"
    assert owners.pick("t", _Health([0, 2])) == 2, "server 1 is down: never asked"
    owners.answered("t", 2, 2, Named([7], "n2", "n2"))
    assert owners.pick("t", everyone) == 2
    assert owners.pick("t", _Health([0, 1])) is None, "the owner is down: the failover order"
    # Asked first, the owner did not answer (server 0 did, naming no owner): forgotten.
    owners.answered("t", 2, 0, Named([8], "n0", None))
    assert owners.pick("t", everyone) is None


def test_a_name_belongs_to_the_server_that_gave_it_last():
    owners = Owners(2)
    owners.learn("t", 0, "n", "n")
    assert owners.pick("t", _Health([0, 1])) == 0
    owners.learn("t", 1, "n", "n")  # the node now answers at server 1's address
    assert owners.pick("t", _Health([0, 1])) == 1
    assert owners.pick("t", _Health([1])) == 1
