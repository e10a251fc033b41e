"""Snowflake ids, UUID v7 and ULIDs, asked of a server (no local cache)."""

import asyncio
import re

import idmint


def test_snowflake_uuid7_and_ulid_pass_through(node):
    node.wait_ready()
    with idmint.Client([node.url]) as client:
        flakes = client.snowflake_ids(100) + [client.snowflake_id()]
        assert all(a < b for a, b in zip(flakes, flakes[1:])), flakes
        uuids = client.uuid7s(50) + [client.uuid7()]
        assert all(u.version == 7 for u in uuids)
        assert all(a < b for a, b in zip(uuids, uuids[1:]))
        ulids = client.ulids(50) + [client.ulid()]
        assert all(re.fullmatch(r"[0-7][0-9A-HJKMNP-TV-Z]{25}", u) for u in ulids)
        assert all(a < b for a, b in zip(ulids, ulids[1:]))

    async def run():
        async with idmint.AsyncClient([node.url]) as client:
            assert (await client.uuid7()).version == 7
            assert len(await client.ulids(3)) == 3
            assert await client.snowflake_id() > flakes[-1]

    asyncio.run(run())
