"""idmint: unique 64-bit ids from idmint servers, handed out from this process's memory.

    import idmint
    with idmint.Client(["http://10.0.0.1:8080", "http://10.0.0.2:8080"]) as ids:
        order_id = ids.next_id("order")   # from a leased range: no call per id

The client leases ranges of each tag's ids from the servers (with proofs), hands ids out
locally (a counter step, no lock, no call), fetches the next range in the background before
the current one runs out, sizes leases by consumption, fails over between servers, asks a
strict tag's ids of a server every time, and gives unused ids back when it closes.
:class:`Client` is synchronous and thread-safe; :class:`AsyncClient` is its asyncio twin.
Failures are the typed exceptions of :mod:`idmint.errors`, never a sentinel id.
"""

from .aio import AsyncClient
from .client import Client
from .errors import (
    BadConfig,
    BadTag,
    ClientClosed,
    ExhaustedTag,
    FormattedTag,
    IdmintError,
    InvalidArgument,
    PermissionDenied,
    Refused,
    Unauthenticated,
    Unavailable,
    UnknownTag,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "BadConfig",
    "BadTag",
    "Client",
    "ClientClosed",
    "ExhaustedTag",
    "FormattedTag",
    "IdmintError",
    "InvalidArgument",
    "PermissionDenied",
    "Refused",
    "Unauthenticated",
    "Unavailable",
    "UnknownTag",
]
