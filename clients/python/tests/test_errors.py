"""Typed errors: an unknown tag and an exhausted tag raise theirs at once (never retried on
other servers, never a sentinel), bad input is refused before any call, a closed client
refuses takes, and Unavailable carries each server's reason."""

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import idmint
from conftest import dead_url, unique

ID_MAX = (1 << 63) - 1


def test_an_unknown_tag_raises_unknown_tag_at_once_and_is_served_once_created(node, black_hole):
    tag = unique("ghost")
    with idmint.Client([node.url, black_hole.url], timeout=2.0) as client:
        started = time.monotonic()
        with pytest.raises(idmint.UnknownTag) as raised:
            client.next_id(tag)
        assert raised.value.tag == tag and "idmint tag create" in str(raised.value)
        with pytest.raises(idmint.UnknownTag):
            client.next_ids(tag, 3)
        # Were it retried, the silent server would cost a whole timeout.
        assert time.monotonic() - started < 1.0
        assert black_hole.accepted == 0, "the next server was asked"
        node.create_tag(tag)
        assert client.next_id(tag) == 1


def test_an_unknown_tag_raises_unknown_tag_in_asyncio(node):
    async def run():
        async with idmint.AsyncClient([node.url]) as client:
            with pytest.raises(idmint.UnknownTag):
                await client.next_id(unique("ghost"))

    asyncio.run(run())


def test_an_exhausted_tag_hands_out_its_last_ids_then_raises_exhausted_tag(node):
    tag = unique("spent")
    start = ID_MAX - 1_000_000
    node.create_tag(tag, step=1_000_000, start=start)
    with idmint.Client([node.url]) as client:
        ids = []
        with pytest.raises(idmint.ExhaustedTag) as raised:
            for _ in range(2_000_000):
                ids.append(client.next_id(tag))
        assert raised.value.tag == tag and "exhausted" in str(raised.value)
        # Every id handed out lies below the end, in order. (A lease larger than the ids left
        # is refused as exhausted by the server, which strands those ids: a gap, never a
        # repeat.)
        assert ids == list(range(start, start + len(ids))) and ids[-1] < ID_MAX
        assert len(ids) >= 800_000, len(ids)
        # Final: asked again, the same error, not Unavailable.
        with pytest.raises(idmint.ExhaustedTag):
            client.next_id(tag)

    async def run():
        async with idmint.AsyncClient([node.url]) as client:
            with pytest.raises(idmint.ExhaustedTag):
                await client.next_id(tag)

    asyncio.run(run())


def test_bad_input_is_refused_before_any_call(black_hole):
    with idmint.Client([black_hole.url]) as client:
        for bad in ["", " lead", "x\ny", "idmint.key.x", "t" * 129]:
            with pytest.raises(idmint.BadTag):
                client.next_id(bad)
        for count in [0, 100_001, -1]:
            with pytest.raises(idmint.InvalidArgument):
                client.next_ids("order", count)
    assert black_hole.accepted == 0
    for settings in [dict(servers=[]), dict(servers=["https://h:1"]), dict(servers=["http://h:1/v1"]),
                     dict(servers=["http://h:1"], timeout=0), dict(servers=["http://h:1"], min_lease=0),
                     dict(servers=["http://h:1"], token="s3cret token")]:
        with pytest.raises(idmint.BadConfig) as raised:
            idmint.Client(**settings)
        assert "s3cret" not in str(raised.value)


def test_a_closed_client_raises_client_closed_never_an_id(node):
    tag = unique("closed")
    node.create_tag(tag)
    client = idmint.Client([node.url])
    client.next_id(tag)
    client.close()
    client.close()  # idempotent
    for take in (lambda: client.next_id(tag), lambda: client.try_next_id(tag), lambda: client.next_id("other")):
        with pytest.raises(idmint.ClientClosed):
            take()


class _Unavailable(BaseHTTPRequestHandler):
    """A server whose store is down: every GET answers idmint's 503 with its reason."""

    def do_GET(self):  # noqa: N802 - http.server's name
        body = json.dumps({"error": {"code": "unavailable", "message": "the store did not answer in time"}})
        self.send_response(503)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_unavailable_carries_each_servers_reason_within_the_bound(black_hole):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    failing = "http://127.0.0.1:%d" % server.server_address[1]
    dead = dead_url()
    try:
        with idmint.Client([failing, dead, black_hole.url], timeout=0.3) as client:
            started = time.monotonic()
            with pytest.raises(idmint.Unavailable) as raised:
                client.next_id("order")
            elapsed = time.monotonic() - started
            reason = raised.value.reason
            assert "the store did not answer in time" in reason, reason
            assert failing in reason and dead in reason and black_hole.url in reason, reason
            # Three servers, one timeout of 0.3 s among them, and the wait's margin.
            assert elapsed < 3 * 0.3 + 0.5, elapsed
            with pytest.raises(idmint.Unavailable):
                client.snowflake_id()
    finally:
        server.shutdown()
