"""A strict tag: the server refuses it ranges (``409 strict_tag``), so the client asks each
of its ids of a server, never caching one: ids taken through the client and on the node's
Leaf route in turn increase in real time, on both APIs."""

import asyncio

import idmint
from conftest import unique


def test_a_strict_tags_ids_increase_in_real_time_across_the_client_and_the_node(node):
    tag = unique("strict")
    created = node.create_tag(tag, strict=True)
    assert created["kind"] == "strict", created
    with idmint.Client([node.url]) as client:
        last = 0
        for round in range(40):
            taken = client.next_id(tag) if round % 2 == 0 else node.leaf_id(tag)
            assert taken > last, f"round {round}: {taken} after {last}"
            last = taken
        assert client.next_ids(tag, 3) == [last + 1, last + 2, last + 3]
        assert client.try_next_id(tag) is None  # never from a cache
        assert node.leaf_id(tag) == last + 4


def test_a_strict_tag_through_the_asyncio_client(node):
    tag = unique("astrict")
    node.create_tag(tag, strict=True)

    async def run():
        async with idmint.AsyncClient([node.url]) as client:
            last = 0
            for round in range(20):
                taken = await client.next_id(tag) if round % 2 == 0 else node.leaf_id(tag)
                assert taken > last, f"round {round}: {taken} after {last}"
                last = taken
            assert await client.next_ids(tag, 2) == [last + 1, last + 2]

    asyncio.run(run())
