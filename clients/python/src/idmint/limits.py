"""Every bound of the Python client, as a named constant, checked against its neighbours at
import. The client's settings may lower a limit, never raise it. This module holds numbers
only.
"""

#: Most servers one client is given.
ENDPOINTS_MAX = 16

#: Bound on one HTTP call to one server (connect, send, answer), unless set lower or higher
#: within [CALL_TIMEOUT_S_MIN, CALL_TIMEOUT_S_MAX].
CALL_TIMEOUT_S_DEFAULT = 1.0
#: Shortest per-call timeout accepted.
CALL_TIMEOUT_S_MIN = 0.01
#: Longest per-call timeout accepted.
CALL_TIMEOUT_S_MAX = 5.0

#: Servers one call tries (each at most once) before it fails with ``Unavailable``.
CALL_ATTEMPTS_MAX = 3
#: Bound on one call with all its attempts: ``CALL_ATTEMPTS_MAX`` times the per-call
#: timeout, at most this.
CALL_DEADLINE_S_MAX = 8.0

#: How long a server that failed is tried last at first; doubles with every failure in a row.
DOWN_BACKOFF_S_MIN = 0.25
#: Longest a failed server is tried last before it gets its place back.
DOWN_BACKOFF_S_MAX = 10.0

#: Most ids one request asks for: the server's ``count`` maximum (its
#: ``limits.batch_count_max`` may be lower; the client learns it from ``bad_count``).
BATCH_COUNT_MAX = 100_000

#: The server's ``count`` maximum of a lease of ranges (a whole segment of the largest
#: step). This client's leases stay within ``BATCH_COUNT_MAX``, far more than a Python
#: process takes between two of its fetches.
LEASE_COUNT_MAX = 1_000_000

#: Fewest ids one lease holds unless set otherwise (the server's default tag step).
MIN_LEASE_DEFAULT = 1_000

#: How long one lease should last at the measured rate, unless set otherwise: a lease holds
#: ``rate x duration`` ids within ``[min_lease, BATCH_COUNT_MAX]``.
LEASE_DURATION_S_DEFAULT = 10.0
#: Shortest lease duration accepted.
LEASE_DURATION_S_MIN = 1.0
#: Longest lease duration accepted.
LEASE_DURATION_S_MAX = 3_600.0
#: A lease holds at most this many times the ids of the one before (the server's own step
#: growth, Leaf's doubling), so no burst sets the size alone.
LEASE_GROWTH_MAX = 2

#: Share of a range handed out after which the next range is fetched in the background.
PRELOAD_FRACTION = 0.1

#: Ranges of one lease answer kept for the next takes (a server answers several ranges when
#: a lease spans its segments); beyond it the answer is refused as malformed.
LEASE_RANGES_MAX = 64

#: Lease requests of one refill: leases wholly below the ids this client already handed out
#: (a server that took over after a failover) are skipped, asking again; then the refill
#: fails with ``Unavailable``.
ALLOCATE_ROUNDS_MAX = 16

#: Leases one give-back call carries (the server's bound).
RETURN_LEASES_MAX = 16

#: Background threads of the synchronous client that fetch ranges (one refill per tag at a
#: time).
REFILL_THREADS_MAX = 4

#: Most tags one client serves.
TAGS_MAX = 10_000

#: Longest tag name, in UTF-8 bytes.
TAG_BYTES_MAX = 128
#: Longest server name read from a strict answer's ``idmint-node`` or ``idmint-owner``.
NODE_NAME_LEN_MAX = 256

#: Longest bearer token accepted.
TOKEN_LEN_MAX = 1_024

#: Largest id a server hands out, exclusive end of every range: 2^63 - 1.
ID_MAX = (1 << 63) - 1

assert CALL_TIMEOUT_S_MIN <= CALL_TIMEOUT_S_DEFAULT <= CALL_TIMEOUT_S_MAX
assert CALL_TIMEOUT_S_MAX <= CALL_DEADLINE_S_MAX
assert CALL_ATTEMPTS_MAX >= 2
assert DOWN_BACKOFF_S_MIN <= DOWN_BACKOFF_S_MAX
assert 1 <= MIN_LEASE_DEFAULT <= BATCH_COUNT_MAX
assert LEASE_DURATION_S_MIN <= LEASE_DURATION_S_DEFAULT <= LEASE_DURATION_S_MAX
assert 0 < PRELOAD_FRACTION < 1
assert LEASE_GROWTH_MAX >= 1 and ALLOCATE_ROUNDS_MAX >= 1 and RETURN_LEASES_MAX >= 1
