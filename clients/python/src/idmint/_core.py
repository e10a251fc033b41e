"""What the synchronous and the asyncio clients share, without I/O: the settings, the
servers' health and order, and each tag's buffer of leased ranges.

- **The take** is ``next(range.counter)`` on the tag's current range, then one compare: an
  ``itertools.count`` advances atomically under the GIL, so concurrent threads and tasks
  never get one id twice, and nothing locks. A take past the preload point (a tenth of the
  range) starts the fetch of the next range once; a take past the end goes to the client's
  slow path, which switches to the next range under the tag's lock or waits for it. On a
  free-threaded build (no GIL) every take holds the tag's lock.
- **The freeze** (at close) sets a range's bounds to 0 *before* it reads the counter once
  more: every take compares after it counted, so an id handed out is below that reading,
  and everything from the reading to the range's end is given back.
- **The mark**: ranges from different servers are unique but not ordered, so after a
  failover a server may lease ids below those this client handed out. Each tag keeps the
  highest lease end it accepted and skips (wastes, never serves) leases below it: a
  client's ids of a tag increase, across failovers too.
- **The owner**: every answer of a strict take names the server that answered
  (``idmint-node``) and the tag's owner (``idmint-owner``); ``Owners`` remembers both and
  picks the configured server whose name is the owner's, so the take skips the forward a
  non-owner makes. A name only picks among the configured servers, never adds one.
- **The lease size** follows consumption: ``rate x lease_duration`` ids within
  ``[min_lease, count_max]``, at most ``LEASE_GROWTH_MAX`` times the previous lease.

This module must not send a request, sleep or start a thread or task.
"""

import itertools
import sys
import threading
import time
import unicodedata
from collections import deque
from typing import Deque, Dict, List, Optional, Sequence, Tuple

from . import limits
from ._wire import Lease, Named
from .errors import BadConfig, BadTag, IdmintError, InvalidArgument

#: Whether takes may rely on the GIL (every build but the free-threaded ones).
GIL = getattr(sys, "_is_gil_enabled", lambda: True)()

