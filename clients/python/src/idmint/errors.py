"""The client's typed errors, and how a server's error answer (``{"error": {"code",
"message"}}`` with its HTTP status) becomes one.

Every failure is an exception deriving from :class:`IdmintError`; no call answers a
sentinel id. The classification decides what the failover does: a caller's error (unknown
tag, exhausted tag, bad input, missing token) is raised at once, since no other server would
answer differently; anything else tries the next server and ends, when none answers, as
:class:`Unavailable` carrying every server's reason. This module must not pick servers.
"""

from typing import Optional


class IdmintError(Exception):
    """Base of every error the client raises."""


class UnknownTag(IdmintError):
    """The tag does not exist on the servers (``404 unknown_tag``)."""

    def __init__(self, tag: str):
        """Names the tag and how to create it."""
        self.tag = tag
        super().__init__(
            f"tag {tag} does not exist; create it with `idmint tag create {tag}` "
            f"(or POST /v1/tags)"
        )


class ExhaustedTag(IdmintError):
    """The tag's ids are spent (``409 tag_exhausted``): final, another server has none
    either; take ids from a new tag."""

    def __init__(self, tag: str, message: str):
        """Keeps the tag and the server's message."""
        self.tag = tag
        self.message = message
        super().__init__(f"tag {tag} is exhausted: {message}")


class Unavailable(IdmintError):
    """No server answered within the bounds (down, unreachable, slow, shutting down, its
    store unavailable). Nothing was guessed; retry later. ``reason`` holds what each server
    answered, the server's own reason included."""

    def __init__(self, reason: str):
        """Keeps the reason, per server."""
        self.reason = reason
        super().__init__(f"idmint unavailable: {reason}")


class BadTag(IdmintError):
    """The tag name is not one idmint accepts; refused before any call (or ``bad_tag``)."""

    def __init__(self, tag: str, reason: str):
        """Keeps the name and what is wrong with it."""
        self.tag = tag
        self.reason = reason
        super().__init__(f"bad tag {tag!r}: {reason}")


class InvalidArgument(IdmintError):
    """A count or another argument is out of range, checked here or refused by the server
    (``400 bad_*``)."""

    def __init__(self, code: str, message: str):
        """Keeps the error code (``bad_count``, ...) and the message."""
        self.code = code
        self.message = message
        super().__init__(f"invalid argument ({code}): {message}")


class Unauthenticated(IdmintError):
    """The server wants a bearer token the call did not carry (``401``)."""

    def __init__(self, message: str):
        """Keeps the server's message."""
        self.message = message
        super().__init__(
            f"unauthenticated (401): {message}; give the tag's client token with token=..."
        )


class PermissionDenied(IdmintError):
    """The token the call carried is not one the tag accepts (``403``)."""

    def __init__(self, message: str):
        """Keeps the server's message."""
        self.message = message
        super().__init__(f"permission denied (403): {message}; use the tag's client token")


class FormattedTag(IdmintError):
    """The tag has a public id format: its internal ids are not leased (``409
    formatted_tag``); ask for its public ids with ``public_ids``."""

    def __init__(self, tag: str):
        """Names the tag."""
        self.tag = tag
        super().__init__(
            f"tag {tag} has a public id format, so its internal ids are not leased to "
            f"clients; ask for its public ids with public_ids()"
        )


class Refused(IdmintError):
    """The server refused the call for a reason every server shares (another ``409``:
    ``public_ids_exhausted``, ``key_changed``, ``tag_not_storable``, ...); the message names
    the fix."""

    def __init__(self, code: str, message: str):
        """Keeps the server's code and message."""
        self.code = code
        self.message = message
        super().__init__(f"refused ({code}): {message}")


class ClientClosed(IdmintError):
    """The client was closed; it hands out no more ids."""

    def __init__(self) -> None:
        """A fixed message."""
        super().__init__("the idmint client is closed; make a new one to take more ids")


class BadConfig(IdmintError):
    """A client setting or a server URL is out of range (raised by the constructor)."""

    def __init__(self, field: str, reason: str):
        """Keeps the setting and what is wrong with it (a token is never shown)."""
        self.field = field
        self.reason = reason
        super().__init__(f"bad client setting {field}: {reason}")


class Failure(Exception):
    """One attempt on one server failed in a way another server may not share (internal to
    the client, never raised to callers): ``down`` marks the server down for a backoff."""

    def __init__(self, reason: str, down: bool = True):
        """Keeps the reason and whether the server itself failed."""
        self.reason = reason
        self.down = down
        super().__init__(reason)


class StrictTag(IdmintError):
    """The tag is strict (``409 strict_tag``): its ids are asked of a server every time,
    never leased. Internal: the client switches to that path and never raises it."""

    def __init__(self, tag: str, message: str):
        """Keeps the tag and the server's message."""
        self.tag = tag
        self.message = message
        super().__init__(message)


# Codes that are final on every server: refused at once, never retried elsewhere.
_REFUSED = frozenset(
    {
        "sequence_exhausted",
        "public_ids_exhausted",
        "key_changed",
        "tag_exists",
        "too_many_tags",
        "tag_not_storable",
    }
)

# Not served by this node, although it is up: another node may serve it.
_ELSEWHERE = frozenset(
    {
        "too_many_requests",
        "snowflake_not_running",
        "sequences_not_running",
        "snowflake_not_configured",
        "sequences_not_configured",
        "tag_policy_not_served",
        "worker_ids_exhausted",
        "layout_exhausted",
        "clock_skew",
    }
)


def from_code(code: str, message: str, subject: str) -> Exception:
    """What an idmint error code means: an :class:`IdmintError` to raise at once, or a
    :class:`Failure` worth another server. ``subject`` is the tag the call was about."""
    if code == "unknown_tag":
        return UnknownTag(subject)
    if code == "tag_exhausted":
        return ExhaustedTag(subject, message)
    if code == "strict_tag":
        return StrictTag(subject, message)
    if code == "formatted_tag":
        return FormattedTag(subject)
    if code == "unauthorized":
        return Unauthenticated(message)
    if code == "forbidden":
        return PermissionDenied(message)
    if code == "bad_tag":
        return BadTag(subject, message)
    if code in _REFUSED:
        return Refused(code, message)
    if code in _ELSEWHERE:
        return Failure(f"{code}: {message}", down=False)
    if code.startswith("bad_") or code == "not_an_id":
        return InvalidArgument(code, message)
    # unavailable, shutting_down, request_timeout, internal, no_route (not idmint), ...: this
    # server could not serve now; another may.
    return Failure(f"{code}: {message}")


def from_http(status: int, body: bytes, subject: str) -> Exception:
    """An HTTP error answer: by its body's code when it has one, else by its status."""
    detail = _error_detail(body)
    if detail is not None:
        return from_code(detail[0], detail[1], subject)
    message = f"HTTP {status} without an idmint error body"
    if status == 401:
        return Unauthenticated(message)
    if status == 403:
        return PermissionDenied(message)
    if status == 429:
        return Failure(message, down=False)
    return Failure(message)


def _error_detail(body: bytes) -> Optional[tuple]:
    import json

    try:
        error = json.loads(body)["error"]
        code, message = error["code"], error["message"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(code, str) and isinstance(message, str):
        return code, message
    return None
