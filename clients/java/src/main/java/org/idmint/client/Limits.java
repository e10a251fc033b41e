// Limits: every bound of the Java client as a named constant, with how they relate (checked
// once when the class loads). The builder may lower a limit, never raise it. Numbers only.
package org.idmint.client;

/** Every bound of the client. A builder setting outside these is refused. */
public final class Limits {
    /** Most servers one client is given. */
    public static final int ENDPOINTS_MAX = 16;

    /** Bound on one call to one server (connect, send, answer) unless the builder sets another. */
    public static final long CALL_TIMEOUT_MS_DEFAULT = 1_000;
    /** Shortest per-call timeout the builder accepts. */
    public static final long CALL_TIMEOUT_MS_MIN = 10;
    /** Longest per-call timeout the builder accepts. */
    public static final long CALL_TIMEOUT_MS_MAX = 5_000;
    /** Servers one call tries before it fails with {@link UnavailableException}. */
    public static final int CALL_ATTEMPTS_MAX = 3;
    /** Bound on one call with all its attempts: attempts times the timeout, at most this. */
    public static final long CALL_DEADLINE_MS_MAX = 8_000;

    /** How long a server that failed is tried last at first; doubles with each failure in a row. */
    public static final long DOWN_BACKOFF_MS_MIN = 250;
    /** Longest a failed server is tried last before it gets its place back. */
    public static final long DOWN_BACKOFF_MS_MAX = 10_000;

    /** The servers' batch limit: most ids one call of ids (not a lease) asks for. */
    public static final long BATCH_COUNT_MAX = 100_000;
    /**
     * Most ids one lease call asks for (the servers' lease limit, a whole segment of the
     * largest step): ranges, not ids, so one call brings ten batches.
     */
    public static final long LEASE_COUNT_MAX = 1_000_000;
    /** Fewest ids one lease holds unless the builder sets another (a server tag's default step). */
    public static final long MIN_LEASE_DEFAULT = 1_000;
    /** How long a lease should last at the measured rate unless the builder sets another. */
    public static final long LEASE_DURATION_S_DEFAULT = 10;
    /** Longest lease duration the builder accepts. */
    public static final long LEASE_DURATION_S_MAX = 3_600;
    /** A lease is at most this many times the one before (the server's adaptive step grows ×2). */
    public static final long LEASE_GROWTH_MAX = 2;
    /** The next range is asked for once this percentage of the current one is handed out. */
    public static final int PRELOAD_PERCENT = 10;
    /**
     * Ranges of one tag leased ahead of the current one, at most (how many depends on the
     * consumption): a take switches to the next on its own thread, so a consumption of
     * several batches per call's latency never waits for a thread to wake up.
     */
    public static final int READY_LEASES_MAX = 15;
    /** Lease calls one fetch makes at once (one on the fetch thread, the others beside it). */
    public static final int LEASE_CALLS_MAX = 8;
    /** Lease requests in a row whose ranges lie below the ids already served, before giving up. */
    public static final int ALLOCATE_ROUNDS_MAX = 16;
    /** Leases one give-back carries (the server's limit). */
    public static final int GIVE_BACK_LEASES_MAX = 16;

    /** Most tags one client serves from local ranges (the server's tag limit). */
    public static final int TAGS_MAX = 10_000;
    /** Most strict tags remembered as strict (asked of the servers, never cached). */
    public static final int STRICT_TAGS_MAX = 10_000;
    /** Longest server name read from a strict answer's {@code idmint-node} or {@code idmint-owner}. */
    public static final int NODE_NAME_LENGTH_MAX = 256;
    /** Longest tag name, in UTF-8 bytes (a Leaf {@code biz_tag}). */
    public static final int TAG_BYTES_MAX = 128;
    /** Largest answer body read (a full batch of UUIDs as text is about 4 MiB). */
    public static final int ANSWER_BYTES_MAX = 8 << 20;
    /** Deepest JSON nesting the reader accepts. */
    public static final int JSON_DEPTH_MAX = 16;
    /** Threads that fetch ranges in the background (one fetch per tag at a time). */
    public static final int LOADER_THREADS = 2;
    /** Threads of the HTTP client's own executor. */
    public static final int HTTP_THREADS = 2;
    /** Longest bearer token accepted. */
    public static final int TOKEN_LENGTH_MAX = 1_024;

    static {
        check(CALL_TIMEOUT_MS_MIN <= CALL_TIMEOUT_MS_DEFAULT && CALL_TIMEOUT_MS_DEFAULT <= CALL_TIMEOUT_MS_MAX);
        check(CALL_TIMEOUT_MS_MAX <= CALL_DEADLINE_MS_MAX && CALL_ATTEMPTS_MAX >= 2);
        check(DOWN_BACKOFF_MS_MIN <= DOWN_BACKOFF_MS_MAX);
        check(1 <= MIN_LEASE_DEFAULT && MIN_LEASE_DEFAULT <= BATCH_COUNT_MAX);
        check(1 <= LEASE_DURATION_S_DEFAULT && LEASE_DURATION_S_DEFAULT <= LEASE_DURATION_S_MAX);
        check(LEASE_GROWTH_MAX >= 2 && 0 < PRELOAD_PERCENT && PRELOAD_PERCENT < 100);
        check(1 <= LEASE_CALLS_MAX && LEASE_CALLS_MAX <= READY_LEASES_MAX);
        check(GIVE_BACK_LEASES_MAX >= 2 && ALLOCATE_ROUNDS_MAX >= 1);
        // The current range and every range ahead go back in one give-back when contiguous.
        check(READY_LEASES_MAX + 1 <= GIVE_BACK_LEASES_MAX);
        // A batch of BATCH_COUNT_MAX ids as decimal text fits an answer.
        check(BATCH_COUNT_MAX * 40 <= ANSWER_BYTES_MAX);
        check(BATCH_COUNT_MAX <= LEASE_COUNT_MAX);
    }

    private Limits() {}

    private static void check(boolean holds) {
        if (!holds) {
            throw new AssertionError("idmint client limits are inconsistent");
        }
    }
}
