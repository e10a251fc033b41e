"""The synchronous, thread-safe client: :class:`Client`.

Ids of a tag come from ranges leased from the servers (``GET /v1/segment/{tag}/ranges``)
and are handed out of this process's memory (``_core``: a counter step and a compare, no
lock, no call). A background thread (at most ``REFILL_THREADS_MAX``, one refill per tag at a
time) fetches the next range once a tenth of the current one is handed out; a take that
finds the buffer empty waits for that fetch, bounded by the call deadline.
:meth:`Client.close` stops in the order written once: freeze every buffer (no id after it),
let the refills in flight end, give each tag's unused ids back to the servers that leased
them (with their proofs), close the connections.

This module must not parse answers (``_wire``) nor decide a buffer's state (``_core``).
"""

import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

import httpx

from . import _wire, limits
from ._core import GIL, Endpoints, Owners, Range, Settings, TagState, checked_count, checked_tag, give_back_groups
from .errors import ClientClosed, Failure, IdmintError, InvalidArgument, Refused, StrictTag, Unavailable

log = logging.getLogger("idmint")

# What a waiting take adds to the refill's own deadline before it gives up.
_WAIT_MARGIN_S = 0.5


class Client:
    """Ids from idmint servers, handed out from local leased ranges; thread-safe.

    ``servers`` are ``http://host:port`` URLs (at most ``ENDPOINTS_MAX``); ``token`` a bearer
    token for tags guarded by a client token; ``timeout`` (seconds) bounds one call to one
    server, and a call with its failover attempts takes at most ``CALL_ATTEMPTS_MAX`` times
    it; a lease holds ``rate x lease_duration`` ids (seconds) within ``[min_lease,
    BATCH_COUNT_MAX]``. Use it as a context manager, or call :meth:`close`: unused ids then go
    back to the servers.
    """

    def __init__(
        self,
        servers: Sequence[str],
        *,
        token: Optional[str] = None,
        timeout: float = limits.CALL_TIMEOUT_S_DEFAULT,
        min_lease: int = limits.MIN_LEASE_DEFAULT,
        lease_duration: float = limits.LEASE_DURATION_S_DEFAULT,
    ):
        """Checks the settings (:class:`~idmint.errors.BadConfig`); connects lazily."""
        self._settings = Settings(servers, token, timeout, min_lease, lease_duration)
        self._endpoints = Endpoints(self._settings.urls)
        self._owners = Owners(len(self._settings.urls))
        self._http = httpx.Client(
            headers=self._settings.headers,
            timeout=self._settings.timeout_s,
            limits=httpx.Limits(max_connections=limits.REFILL_THREADS_MAX * 2 + 8),
        )
        self._tags: Dict[str, TagState] = {}
        self._tags_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(limits.REFILL_THREADS_MAX, thread_name_prefix="idmint-refill")
        self._count_max = limits.BATCH_COUNT_MAX
        self._closed = False
        self._close_lock = threading.Lock()

    def __enter__(self) -> "Client":
        """The client itself."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Closes the client (gives unused ids back)."""
        self.close()

    def next_id(self, tag: str) -> int:
        """The next id of ``tag``, from the local buffer; waits (bounded) only when it is
        empty. Raises :class:`~idmint.errors.UnknownTag`, :class:`~idmint.errors.ExhaustedTag`,
        :class:`~idmint.errors.Unavailable`, ... never answers a sentinel."""
        state = self._tags.get(tag)
        if state is not None:
            taken_from = state.current
            i = next(taken_from.counter)
            if i < taken_from.preload_at:
                return i
            return self._slow(state, taken_from, i)
        return self._wait(self._state(tag))

    def try_next_id(self, tag: str) -> Optional[int]:
        """The next id of ``tag`` if one is in the local buffer now, else ``None`` (and a
        fetch is started): never blocks, never calls a server itself. A strict tag's ids
        always need a call: ``None``. Raises :class:`~idmint.errors.ClientClosed` after the
        close."""
        state = self._tags.get(tag) or self._state(tag)
        taken_from = state.current
        i = next(taken_from.counter)
        if i < taken_from.preload_at:
            return i
        if i < taken_from.end:
            return self._slow(state, taken_from, i)
        with state.lock:
            if state.closed:
                raise ClientClosed()
            if state.switch():
                taken_from = state.current
                i = next(taken_from.counter)
                if i < taken_from.end:
                    return i
            if not state.refilling and not state.strict:
                state.refilling = True
                self._submit(state)
        return None

    def next_ids(self, tag: str, count: int) -> List[int]:
        """``count`` ids of ``tag`` (1 to ``BATCH_COUNT_MAX``), increasing, from the local
        buffer (a strict tag's in one call)."""
        checked_count(count)
        first = self.next_id(tag)
        state = self._tags[tag]
        if state.strict:
            return [first] + (self._strict_ids(state, count - 1) if count > 1 else [])
        ids = [first]
        take = self.next_id
        for _ in range(count - 1):
            ids.append(take(tag))
        return ids

    def snowflake_id(self) -> int:
        """One snowflake id, asked of a server (``GET /v1/snowflake``)."""
        return self.snowflake_ids(1)[0]

    def snowflake_ids(self, count: int) -> List[int]:
        """``count`` snowflake ids in one call, increasing."""
        return self._direct(_wire.snowflake(checked_count(count)))

    def uuid7(self) -> uuid.UUID:
        """One time-ordered UUID (version 7), made by a server (``GET /v1/uuid``)."""
        return self.uuid7s(1)[0]

    def uuid7s(self, count: int) -> List[uuid.UUID]:
        """``count`` UUIDs v7 in one call, increasing within the server that made them."""
        return self._direct(_wire.uuid7(checked_count(count)))

    def ulid(self) -> str:
        """One ULID (26 characters of Crockford base32), made by a server (``GET /v1/ulid``)."""
        return self.ulids(1)[0]

    def ulids(self, count: int) -> List[str]:
        """``count`` ULIDs in one call, increasing within the server that made them."""
        return self._direct(_wire.ulid(checked_count(count)))

    def close(self) -> None:
        """Stops the client: freezes every tag's buffer (later takes raise
        :class:`~idmint.errors.ClientClosed`), lets the refills in flight end, gives the
        unused ids back to the servers that leased them (taken back where the server can
        prove it safe, else wasted, never repeated), closes the connections. Idempotent."""
        with self._close_lock:
            with self._tags_lock:
                if self._closed:
                    return
                self._closed = True
                states = list(self._tags.values())
            for state in states:
                with state.cond:
                    state.freeze()
                    state.cond.notify_all()
            self._pool.shutdown(wait=True)
            for state in states:
                self._give_back(state)
            self._http.close()

    # The paths below the fast one.

    def _state(self, tag: str) -> TagState:
        state = self._tags.get(tag)
        if state is not None:
            return state
        checked_tag(tag)
        with self._tags_lock:
            if self._closed:
                raise ClientClosed()
            state = self._tags.get(tag)
            if state is None:
                if len(self._tags) >= limits.TAGS_MAX:
                    raise Refused("too_many_tags", f"this client already serves {limits.TAGS_MAX} tags")
                state = TagState(tag, self._endpoints.home())
                self._tags[tag] = state
        return state

    def _slow(self, state: TagState, taken_from: Range, i: int) -> int:
        """A take past the fast path's bound: within the range (start the preload) or past it
        (switch or wait)."""
        if i < taken_from.end:
            with state.lock:
                start = state.preload_needed(taken_from)
            if start:
                self._submit(state)
            return i
        return self._wait(state)

    def _wait(self, state: TagState) -> int:
        """The next id once the buffer has one: switches to a range fetched ahead, or starts a
        refill and waits for it (bounded); raises the refill's error."""
        deadline = time.monotonic() + self._settings.deadline_s + _WAIT_MARGIN_S
        with state.cond:
            started = state.generation
            while True:
                if state.closed:
                    raise ClientClosed()
                taken_from = state.current
                i = next(taken_from.counter)
                if i < taken_from.end:
                    if i >= taken_from.preload_at and state.preload_needed(taken_from):
                        self._submit(state)
                    return i
                if state.switch():
                    continue
                if state.strict:
                    break
                if state.generation != started and state.error is not None:
                    raise state.error
                if not state.refilling:
                    state.refilling = True
                    self._submit(state)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise Unavailable(f"tag {state.tag}: no range arrived within {self._settings.deadline_s + _WAIT_MARGIN_S:.1f} s")
                state.cond.wait(left)
        return self._strict_ids(state, 1)[0]

    def _submit(self, state: TagState) -> None:
        """Starts a refill of ``state`` in the background (its ``refilling`` already set)."""
        try:
            self._pool.submit(self._refill, state)
        except RuntimeError:
            # The close shut the pool down meanwhile: the tag is frozen, nothing to fetch.
            with state.cond:
                state.refilling = False
                state.cond.notify_all()

    def _refill(self, state: TagState) -> None:
        """One refill of ``state`` (in a background thread): a lease, its ranges put ahead, the
        waiters woken."""
        ranges: List[Range] = []
        error: Optional[IdmintError] = None
        strict = False
        try:
            ranges = self._lease(state)
        except StrictTag:
            strict = True
        except IdmintError as e:
            error = e
        except Exception as e:  # a bug here must not leave the waiters waiting
            log.exception("idmint: refill of tag %s failed", state.tag)
            error = Unavailable(f"tag {state.tag}: refill failed: {e!r}")
        with state.cond:
            state.refilling = False
            state.generation += 1
            state.error = error
            state.strict = state.strict or strict
            state.install(ranges)
            state.cond.notify_all()

    def _lease(self, state: TagState) -> List[Range]:
        """Leases ranges of ``state``'s tag: those above its mark, skipping the others (a
        failover to a server holding older ranges), at most ``ALLOCATE_ROUNDS_MAX`` rounds."""
        with state.lock:
            count = state.lease_size(self._settings, self._count_max, time.monotonic())
        for _ in range(limits.ALLOCATE_ROUNDS_MAX):
            try:
                leases, index = self._call(_wire.lease(state.tag, count), state.home)
            except InvalidArgument as e:
                if e.code != "bad_count" or count <= 1:
                    raise
                # A server with a lower batch limit: learn it, ask for less.
                count = max(1, count // 4)
                self._count_max = min(self._count_max, count)
                continue
            with state.lock:
                state.home = index
                ranges = state.accept(leases, index, count, time.monotonic())
            if ranges:
                return ranges
            log.info("idmint: tag %s: skipped leases below the ids already handed out", state.tag)
            count = self._count_max
        raise Unavailable(
            f"tag {state.tag}: {limits.ALLOCATE_ROUNDS_MAX} leases in a row lay below the ids "
            f"this client handed out (a failover to a server holding older ranges); retry"
        )

    def _strict_ids(self, state: TagState, count: int) -> List[int]:
        """``count`` ids of a strict tag, asked of a server (never cached here): first of the
        tag's owner when the servers named it and it is up (any other node forwards to it),
        else in the failover order. An owner that fails is forgotten and the same call goes
        on to the others: every node answers in order."""
        if state.closed:
            raise ClientClosed()
        direct = self._owners.pick(state.tag, self._endpoints)
        try:
            named, index = self._call(_wire.ids(state.tag, count), state.home if direct is None else direct)
        except Unavailable:
            self._owners.forget(state.tag)
            raise
        self._owners.answered(state.tag, direct, index, named)
        state.home = index
        return named.value

    def _direct(self, request: _wire.Request) -> Any:
        if self._closed:
            raise ClientClosed()
        return self._call(request, self._endpoints.home())[0]

    def _call(self, request: _wire.Request, home: int) -> Tuple[Any, int]:
        """``request`` to the servers in failover order from ``home`` until one answers, the
        caller is at fault, ``CALL_ATTEMPTS_MAX`` servers were tried or the deadline passed.
        The answer and the server that gave it."""
        deadline = time.monotonic() + self._settings.deadline_s
        reasons = []
        for attempt, index in enumerate(self._endpoints.order(home)):
            left = deadline - time.monotonic()
            if attempt >= limits.CALL_ATTEMPTS_MAX or left <= 0:
                break
            try:
                answer = self._send(index, request, min(self._settings.timeout_s, left))
            except Failure as f:
                if f.down:
                    self._endpoints.failed(index)
                reasons.append(f"{self._endpoints.urls[index]}: {f.reason}")
                log.info("idmint: %s failed (%s); trying the next server", self._endpoints.urls[index], f.reason)
                continue
            self._endpoints.succeeded(index)
            return answer, index
        if not reasons:
            reasons.append("no server could be tried within the deadline")
        raise Unavailable("; ".join(reasons) + " (is `idmint serve` running there?)")

    def _send(self, index: int, request: _wire.Request, timeout: float) -> Any:
        """One attempt on server ``index``: the answer, an ``IdmintError`` of the caller's, or
        a ``Failure``."""
        url = self._endpoints.urls[index] + request.path
        try:
            response = self._http.request(request.method, url, json=request.body, timeout=timeout)
        except httpx.TimeoutException:
            raise Failure(f"no answer within {timeout:.3f} s") from None
        except httpx.HTTPError as e:
            raise Failure(f"HTTP request failed: {e!r}") from None
        return _wire.answer(request, response.status_code, response.content, response.headers)

    def _give_back(self, state: TagState) -> None:
        """Gives ``state``'s unused ids back, highest first, each run to the server that
        leased it (no failover: a lease's proof is its server's)."""
        for server, start, end, leases in give_back_groups(state.unused()):
            request = _wire.give_back(state.tag, start, end, leases)
            try:
                returned = self._send(server, request, self._settings.timeout_s)
            except (Failure, IdmintError) as e:
                log.info("idmint: tag %s: %d unused ids not given back: %s", state.tag, end - start, e)
                continue
            log.debug("idmint: tag %s: gave back %d of %d ids", state.tag, returned, end - start)


if not GIL:  # pragma: no cover - free-threaded builds: a counter is not atomic there

    def _next_id_locked(self: Client, tag: str) -> int:
        state = self._state(tag)
        with state.lock:
            taken_from = state.current
            i = next(taken_from.counter)
            if i < taken_from.preload_at:
                return i
        return self._slow(state, taken_from, i)

    Client.next_id = _next_id_locked  # type: ignore[method-assign]
