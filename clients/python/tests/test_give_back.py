"""The give-back at close: the ids the client leased and did not hand out go back to the
server that leased them (with the leases' proofs), so after a restart of the node the next
id it serves is the first the client did not hand out; both APIs, and the context
managers."""

import asyncio

import idmint
from conftest import unique


def test_after_close_and_a_restart_the_node_continues_after_the_last_id_handed_out(own_node):
    tag = unique("back")
    # Segments of the node larger than the client's leases, so the give-back lands in the
    # node's current segment (a node takes back only the last ids it handed out of it).
    own_node.create_tag(tag, step=10_000)
    with idmint.Client([own_node.url], min_lease=100) as client:
        taken = [client.next_id(tag) for _ in range(150)]  # a second lease is fetched ahead
    assert taken == list(range(1, 151))
    own_node.restart()
    assert own_node.leaf_id(tag) == 151, "unused leased ids were not given back"


def test_the_asyncio_client_gives_back_at_close_too(own_node):
    tag = unique("aback")
    own_node.create_tag(tag, step=10_000)

    async def run():
        async with idmint.AsyncClient([own_node.url], min_lease=100) as client:
            return [await client.next_id(tag) for _ in range(42)]

    taken = asyncio.run(run())
    assert taken == list(range(1, 43))
    own_node.restart()
    assert own_node.leaf_id(tag) == 43, "unused leased ids were not given back"


def test_a_replayed_or_forged_give_back_returns_nothing(node):
    tag = unique("replay")
    node.create_tag(tag, step=10_000)
    status, leased = node.call("GET", f"/v1/segment/{tag}/ranges?count=100")
    assert status == 200, leased
    lease = leased["ranges"][0]
    body = {"start": lease["start"] + 10, "end": lease["end"], "leases": [lease]}
    assert node.call("POST", f"/v1/segment/{tag}/return", body) == (200, {"returned": 90})
    assert node.leaf_id(tag) == lease["start"] + 10
    # Replayed, the give-back takes nothing back; with a forged proof it is refused.
    assert node.call("POST", f"/v1/segment/{tag}/return", body) == (200, {"returned": 0})
    forged = dict(lease, proof="%016x" % (int(lease["proof"], 16) ^ 1))
    status, refused = node.call("POST", f"/v1/segment/{tag}/return", dict(body, leases=[forged]))
    assert status == 400 and refused["error"]["code"] == "bad_lease", refused
