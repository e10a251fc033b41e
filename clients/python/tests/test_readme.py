"""The README's examples run: every ```python block of clients/python/README.md is run as
written, its two example servers (``http://10.0.0.1:8080``, ``http://10.0.0.2:8080``)
replaced by two nodes on one SQLite store, after the example's tag (``order``) is made. The
blocks run in order in one namespace, as in a reader's session (the asyncio block uses the
first block's ``import idmint``); a block holding ``await`` runs in an event loop. So the
five lines a service needs cannot drift from what the client does."""

import ast
import asyncio
import inspect
import re
from pathlib import Path

import pytest

import idmint
from conftest import Node, assert_increasing

README = Path(__file__).resolve().parents[1] / "README.md"
EXAMPLE_SERVERS = ("http://10.0.0.1:8080", "http://10.0.0.2:8080")
TAG = "order"


def python_blocks(text: str):
    """The ```python blocks of ``text``: (line of the fence, source)."""
    blocks = []
    for found in re.finditer(r"^```python\n(.*?)^```$", text, re.M | re.S):
        blocks.append((text.count("\n", 0, found.start()) + 1, found.group(1)))
    return blocks


def with_servers(source: str, urls) -> str:
    """``source`` with the example servers replaced by ``urls``; each must be there."""
    for example, url in zip(EXAMPLE_SERVERS, urls):
        assert example in source, f"the README's example no longer names {example}"
        source = source.replace(example, url)
    return source


def run_block(source: str, names: dict) -> None:
    """Runs one block in ``names`` (the blocks above it left theirs there, as a reader's
    session would). A block that awaits runs in an event loop."""
    code = compile(source, str(README), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(code, names))  # top-level `async with` / `await`
    else:
        exec(code, names)


@pytest.fixture
def two_nodes(tmp_path: Path):
    """Two nodes on one SQLite store: a cluster of two, as the README's example has."""
    store = f"sqlite://{tmp_path / 'ids.db'}"
    nodes = []
    try:
        for name in ("a", "b"):
            nodes.append(Node(tmp_path / name, store))
        yield nodes
    finally:
        for node in nodes:
            node.close()


def test_the_readme_names_its_blocks():
    blocks = python_blocks(README.read_text())
    # The five lines a service needs, and the asyncio one.
    assert len(blocks) == 2, [line for line, _ in blocks]
    five = [line for line in blocks[0][1].splitlines() if line.strip()]
    assert len(five) == 5, five


def test_every_python_block_of_the_readme_runs_against_two_nodes(two_nodes):
    two_nodes[0].create_tag(TAG)
    urls = [node.url for node in two_nodes]
    served, names = [], {}
    for line, source in python_blocks(README.read_text()):
        for name in ("order_id", "batch", "ids"):
            names.pop(name, None)
        try:
            run_block(with_servers(source, urls), names)
        except Exception as e:  # noqa: BLE001 - say which block failed
            pytest.fail(f"README.md:{line}: the ```python block failed: {e!r}\n{source}")
        order_id = names.get("order_id")
        assert isinstance(order_id, int) and order_id >= 1, f"README.md:{line}: order_id = {order_id!r}"
        served.append(order_id)
        if "batch" in names:
            batch = names["batch"]
            assert len(batch) == 100, f"README.md:{line}: {len(batch)} ids in the batch"
            assert_increasing([order_id] + list(batch), f"README.md:{line}")
            served.extend(batch)
        client = names["ids"]
        with pytest.raises(idmint.ClientClosed):  # closed by the block: close() or its `with`
            if isinstance(client, idmint.AsyncClient):
                asyncio.run(client.next_id(TAG))
            else:
                client.next_id(TAG)
    assert len(served) == len(set(served)), "an id served twice by the README's blocks"
