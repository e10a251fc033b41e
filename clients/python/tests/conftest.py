"""The real server for the client's tests: ``idmint serve`` started from the binary
``IDMINT_BIN`` names (else the workspace's ``target/debug/idmint``), on an SQLite store in a
temporary directory, or on the shared MariaDB (``IDMINT_TEST_MYSQL_URL``, else
``mysql://root@127.0.0.1:3306/test`` when it answers) for the two-node failover test.

A test that cannot run records why in ``$IDMINT_TEST_SKIP_DIR`` (one ``REASON<TAB>TEST``
line, the format of ``crates/idmint-testkit``), so ``scripts/test`` lists it and CI fails on
it. Tests share one SQLite node and tell their data apart by tag names unique to the run.
"""

import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[3]
ADMIN_TOKEN = "python-client-admin-token-0123456789"
RUN = uuid.uuid4().hex[:8]
NO_MARIADB = (
    "no MariaDB for the Python client's failover test; set IDMINT_TEST_MYSQL_URL or run one "
    "on 127.0.0.1:3306 (user root, database test)"
)


def unique(name: str) -> str:
    """A tag name unique to this run (the MariaDB store is shared)."""
    return f"py-{name}-{RUN}-{uuid.uuid4().hex[:6]}"


def binary() -> Path:
    """The server under test."""
    path = Path(os.environ.get("IDMINT_BIN") or ROOT / "target" / "debug" / "idmint")
    if not path.is_absolute():
        path = ROOT / path
    if not path.exists():
        pytest.fail(f"no idmint binary at {path}: build it (cargo build -p idmint-cli) or set IDMINT_BIN")
    return path


class Node:
    """One ``idmint serve`` process: its URL, its admin calls, its stop and restart."""

    def __init__(self, directory: Path, store: str, env: Optional[Dict[str, str]] = None):
        """Starts the node (``--listen 127.0.0.1:0``) in ``directory`` on ``store``."""
        self.directory = directory
        self.store = store
        self.env = env or {}
        self.process: Optional[subprocess.Popen] = None
        self.url = ""
        self.start()

    def start(self) -> None:
        """Starts (or restarts) the process and reads the address it announces."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("IDMINT_") and k != "RUST_LOG"}
        env.update(
            IDMINT_ADMIN_TOKEN=ADMIN_TOKEN,
            IDMINT_STORE=self.store,
            IDMINT_SNOWFLAKE_TIME_WINDOW_MS="100",
            IDMINT_SNOWFLAKE_LEASE_MARGIN_MS="100",
        )
        env.update(self.env)
        self.directory.mkdir(parents=True, exist_ok=True)
        log = open(self.directory / "serve.log", "ab")
        self.process = subprocess.Popen(
            [str(binary()), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(self.directory / "data")],
            cwd=self.directory,
            env=env,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        log.close()
        line = self.process.stdout.readline().decode()
        prefix = "idmint listening on "
        if not line.startswith(prefix):
            self.process.kill()
            raise RuntimeError(f"serve did not start: {line!r}\n{self.log()[-3000:]}")
        self.url = line[len(prefix) :].strip()

    def log(self) -> str:
        """The node's log so far."""
        return (self.directory / "serve.log").read_text(errors="replace")

    def kill9(self) -> None:
        """``kill -9``: no give-back, no drain."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        """SIGTERM: the graceful stop, which gives the node's unissued ids to the store."""
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(20) == 0, self.log()[-3000:]

    def restart(self) -> None:
        """A graceful stop, then a start on the same store and data directory."""
        self.stop()
        self.start()

    def call(self, method: str, path: str, body: Any = None, admin: bool = False) -> Tuple[int, Any]:
        """An HTTP call; the status and the decoded JSON (or text) answer."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("content-type", "application/json")
        if admin:
            request.add_header("authorization", f"Bearer {ADMIN_TOKEN}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode()

    def create_tag(self, tag: str, step: int = 1000, **extra: Any) -> dict:
        """``POST /v1/tags`` with the admin token."""
        status, body = self.call("POST", "/v1/tags", dict(tag=tag, step=step, **extra), admin=True)
        assert status == 201, body
        return body

    def named(self, tag: str) -> Tuple[Optional[str], Optional[str]]:
        """A take of strict ``tag`` asked of this node: its ``idmint-node`` and
        ``idmint-owner`` headers."""
        request = urllib.request.Request(f"{self.url}/v1/segment/{tag}?count=1")
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
            return response.headers.get("idmint-node"), response.headers.get("idmint-owner")

    def requests(self, route: str) -> int:
        """The HTTP requests this node counted on ``route`` (a route template), any method and
        status, from its own ``/metrics``: ``idmint_http_requests_total{route="..."}``."""
        status, text = self.call("GET", "/metrics", admin=True)
        assert status == 200, text
        label = f'route="{route}"'
        return sum(
            int(float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines()
            if line.startswith("idmint_http_requests_total{") and label in line
        )

    def leaf_id(self, tag: str) -> int:
        """One id on Leaf's route, as a Leaf client takes it."""
        status, body = self.call("GET", f"/api/segment/get/{tag}")
        assert status == 200, body
        return int(body)

    def wait_ready(self) -> None:
        """Until ``/ready`` answers 200 (the snowflake generator's start-up delay)."""
        deadline = time.monotonic() + 15
        while self.call("GET", "/ready")[0] != 200:
            assert time.monotonic() < deadline, "node not ready"
            time.sleep(0.05)

    def close(self) -> None:
        """Stops the process if it runs."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory):
    """One node on an SQLite store, shared by the tests that use their own tags."""
    directory = tmp_path_factory.mktemp("node")
    started = Node(directory, f"sqlite://{directory / 'ids.db'}")
    yield started
    started.close()


@pytest.fixture
def own_node(tmp_path: Path):
    """A node of this test's own (to restart it), on an SQLite store."""
    started = Node(tmp_path, f"sqlite://{tmp_path / 'ids.db'}")
    yield started
    started.close()


