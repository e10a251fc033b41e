"""The asyncio client: :class:`AsyncClient`, the same behaviour as the synchronous
:class:`~idmint.Client` on one event loop.

Takes are the same local counter step (``_core``); the next range is fetched by a task
started once a tenth of the current one is handed out, and a take that finds the buffer
empty awaits that task's end, bounded by the call deadline. :meth:`AsyncClient.aclose`
freezes every buffer, awaits the refill tasks, gives unused ids back with their proofs and
closes the connections. Use one client per event loop, from that loop's thread.

This module must not parse answers (``_wire``) nor decide a buffer's state (``_core``).
"""

import asyncio
import logging
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import httpx

from . import _wire, limits
from ._core import GIL, Endpoints, Owners, Range, Settings, TagState, checked_count, checked_tag, give_back_groups
from .errors import ClientClosed, Failure, IdmintError, InvalidArgument, Refused, StrictTag, Unavailable

log = logging.getLogger("idmint")

# What a waiting take adds to the refill's own deadline before it gives up.
_WAIT_MARGIN_S = 0.5


class AsyncClient:
    """Ids from idmint servers, handed out from local leased ranges, for asyncio.

    Takes the settings of :class:`~idmint.Client`. Use it as ``async with`` or call
    :meth:`aclose`: unused ids then go back to the servers.
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
        self._http = httpx.AsyncClient(headers=self._settings.headers, timeout=self._settings.timeout_s)
        self._tags: Dict[str, TagState] = {}
        self._tasks: Set["asyncio.Task[None]"] = set()
        self._count_max = limits.BATCH_COUNT_MAX
        self._closed = False
        self._close_lock: Optional[asyncio.Lock] = None
        self._close_done = False

    async def __aenter__(self) -> "AsyncClient":
        """The client itself."""
        return self

    async def __aexit__(self, *exc: Any) -> None:
        """Closes the client (gives unused ids back)."""
        await self.aclose()

    async def next_id(self, tag: str) -> int:
        """The next id of ``tag``, from the local buffer; awaits (bounded) only when it is
        empty. Raises :class:`~idmint.errors.UnknownTag`, :class:`~idmint.errors.ExhaustedTag`,
        :class:`~idmint.errors.Unavailable`, ... never answers a sentinel."""
        state = self._tags.get(tag)
        if state is not None and GIL:
            taken_from = state.current
            i = next(taken_from.counter)
            if i < taken_from.preload_at:
                return i
            if i < taken_from.end:
                self._preload(state, taken_from)
                return i
        return await self._wait(self._state(tag))

    def try_next_id(self, tag: str) -> Optional[int]:
        """The next id of ``tag`` if one is in the local buffer now, else ``None`` (and a
        fetch is started when called on the loop): never awaits. A strict tag's ids always
        need a call: ``None``. Raises :class:`~idmint.errors.ClientClosed` after the close."""
        state = self._state(tag)
        with state.lock:
            if state.closed:
                raise ClientClosed()
            while True:
                taken_from = state.current
                i = next(taken_from.counter)
                if i < taken_from.end:
                    if i >= taken_from.preload_at and state.preload_needed(taken_from):
                        self._start_refill(state)
                    return i
                if not state.switch():
                    break
            if not state.refilling and not state.strict:
                state.refilling = True
                self._start_refill(state)
        return None

    async def next_ids(self, tag: str, count: int) -> List[int]:
        """``count`` ids of ``tag`` (1 to ``BATCH_COUNT_MAX``), increasing, from the local
        buffer (a strict tag's in one call)."""
        checked_count(count)
        first = await self.next_id(tag)
        state = self._tags[tag]
        if state.strict:
            return [first] + (await self._strict_ids(state, count - 1) if count > 1 else [])
        ids = [first]
        for _ in range(count - 1):
            ids.append(await self.next_id(tag))
        return ids

    async def snowflake_id(self) -> int:
        """One snowflake id, asked of a server (``GET /v1/snowflake``)."""
        return (await self.snowflake_ids(1))[0]

    async def snowflake_ids(self, count: int) -> List[int]:
        """``count`` snowflake ids in one call, increasing."""
        return await self._direct(_wire.snowflake(checked_count(count)))

    async def uuid7(self) -> uuid.UUID:
        """One time-ordered UUID (version 7), made by a server (``GET /v1/uuid``)."""
        return (await self.uuid7s(1))[0]

    async def uuid7s(self, count: int) -> List[uuid.UUID]:
        """``count`` UUIDs v7 in one call, increasing within the server that made them."""
        return await self._direct(_wire.uuid7(checked_count(count)))

    async def ulid(self) -> str:
        """One ULID, made by a server (``GET /v1/ulid``)."""
        return (await self.ulids(1))[0]

    async def ulids(self, count: int) -> List[str]:
        """``count`` ULIDs in one call, increasing within the server that made them."""
        return await self._direct(_wire.ulid(checked_count(count)))

    async def aclose(self) -> None:
        """Stops the client: freezes every tag's buffer (later takes raise
        :class:`~idmint.errors.ClientClosed`), awaits the refills in flight, gives the unused
        ids back to the servers that leased them, closes the connections. Idempotent."""
        if self._close_lock is None:
            self._close_lock = asyncio.Lock()
        async with self._close_lock:
            if self._close_done:
                return
            self._closed = True
            states = list(self._tags.values())
            for state in states:
                with state.lock:
                    state.freeze()
                self._wake(state)
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
            for state in states:
                await self._give_back(state)
            await self._http.aclose()
            self._close_done = True

    # The paths below the fast one.

    def _state(self, tag: str) -> TagState:
        state = self._tags.get(tag)
        if state is not None:
            return state
        checked_tag(tag)
        if self._closed:
            raise ClientClosed()
        if len(self._tags) >= limits.TAGS_MAX:
            raise Refused("too_many_tags", f"this client already serves {limits.TAGS_MAX} tags")
        state = TagState(tag, self._endpoints.home())
        state.event = asyncio.Event()
        self._tags[tag] = state
        return state

    def _preload(self, state: TagState, taken_from: Range) -> None:
        with state.lock:
            start = state.preload_needed(taken_from)
        if start:
            self._start_refill(state)

    def _start_refill(self, state: TagState) -> None:
        """Starts a refill task (``refilling`` already set); without a running loop (a
        ``try_next_id`` off the loop) the flag is reset and the next take on the loop starts
        it."""
        try:
            task = asyncio.get_running_loop().create_task(self._refill(state))
        except RuntimeError:
            with state.lock:
                state.refilling = False
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _wake(self, state: TagState) -> None:
        event = state.event
        state.event = asyncio.Event()
        if isinstance(event, asyncio.Event):
            event.set()

    async def _wait(self, state: TagState) -> int:
        """The next id once the buffer has one: switches to a range fetched ahead, or starts a
        refill and awaits it (bounded); raises the refill's error."""
        deadline = time.monotonic() + self._settings.deadline_s + _WAIT_MARGIN_S
        started = state.generation
        while True:
            with state.lock:
                if state.closed:
                    raise ClientClosed()
                taken_from = state.current
                i = next(taken_from.counter)
                if i < taken_from.end:
                    if i >= taken_from.preload_at and state.preload_needed(taken_from):
                        self._start_refill(state)
                    return i
                if state.switch():
                    continue
                if state.strict:
                    break
                if state.generation != started and state.error is not None:
                    raise state.error
                if not state.refilling:
                    state.refilling = True
                    self._start_refill(state)
                event = state.event
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unavailable(
                    f"tag {state.tag}: no range arrived within "
                    f"{self._settings.deadline_s + _WAIT_MARGIN_S:.1f} s"
                )
            try:
                await asyncio.wait_for(event.wait(), left)  # type: ignore[union-attr]
            except asyncio.TimeoutError:
                pass
        return (await self._strict_ids(state, 1))[0]

    async def _refill(self, state: TagState) -> None:
        """One refill of ``state`` (a task): a lease, its ranges put ahead, the waiters woken."""
        ranges: List[Range] = []
        error: Optional[IdmintError] = None
        strict = False
        try:
            ranges = await self._lease(state)
        except StrictTag:
            strict = True
        except IdmintError as e:
            error = e
        except Exception as e:  # a bug here must not leave the waiters waiting
            log.exception("idmint: refill of tag %s failed", state.tag)
            error = Unavailable(f"tag {state.tag}: refill failed: {e!r}")
        with state.lock:
            state.refilling = False
            state.generation += 1
            state.error = error
            state.strict = state.strict or strict
            state.install(ranges)
        self._wake(state)

    async def _lease(self, state: TagState) -> List[Range]:
        """Leases ranges of ``state``'s tag above its mark (see ``Client._lease``)."""
        with state.lock:
            count = state.lease_size(self._settings, self._count_max, time.monotonic())
        for _ in range(limits.ALLOCATE_ROUNDS_MAX):
            try:
                leases, index = await self._call(_wire.lease(state.tag, count), state.home)
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

    async def _strict_ids(self, state: TagState, count: int) -> List[int]:
        """``count`` ids of a strict tag, asked of a server (never cached here): first of the
        tag's owner when the servers named it and it is up (any other node forwards to it),
        else in the failover order. An owner that fails is forgotten and the same call goes
        on to the others: every node answers in order."""
        if state.closed:
            raise ClientClosed()
        direct = self._owners.pick(state.tag, self._endpoints)
        try:
            named, index = await self._call(_wire.ids(state.tag, count), state.home if direct is None else direct)
        except Unavailable:
            self._owners.forget(state.tag)
            raise
        self._owners.answered(state.tag, direct, index, named)
        state.home = index
        return named.value

    async def _direct(self, request: _wire.Request) -> Any:
        if self._closed:
            raise ClientClosed()
        return (await self._call(request, self._endpoints.home()))[0]

    async def _call(self, request: _wire.Request, home: int) -> Tuple[Any, int]:
        """``request`` with failover from ``home`` (see ``Client._call``)."""
        deadline = time.monotonic() + self._settings.deadline_s
        reasons = []
        for attempt, index in enumerate(self._endpoints.order(home)):
            left = deadline - time.monotonic()
            if attempt >= limits.CALL_ATTEMPTS_MAX or left <= 0:
                break
            try:
                answer = await self._send(index, request, min(self._settings.timeout_s, left))
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

    async def _send(self, index: int, request: _wire.Request, timeout: float) -> Any:
        url = self._endpoints.urls[index] + request.path
        try:
            response = await self._http.request(request.method, url, json=request.body, timeout=timeout)
        except httpx.TimeoutException:
            raise Failure(f"no answer within {timeout:.3f} s") from None
        except httpx.HTTPError as e:
            raise Failure(f"HTTP request failed: {e!r}") from None
        return _wire.answer(request, response.status_code, response.content, response.headers)

    async def _give_back(self, state: TagState) -> None:
        """Gives ``state``'s unused ids back, highest first, each run to its server."""
        for server, start, end, leases in give_back_groups(state.unused()):
            request = _wire.give_back(state.tag, start, end, leases)
            try:
                returned = await self._send(server, request, self._settings.timeout_s)
            except (Failure, IdmintError) as e:
                log.info("idmint: tag %s: %d unused ids not given back: %s", state.tag, end - start, e)
                continue
            log.debug("idmint: tag %s: gave back %d of %d ids", state.tag, returned, end - start)