# Bidirectional marks and overrides a tag may not hold (the server's TagName rule).
_BIDI = frozenset("\u200e\u200f\u061c\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


class Settings:
    """A client's checked settings (see ``Client`` for what each means)."""

    def __init__(
        self,
        servers: Sequence[str],
        token: Optional[str],
        timeout_s: float,
        min_lease: int,
        lease_duration_s: float,
    ):
        """Checks every setting; raises :class:`BadConfig` naming the one out of range."""
        if isinstance(servers, str):
            servers = [servers]
        urls = [checked_url(s) for s in servers]
        if not urls:
            raise BadConfig("servers", "no idmint server given; give http://host:port")
        if len(urls) > limits.ENDPOINTS_MAX:
            raise BadConfig("servers", f"{len(urls)} given; give at most {limits.ENDPOINTS_MAX}")
        if token is not None:
            visible = all(33 <= ord(c) <= 126 for c in token)
            if not token or len(token) > limits.TOKEN_LEN_MAX or not visible:
                raise BadConfig(
                    "token",
                    f"a token is 1 to {limits.TOKEN_LEN_MAX} visible ASCII characters, no spaces",
                )
        if not limits.CALL_TIMEOUT_S_MIN <= timeout_s <= limits.CALL_TIMEOUT_S_MAX:
            raise BadConfig(
                "timeout",
                f"{timeout_s} s is out of range; use {limits.CALL_TIMEOUT_S_MIN} to "
                f"{limits.CALL_TIMEOUT_S_MAX} s",
            )
        if not isinstance(min_lease, int) or not 1 <= min_lease <= limits.BATCH_COUNT_MAX:
            raise BadConfig("min_lease", f"{min_lease} is out of range; use 1 to {limits.BATCH_COUNT_MAX}")
        if not limits.LEASE_DURATION_S_MIN <= lease_duration_s <= limits.LEASE_DURATION_S_MAX:
            raise BadConfig(
                "lease_duration",
                f"{lease_duration_s} s is out of range; use {limits.LEASE_DURATION_S_MIN} to "
                f"{limits.LEASE_DURATION_S_MAX} s",
            )
        self.urls = urls
        self.headers = {"authorization": f"Bearer {token}"} if token else {}
        self.timeout_s = float(timeout_s)
        self.deadline_s = min(timeout_s * limits.CALL_ATTEMPTS_MAX, limits.CALL_DEADLINE_S_MAX)
        self.min_lease = min_lease
        self.lease_duration_s = float(lease_duration_s)


def checked_url(url: str) -> str:
    """``http://host:port`` without a trailing slash; :class:`BadConfig` for anything else."""
    trimmed = url.strip().rstrip("/")
    if trimmed.startswith("https://"):
        raise BadConfig(
            "servers",
            f"{url!r}: the client speaks plain http://; terminate TLS in front of idmint and "
            f"give its http:// address on the inner network",
        )
    authority = trimmed[len("http://") :] if trimmed.startswith("http://") else ""
    if not authority or any(c in authority for c in "/?#@ "):
        raise BadConfig("servers", f"{url!r}: give a server as http://host:port, no path")
    return trimmed


def checked_tag(tag: str) -> str:
    """The tag if idmint accepts it (1-128 UTF-8 bytes, no control or bidi-override
    character, no leading or trailing whitespace, not ``idmint.key.*`` in any case), else
    :class:`BadTag` before any call."""
    if not isinstance(tag, str):
        raise BadTag(repr(tag), "a tag is a str")
    reason = None
    if not tag:
        reason = "empty; a tag is 1 to 128 bytes of UTF-8"
    elif len(tag.encode("utf-8", "surrogatepass")) > limits.TAG_BYTES_MAX:
        reason = f"longer than {limits.TAG_BYTES_MAX} bytes of UTF-8"
    elif tag != tag.strip():
        reason = "leading or trailing whitespace"
    elif any(unicodedata.category(c) in ("Cc", "Cs") or c in _BIDI for c in tag):
        reason = "a control, surrogate or bidi-override character"
    elif tag[:11].encode("utf-8", "surrogatepass").lower() == b"idmint.key.":
        reason = "names starting with idmint.key. are reserved"
    if reason:
        raise BadTag(tag, reason)
    return tag


def checked_count(count: int) -> int:
    """``count`` if it is 1 to ``BATCH_COUNT_MAX``, else :class:`InvalidArgument`."""
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= limits.BATCH_COUNT_MAX:
        raise InvalidArgument(
            "bad_count", f"count {count!r} is out of range; ask for 1 to {limits.BATCH_COUNT_MAX}"
        )
    return count


class Endpoints:
    """The servers and their health. Calls of a tag start at the tag's *home* server and
    stay there while it answers (so the tag's leases come from one server's increasing
    segments); tags get their homes round robin, and so do calls without a tag. A server
    that fails is tried last for a backoff that doubles per failure in a row."""

    def __init__(self, urls: List[str]):
        """The servers, all healthy."""
        self.urls = urls
        self._lock = threading.Lock()
        self._failures = [0] * len(urls)
        self._down_until = [0.0] * len(urls)
        self._next = itertools.count()

    def home(self) -> int:
        """A server for a new tag, or for a call without one: the next in turn."""
        return next(self._next) % len(self.urls)

    def order(self, home: int) -> List[int]:
        """Every server once, from ``home`` round the list, those down last (soonest back
        first)."""
        now = time.monotonic()
        n = len(self.urls)
        ring = [(home + k) % n for k in range(n)]
        with self._lock:
            up = [i for i in ring if self._down_until[i] <= now]
            down = sorted((i for i in ring if self._down_until[i] > now), key=lambda i: self._down_until[i])
        return up + down

    def is_up(self, index: int) -> bool:
        """Whether server ``index`` is not marked down now."""
        with self._lock:
            return self._down_until[index] <= time.monotonic()

    def succeeded(self, index: int) -> None:
        """Server ``index`` answered: healthy again."""
        with self._lock:
            self._failures[index] = 0
            self._down_until[index] = 0.0

    def failed(self, index: int) -> None:
        """Server ``index`` failed: tried last for a backoff."""
        with self._lock:
            self._failures[index] += 1
            backoff = limits.DOWN_BACKOFF_S_MIN * 2 ** min(self._failures[index] - 1, 16)
            self._down_until[index] = time.monotonic() + min(backoff, limits.DOWN_BACKOFF_S_MAX)


class Owners:
    """Which configured server a strict tag's take asks first. The servers name themselves
    and the tag's owner on every strict answer; any node but the owner forwards the take to
    it, so asking the owner directly saves a hop. A hint: an owner that moved or died costs
    one attempt, then the take goes on in the failover order (every node answers in order).
    A name never adds a server: it only picks among those the client was configured with.
    The lock guards the two tables only; nothing here waits on I/O."""

    def __init__(self, servers: int):
        """No server named yet, no owner known."""
        self._lock = threading.Lock()
        #: Each server's own name (its ``idmint-node``), ``None`` until it gave one.
        self._names: List[Optional[str]] = [None] * servers
        #: Each strict tag's owner as the servers last named it.
        self._owners: Dict[str, str] = {}
        self._probe = itertools.count()

    def pick(self, tag: str, endpoints: "Endpoints") -> Optional[int]:
        """The server a take of strict ``tag`` asks first: the owner's if it is up; when the
        owner named is none of the servers named so far, one that is up and not named yet
        (its answer names it, so the owner's server is found within a few takes); else
        ``None`` (the failover order)."""
        with self._lock:
            owner = self._owners.get(tag)
            names = list(self._names)
        if owner is None:
            return None
        if owner in names:
            index = names.index(owner)
            return index if endpoints.is_up(index) else None
        n = len(names)
        start = next(self._probe) % n
        for k in range(n):
            index = (start + k) % n
            if names[index] is None and endpoints.is_up(index):
                return index
        return None

    def learn(self, tag: str, index: int, node: Optional[str], owner: Optional[str]) -> None:
        """What an answer of server ``index`` to a take of strict ``tag`` named: the server
        and the owner, each when present (``None``: unchanged)."""
        with self._lock:
            if node is not None and self._names[index] != node:
                # A name is one server's: a server that moved (a restart) takes it over.
                self._names = [None if name == node else name for name in self._names]
                self._names[index] = node
            if owner is not None and (tag in self._owners or len(self._owners) < limits.TAGS_MAX):
                self._owners[tag] = owner

    def answered(self, tag: str, direct: Optional[int], index: int, named: Named) -> None:
        """A take of strict ``tag`` that asked ``direct`` first (``pick``'s choice) was
        answered by server ``index``: the owner is forgotten if it was asked and did not
        answer, then what the answer named is learnt."""
        if direct is not None and index != direct:
            self.forget(tag)
        self.learn(tag, index, named.node, named.owner)

    def forget(self, tag: str) -> None:
        """Forgets ``tag``'s owner (asking it failed): the next take goes in the usual order."""
        with self._lock:
            self._owners.pop(tag, None)


class Range:
    """One leased range in a tag's buffer: ids ``[start, end)`` handed out by ``counter``,
    with the lease (and its server) to give the rest back with."""

    __slots__ = ("counter", "preload_at", "end", "start", "limit", "lease", "endpoint")

    def __init__(self, start: int, end: int, lease: Optional[Lease], endpoint: int):
        """A range from ``start`` (above the tag's mark) to ``end``."""
        self.counter = itertools.count(start)
        self.start = start
        #: The range's end, kept when the freeze zeroes ``end``.
        self.limit = end
        self.end = end
        # The take that passes this starts the next range's fetch (then it is set to end).
        self.preload_at = start + max(1, int((end - start) * limits.PRELOAD_FRACTION))
        self.lease = lease
        self.endpoint = endpoint

    def stop(self) -> None:
        """Stops every take of this range (the close): the bounds are zeroed before
        :meth:`rest` reads the counter, and a take compares after it counted, so every id
        handed out lies below that reading."""
        self.preload_at = 0
        self.end = 0

    def rest(self) -> Optional[Tuple[int, int]]:
        """After :meth:`stop`: the ids not handed out, ``(first, end)``, if any."""
        first = next(self.counter)
        return (first, self.limit) if first < self.limit else None


#: The range of a tag with nothing fetched yet: every take falls through to the slow path.
EMPTY = Range(1, 1, None, -1)
EMPTY.stop()


class TagState:
    """One tag's buffer: the current range, the ranges fetched ahead, the refill in flight
    and what the lease bookkeeping needs. Its fields change under ``lock`` (the take's fast
    path reads ``current`` without it)."""

    def __init__(self, tag: str, home: int):
        """An empty buffer; the first take fetches."""
        self.tag = tag
        # Reentrant: a refill that cannot start (the close shut the pool down) resets its flag
        # under the lock its caller may hold.
        self.lock = threading.RLock()
        #: The synchronous client's waiters wait on it (over ``lock``).
        self.cond = threading.Condition(self.lock)
        #: The asyncio client's waiters wait on it; replaced after every refill.
        self.event: object = None
        self.current = EMPTY
        self.ahead: Deque[Range] = deque()
        #: The ranges already frozen by the close (kept for the give-back).
        self.spent: List[Range] = []
        self.refilling = False
        #: Counts finished refills; a waiter wakes when it moves.
        self.generation = 0
        #: The last refill's error, for the takes that waited on it.
        self.error: Optional[IdmintError] = None
        self.closed = False
        #: The tag is strict: its ids are asked of a server every time.
        self.strict = False
        #: The server this tag's calls start with.
        self.home = home
        #: The highest lease end accepted: leases below it are skipped.
        self.mark = 0
        self.last_lease_at = 0.0
        self.last_lease_size = 0

    def preload_needed(self, taken_from: Range) -> bool:
        """A take passed ``taken_from``'s preload point: whether a refill should start now
        (none ahead, none in flight). Marks it started. Call under ``lock``."""
        if self.closed:
            return False
        taken_from.preload_at = taken_from.end
        if self.ahead or self.refilling:
            return False
        self.refilling = True
        return True

    def switch(self) -> bool:
        """Makes the next range fetched ahead current, if there is one. Call under ``lock``."""
        if not self.ahead or self.closed:
            return False
        self.current = self.ahead.popleft()
        return True

    def lease_size(self, settings: Settings, count_max: int, now: float) -> int:
        """How many ids the next lease asks for: the rate since the last lease times the
        lease duration, within ``[min_lease, count_max]``, growing at most
        ``LEASE_GROWTH_MAX`` times."""
        floor = settings.min_lease
        if self.last_lease_size == 0:
            size = floor
        else:
            elapsed = max(now - self.last_lease_at, 1e-3)
            wanted = int(self.last_lease_size / elapsed * settings.lease_duration_s)
            size = max(floor, min(wanted, self.last_lease_size * limits.LEASE_GROWTH_MAX))
        return max(1, min(size, count_max))

    def accept(self, leases: List[Lease], endpoint: int, asked: int, now: float) -> List[Range]:
        """The ranges of a lease answer above the mark, as buffer ranges (raising the mark);
        those below are skipped. Call under ``lock``."""
        self.last_lease_at = now
        self.last_lease_size = asked
        ranges = []
        for lease in leases:
            if lease.end <= self.mark:
                continue
            # Ranges of one store lie wholly below or above the mark; cut one that straddles
            # it (impossible) rather than serve an id twice.
            start = max(lease.start, self.mark)
            self.mark = lease.end
            ranges.append(Range(start, lease.end, lease, endpoint))
        return ranges

    def install(self, ranges: List[Range]) -> None:
        """Puts a refill's ranges ahead; after the close, stopped and kept for the give-back.
        Call under ``lock``."""
        if self.closed:
            for r in ranges:
                r.stop()
            self.spent.extend(ranges)
        else:
            self.ahead.extend(ranges)

    def freeze(self) -> None:
        """Stops every take of the tag (the close). Call under ``lock``."""
        self.closed = True
        for r in [self.current, *self.ahead]:
            if r is not EMPTY:
                r.stop()
                self.spent.append(r)
        self.current = EMPTY
        self.ahead.clear()

    def unused(self) -> List[Tuple[int, int, Lease, int]]:
        """What the close gives back: ``(first, end, lease, server)`` per frozen range with
        ids left, highest first. Call once, after :meth:`freeze`."""
        pieces = []
        for r in self.spent:
            left = r.rest()
            if left is not None and r.lease is not None:
                pieces.append((left[0], left[1], r.lease, r.endpoint))
        self.spent = []
        pieces.sort(key=lambda p: p[0], reverse=True)
        return pieces


def give_back_groups(
    pieces: List[Tuple[int, int, Lease, int]],
) -> List[Tuple[int, int, int, List[Lease]]]:
    """Pieces (highest first) as give-back calls ``(server, start, end, leases)``: runs of
    contiguous pieces from one server, at most ``RETURN_LEASES_MAX`` leases each, highest
    first. A server takes back only the last ids it handed out, so the highest go first."""
    groups: List[Tuple[int, int, int, List[Lease]]] = []
    for first, end, lease, server in pieces:
        if groups:
            g_server, g_start, g_end, g_leases = groups[-1]
            if g_server == server and end == g_start and len(g_leases) < limits.RETURN_LEASES_MAX:
                groups[-1] = (server, first, g_end, [lease, *g_leases])
                continue
        groups.append((server, first, end, [lease]))
    return groups
