"""The HTTP calls the client makes (idmint's ``/v1`` JSON routes, as ``/openapi.json``
describes them), each as a request to send and a check of its answer. Answers are checked
before use: ranges valid, increasing, disjoint and no more than asked; as many ids as asked.
A malformed answer fails the attempt like a server that is down.

This module is sans-IO: it neither sends nor retries (``_endpoints`` picks servers, the
clients send) and keeps no state.
"""

import json
import re
import uuid
from typing import Any, Callable, List, Mapping, NamedTuple, Optional
from urllib.parse import quote

from .errors import Failure, from_http
from .limits import ID_MAX, LEASE_RANGES_MAX, NODE_NAME_LEN_MAX

_PROOF = re.compile(r"^[0-9a-f]{16}$")
_ULID = re.compile(r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")


class Lease(NamedTuple):
    """A range ``[start, end)`` a server leased, with its proof (16 lowercase hex digits)."""

    start: int
    end: int
    proof: str


class Request(NamedTuple):
    """One call: method, path and query, JSON body, the tag it is about (for errors), the
    check that turns a 2xx body into the answer, and whether the answer is ``Named``."""

    method: str
    path: str
    body: Optional[dict]
    subject: str
    parse: Callable[[Any], Any]
    named: bool = False


#: The answer header naming the server that answered a strict take, as its peers reach it.
NODE_HEADER = "idmint-node"
#: The answer header naming a strict tag's owner, in ``NODE_HEADER``'s form.
OWNER_HEADER = "idmint-owner"


class Named(NamedTuple):
    """An answer with the names its headers gave: the server that answered and the tag's
    owner (``None`` when absent or not a name)."""

    value: Any
    node: Optional[str]
    owner: Optional[str]


def segment(name: str) -> str:
    """A tag as one URL path segment: every byte outside ``A-Z a-z 0-9 - . _ ~``
    percent-encoded, so ``user/login`` or ``订单`` reach the server as the name they are."""
    return quote(name, safe="")


def lease(tag: str, count: int) -> Request:
    """``GET /v1/segment/{tag}/ranges?count=N``: ``count`` ids as leased ranges."""

    def parse(answer: Any) -> List[Lease]:
        ranges = _field(answer, "ranges", list)
        leases = [_lease(r) for r in ranges]
        total = sum(l.end - l.start for l in leases)
        increasing = all(a.end <= b.start for a, b in zip(leases, leases[1:]))
        if not leases or len(leases) > LEASE_RANGES_MAX or not increasing or total > count:
            shown = [(l.start, l.end) for l in leases[:4]]
            raise Failure(f"malformed ranges for {count} ids: {shown}")
        return leases

    return Request("GET", f"/v1/segment/{segment(tag)}/ranges?count={count}", None, tag, parse)


def give_back(tag: str, start: int, end: int, leases: List[Lease]) -> Request:
    """``POST /v1/segment/{tag}/return``: gives back ``[start, end)`` of ``leases``
    (contiguous, increasing); answers the ids taken back."""
    body = {
        "start": start,
        "end": end,
        "leases": [{"start": l.start, "end": l.end, "proof": l.proof} for l in leases],
    }

    def parse(answer: Any) -> int:
        returned = _field(answer, "returned", int)
        if not 0 <= returned <= end - start:
            raise Failure(f"took back {returned} of {end - start} ids; at most all expected")
        return returned

    return Request("POST", f"/v1/segment/{segment(tag)}/return", body, tag, parse)


def ids(tag: str, count: int) -> Request:
    """``GET /v1/segment/{tag}?count=N``: ``count`` ids of a tag asked of the server (the
    strict tags' path), as numbers, ``Named`` by the answer's headers."""
    return Request("GET", f"/v1/segment/{segment(tag)}?count={count}", None, tag, _numbers(count), named=True)


def snowflake(count: int) -> Request:
    """``GET /v1/snowflake?count=N``: ``count`` snowflake ids."""
    return Request("GET", f"/v1/snowflake?count={count}", None, "", _numbers(count))


def uuid7(count: int) -> Request:
    """``GET /v1/uuid?version=7&count=N``: ``count`` time-ordered UUIDs."""

    def parse(answer: Any) -> List[uuid.UUID]:
        texts = _texts(answer, count)
        try:
            values = [uuid.UUID(t) for t in texts]
        except ValueError as e:
            raise Failure(f"malformed UUID: {e}") from None
        if any(v.version != 7 for v in values):
            raise Failure("answered a UUID that is not version 7")
        return values

    return Request("GET", f"/v1/uuid?version=7&count={count}", None, "", parse)


def ulid(count: int) -> Request:
    """``GET /v1/ulid?count=N``: ``count`` ULIDs as text."""

    def parse(answer: Any) -> List[str]:
        texts = _texts(answer, count)
        if not all(_ULID.match(t) for t in texts):
            raise Failure("answered a malformed ULID")
        return texts

    return Request("GET", f"/v1/ulid?count={count}", None, "", parse)


def answer(request: Request, status: int, body: bytes, headers: Mapping[str, str]) -> Any:
    """The answer to ``request`` (``Named`` by ``headers`` when the request says so), or the
    exception its status and body stand for: an ``IdmintError`` of the caller's, or a
    ``Failure`` worth another server."""
    if not 200 <= status < 300:
        raise from_http(status, body, request.subject)
    try:
        decoded = json.loads(body)
    except ValueError:
        raise Failure(f"malformed JSON answer (HTTP {status})") from None
    value = request.parse(decoded)
    if request.named:
        return Named(value, _name(headers.get(NODE_HEADER)), _name(headers.get(OWNER_HEADER)))
    return value


def _name(value: Optional[str]) -> Optional[str]:
    """A server's name from a header: visible ASCII, at most ``NODE_NAME_LEN_MAX``
    characters; ``None`` otherwise (a hint: a malformed one is ignored, never an error)."""
    if not value or len(value) > NODE_NAME_LEN_MAX or not all(33 <= ord(c) <= 126 for c in value):
        return None
    return value


def _field(answer: Any, name: str, kind: type) -> Any:
    value = answer.get(name) if isinstance(answer, dict) else None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise Failure(f"answer without {name!r}: {str(answer)[:200]}")
    return value


def _lease(value: Any) -> Lease:
    try:
        start, end, proof = value["start"], value["end"], value["proof"]
    except (KeyError, TypeError):
        raise Failure(f"malformed range {value!r}") from None
    valid = (
        isinstance(start, int)
        and isinstance(end, int)
        and 1 <= start < end <= ID_MAX
        and isinstance(proof, str)
        and _PROOF.match(proof)
    )
    if not valid:
        raise Failure(f"malformed range {value!r}")
    return Lease(start, end, proof)


def _numbers(count: int) -> Callable[[Any], List[int]]:
    def parse(answer: Any) -> List[int]:
        values = _field(answer, "ids", list)
        if len(values) != count:
            raise Failure(f"answered {len(values)} ids for {count}")
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in values):
            raise Failure("answered ids that are not positive numbers (a tag with a text format?)")
        return values

    return parse


def _texts(answer: Any, count: int) -> List[str]:
    values = _field(answer, "ids", list)
    if len(values) != count or not all(isinstance(v, str) for v in values):
        raise Failure(f"answered {len(values)} texts for {count}")
    return values