@pytest.fixture(scope="session")
def mysql_url() -> str:
    """The shared MariaDB's URL, or the test is skipped (and the skip recorded)."""
    url = os.environ.get("IDMINT_TEST_MYSQL_URL")
    if url:
        return url
    try:
        socket.create_connection(("127.0.0.1", 3306), timeout=1).close()
    except OSError:
        pytest.skip(NO_MARIADB)
    return "mysql://root@127.0.0.1:3306/test"


@pytest.fixture
def mysql_nodes(tmp_path: Path, mysql_url: str):
    """Two nodes on the shared MariaDB (snowflake off: no worker ids taken from it)."""
    env = {"IDMINT_SNOWFLAKE_ENABLED": "false"}
    nodes: List[Node] = []
    try:
        for name in ("a", "b"):
            nodes.append(Node(tmp_path / name, mysql_url, env))
        yield nodes
    finally:
        for started in nodes:
            started.close()


class BlackHole:
    """A TCP port that accepts connections and never answers: a server that hangs."""

    def __init__(self) -> None:
        """Listens on a free loopback port."""
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.url = "http://127.0.0.1:%d" % self.socket.getsockname()[1]
        self.accepted = 0
        self._held: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.accepted += 1
            self._held.append(connection)

    def close(self) -> None:
        """Stops listening and drops the connections."""
        self.socket.close()
        for connection in self._held:
            connection.close()


@pytest.fixture
def black_hole():
    """A server that accepts and never answers."""
    hole = BlackHole()
    yield hole
    hole.close()


def dead_url() -> str:
    """A loopback port nothing listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def assert_increasing(ids: List[int], what: str) -> None:
    """Every id above the one before."""
    for a, b in zip(ids, ids[1:]):
        assert a < b, f"{what}: {b} after {a}"


def assert_unique(lists: List[List[int]]) -> int:
    """No id twice across ``lists``; how many ids in all."""
    total = sum(len(ids) for ids in lists)
    seen = set()
    for ids in lists:
        seen.update(ids)
    assert len(seen) == total, f"{total - len(seen)} ids handed out twice"
    return total


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Records a skipped test where ``scripts/test`` reads skips (testkit's format)."""
    directory = os.environ.get("IDMINT_TEST_SKIP_DIR")
    if not report.skipped or not directory:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.replace("Skipped: ", "", 1).replace("\t", " ").replace("\n", " ")
    Path(directory).mkdir(parents=True, exist_ok=True)
    with open(Path(directory) / f"idmint-python-{os.getpid()}.tsv", "a") as out:
        out.write(f"{reason}\tidmint-python: {report.nodeid}\n")
