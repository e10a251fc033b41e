// TagBuffer: one tag's ids in the caller's process: the current range and a short chain of
// ranges leased ahead from the servers.
//
// The take path is lock-free: one volatile read of the buffers (current, ready chain), one
// getAndIncrement of the current range's cursor, one compare. A take that finds the current
// range spent switches to the chain's first range with one compareAndSet of the buffers, on
// the caller's thread: no thread has to wake up for it. Crossing PRELOAD_PERCENT of a range
// starts the tag's one background fetch (single flight) when the chain holds less than the
// consumption wants ahead; the fetch tops the chain up, with several lease calls at once when
// the consumption is past one batch per call, so the ranges are there long before they are
// needed. Only a take that finds every range spent waits, bounded, for the fetch. The ids
// wanted ahead follow the consumption (its rate times the lease duration), within
// [min lease, READY_LEASES_MAX batches] and at most LEASE_GROWTH_MAX times the last wish.
//
// A tag's lease requests go to the server that answered the last one while it is up (tags
// spread round robin): ranges of two servers are not ordered. Ids of a tag from one client
// increase: ranges are chained in increasing order, and leases wholly below the highest lease
// end installed (the mark; a failover to a node that holds older ranges) are skipped, never
// served. A lease is installed once and never fetched twice; a fetch that failed is not
// replayed (a range the server leased in an answer that never arrived is lost for good, never
// served). freeze() stops the buffer for the close: the buffers are swapped for CLOSED in one
// atomic step and each range's cursor moved to its end in one more, so an id is either handed
// out before it or given back after it, never both.
package org.idmint.client;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;

/** One tag's leased ranges: the current one and a chain of ranges ahead. */
final class TagBuffer {
    /** What {@link #take()} answers when nothing is local; internal only, never handed to a caller. */
    static final long NONE = -1;

    /** A leased range in the buffer: ids {@code start .. start + len - 1}, an index cursor over them. */
    static final class Segment {
        private static final VarHandle TAKEN;

        static {
            try {
                TAKEN = MethodHandles.lookup().findVarHandle(Segment.class, "taken", long.class);
            } catch (ReflectiveOperationException e) {
                throw new ExceptionInInitializerError(e);
            }
        }

        final long start;
        final long len;
        final long preloadIndex;
        /** Ids handed out of the range (past len: spent); only through TAKEN, atomically. */
        @SuppressWarnings("unused")
        private volatile long taken;
        final Wire.Lease lease;

        Segment(long start, long len, Wire.Lease lease) {
            this.start = start;
            this.len = len;
            this.preloadIndex = len * Limits.PRELOAD_PERCENT / 100;
            this.lease = lease;
        }

        /** The cursor before adding {@code n} (the field is the cursor: no AtomicLong to reach through). */
        long takeIndex(long n) {
            return (long) TAKEN.getAndAdd(this, n);
        }

        long taken() {
            return (long) TAKEN.getVolatile(this);
        }

        /** Moves the cursor past the end; the cursor before. */
        long spend() {
            return (long) TAKEN.getAndSet(this, len);
        }

        /** Ids not handed out yet. */
        long left() {
            return Math.max(0, len - taken());
        }
    }

    /** Ranges leased ahead, in increasing order: an immutable list, replaced whole. */
    static final class Ready {
        final Segment first;
        final Ready rest;
        final int count;
        final long ids;

        Ready(Segment first, Ready rest) {
            this.first = first;
            this.rest = rest;
            this.count = 1 + (rest == null ? 0 : rest.count);
            this.ids = first.len + (rest == null ? 0 : rest.ids);
        }

        /** This chain with {@code last} at its end. */
        static Ready append(Ready chain, Segment last) {
            return chain == null ? new Ready(last, null) : new Ready(chain.first, append(chain.rest, last));
        }
    }

    /** The current range and the chain of ranges ahead (or null); replaced whole, never changed. */
    static final class Buffers {
        final Segment current;
        final Ready next;

        Buffers(Segment current, Ready next) {
            this.current = current;
            this.next = next;
        }
    }

    /** Unused ids {@code [from, to)} of a lease, to give back. */
    static final class Piece {
        final long from;
        final long to;
        final Wire.Lease lease;

        Piece(long from, long to, Wire.Lease lease) {
            this.from = from;
            this.to = to;
            this.lease = lease;
        }
    }

    private static final Buffers EMPTY = new Buffers(new Segment(0, 0, null), null);
    private static final Buffers CLOSED = new Buffers(new Segment(0, 0, null), null);

    final String tag;
    private final IdmintClient.Core core;
    private final AtomicReference<Buffers> buffers = new AtomicReference<>(EMPTY);
    /** Set while the tag's one fetch runs. */
    private final AtomicBoolean loading = new AtomicBoolean();
    /** Leases answered beyond the chain's room, or after the close, for the next fetches. Guarded by itself. */
    private final ArrayDeque<Wire.Lease> queued = new ArrayDeque<>();
    /** The last fetch's failure, cleared by a fetch that succeeded. */
    private volatile IdmintException failure;
    /** Fetches finished; waiters wait for it to change. Guarded by {@link #signal}. */
    private long fetches;
    private final Object signal = new Object();
    // Written by the fetch only (one at a time; volatile for the next fetch's thread).
    private volatile long mark;
    /** Ids installed in all, and how many of them were handed out at the last fetch, and when. */
    private volatile long installedIds;
    private volatile long consumedAtFetch;
    private volatile long fetchNanos;
    /** Ids the chain should hold ahead (the consumption times the lease duration, bounded). */
    private volatile long aheadIds;
    /** The server that answered the tag's last lease request, asked first next time; -1 for none. */
    private volatile int server = -1;

    TagBuffer(String tag, IdmintClient.Core core) {
        this.tag = tag;
        this.core = core;
    }

    /**
     * The next id from the local ranges, or NONE when all are spent (a fetch is then started).
     * Only the common case is here, so the JIT inlines it into the caller's loop; the preload
     * point and a spent range go to {@link #takeSlow}.
     */
    long take() {
        Buffers b = buffers.get();
        Segment s = b.current;
        long i = s.takeIndex(1);
        if (i < s.len && i != s.preloadIndex) {
            return s.start + i;
        }
        return takeSlow(b, s, i);
    }

    /** {@link #take} at the preload point or past the range's end: index {@code i} of {@code s} was taken. */
    private long takeSlow(Buffers b, Segment s, long i) {
        if (i < s.len) {
            preload(b);
            return s.start + i;
        }
        while (true) {
            Ready n = b.next;
            if (n == null) {
                startFetch();
                return NONE;
            }
            buffers.compareAndSet(b, new Buffers(n.first, n.rest));
            b = buffers.get();
            s = b.current;
            i = s.takeIndex(1);
            if (i < s.len) {
                if (i == s.preloadIndex) {
                    preload(b);
                }
                return s.start + i;
            }
        }
    }

    /** Up to {@code max} ids from one local range into {@code out[from..]}; how many (0 when nothing is local). */
    int takeInto(long[] out, int from, int max) {
        while (true) {
            Buffers b = buffers.get();
            Segment s = b.current;
            long i = s.takeIndex(max);
            if (i < s.len) {
                int k = (int) Math.min(max, s.len - i);
                for (int j = 0; j < k; j++) {
                    out[from + j] = s.start + i + j;
                }
                if (i <= s.preloadIndex && s.preloadIndex < i + k) {
                    preload(b);
                }
                return k;
            }
            Ready n = b.next;
            if (n == null) {
                startFetch();
                return 0;
            }
            buffers.compareAndSet(b, new Buffers(n.first, n.rest));
        }
    }

    /** The next id, waiting (bounded) for the tag's fetch when nothing is local. */
    long nextIdWaiting() {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(core.waitMs);
        while (true) {
            long id = take();
            if (id != NONE) {
                return id;
            }
            if (core.closed) {
                throw new ClientClosedException();
            }
            IdmintException last = failure;
            if (isFinal(last)) {
                // Final (an exhausted tag, a refusal, no token): the servers are not asked again.
                throw last;
            }
            long seen;
            synchronized (signal) {
                seen = fetches;
            }
            startFetch();
            synchronized (signal) {
                while (fetches == seen) {
                    long leftMs = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
                    if (leftMs <= 0) {
                        throw new UnavailableException("no range of tag " + tag + " arrived within " + core.waitMs
                                + " ms (a lease request is under way)");
                    }
                    try {
                        signal.wait(leftMs);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new UnavailableException("interrupted while waiting for a range of tag " + tag);
                    }
                }
            }
            id = take();
            if (id != NONE) {
                return id;
            }
            IdmintException failed = failure;
            if (failed != null) {
                throw failed;
            }
        }
    }

    /** {@code count} ids, increasing; waits (bounded) whenever nothing is local. */
    long[] nextIds(int count) {
        long[] out = new long[count];
        int filled = 0;
        while (filled < count) {
            int k = takeInto(out, filled, count - filled);
            if (k == 0) {
                out[filled++] = nextIdWaiting();
            } else {
                filled += k;
            }
        }
        return out;
    }

    /** Whether the buffer holds nothing and its last fetch found the tag unknown (it may be dropped). */
    boolean isUnknownAndEmpty() {
        Buffers b = buffers.get();
        return failure instanceof UnknownTagException && b.next == null
                && b.current.taken() >= b.current.len && !loading.get();
    }

    /**
     * Stops the buffer: after this no id is handed out. Answers the unused ids of its ranges:
     * the buffers are swapped for CLOSED (no range can be switched to after it) and each cursor
     * is moved past its range's end in one atomic step, so every id was either handed out
     * before (and is not given back) or is given back (and never handed out).
     */
    List<Piece> freeze() {
        Buffers old = buffers.getAndSet(CLOSED);
        List<Piece> pieces = new ArrayList<>();
        List<Segment> segments = new ArrayList<>();
        segments.add(old.current);
        for (Ready r = old.next; r != null; r = r.rest) {
            segments.add(r.first);
        }
        for (Segment s : segments) {
            if (s.lease != null) {
                long taken = s.spend();
                if (taken < s.len) {
                    pieces.add(new Piece(s.start + taken, s.start + s.len, s.lease));
                }
            }
        }
        return pieces;
    }

    /** After the fetches stopped: the leases queued or arrived after the freeze, whole. */
    List<Piece> drainQueued() {
        List<Piece> pieces = new ArrayList<>();
        synchronized (queued) {
            for (Wire.Lease lease : queued) {
                pieces.add(new Piece(lease.start, lease.end, lease));
            }
            queued.clear();
        }
        return pieces;
    }

    /** At a range's preload point: a fetch when the chain holds under half of what is wanted ahead. */
    private void preload(Buffers b) {
        if (b.next == null || b.next.ids < aheadIds / 2) {
            startFetch();
        }
    }

    /** Starts the tag's one fetch unless one runs, the client is closed or the tag is spent. */
    private void startFetch() {
        if (core.closed || isFinal(failure) || !loading.compareAndSet(false, true)) {
            return;
        }
        if (!core.submit(this::fetch)) {
            loading.set(false);
        }
    }

    /** One fetch: the chain topped up (queued leases first, then the servers); then waiters woken. */
    private void fetch() {
        IdmintException error = null;
        try {
            topUp();
            failure = null;
        } catch (IdmintException e) {
            error = e;
        } catch (RuntimeException e) {
            error = new UnavailableException("fetching a range of tag " + tag + " failed: " + e);
        } finally {
            if (error != null) {
                failure = error;
            }
            loading.set(false);
            synchronized (signal) {
                fetches++;
                signal.notifyAll();
            }
        }
        // Takes may have spent ranges while this fetch ran: fetch again if the chain ran low.
        Buffers b = buffers.get();
        if (error == null && b != CLOSED && (b.next == null
                ? b.current.taken() > b.current.preloadIndex : b.next.ids < aheadIds / 2)) {
            startFetch();
        }
    }

    /** Installs queued leases, then leases from the servers, until the chain holds what is wanted ahead. */
    private void topUp() {
        long ahead = aheadWanted();
        while (true) {
            Wire.Lease lease;
            synchronized (queued) {
                lease = queued.pollFirst();
            }
            if (lease == null) {
                break;
            }
            if (lease.end > mark && !install(lease)) {
                synchronized (queued) {
                    queued.addFirst(lease); // closed, or the chain is full: kept, in order
                }
                return;
            }
        }
        Buffers b = buffers.get();
        long have = b.next == null ? 0 : b.next.ids;
        int room = Limits.READY_LEASES_MAX - (b.next == null ? 0 : b.next.count);
        if (room <= 0 || have >= ahead) {
            return;
        }
        long size = Math.max(core.minLease, Math.min(ahead, Limits.LEASE_COUNT_MAX));
        long calls = Math.max(1, Math.min(Math.min((ahead - have + size - 1) / size, room), Limits.LEASE_CALLS_MAX));
        for (Wire.Lease l : leases(size, (int) calls)) {
            if (!install(l)) {
                synchronized (queued) {
                    queued.addLast(l); // closed, or the chain is full: for the give-back or the next fetch
                }
            }
        }
    }

    /**
     * Leases above the mark, in increasing order, from {@code calls} lease calls at once (one here,
     * the others on the lease threads); rounds whose ranges all lie below the mark (a failover)
     * are asked again, bounded.
     */
    private List<Wire.Lease> leases(long size, int calls) {
        long count = size;
        for (int round = 0; round < Limits.ALLOCATE_ROUNDS_MAX; round++) {
            long asked = count;
            List<CompletableFuture<List<Wire.Lease>>> extra = new ArrayList<>();
            for (int k = 1; k < calls; k++) {
                int at = server;
                extra.add(CompletableFuture.supplyAsync(() -> core.endpoints.call(at, "GET",
                        Wire.path(Wire.RANGES, tag, asked), null, tag, (body, s, headers) -> Wire.leases(body, asked, s)),
                        core.leaseCalls));
            }
            List<Wire.Lease> leases = new ArrayList<>(core.endpoints.call(server, "GET",
                    Wire.path(Wire.RANGES, tag, asked), null, tag, (body, answered, headers) -> Wire.leases(body, asked, answered)));
            server = leases.get(0).server;
            for (CompletableFuture<List<Wire.Lease>> call : extra) {
                try {
                    leases.addAll(call.get(core.endpoints.deadlineMs() + 500, TimeUnit.MILLISECONDS));
                } catch (Exception e) {
                    // Fewer ranges; a range an unanswered call leased is lost, never served.
                }
            }
            leases.sort(Comparator.comparingLong((Wire.Lease l) -> l.start));
            leases.removeIf(l -> l.end <= mark); // below ids already served (a failover): skipped, never served
            if (!leases.isEmpty()) {
                return leases;
            }
            count = Limits.LEASE_COUNT_MAX; // pass the older ranges fast
        }
        throw new UnavailableException(Limits.ALLOCATE_ROUNDS_MAX + " lease requests for tag " + tag
                + " in a row answered ranges below the ids this client already served; retrying later");
    }

    /**
     * The ids the chain should hold ahead: the consumption since the last fetch (ids handed out
     * over the time) times the lease duration, within [min lease, READY_LEASES_MAX batches] and
     * at most LEASE_GROWTH_MAX times the last wish, so no burst sets it alone.
     */
    private long aheadWanted() {
        long now = System.nanoTime();
        Buffers b = buffers.get();
        long left = b.current.left() + (b.next == null ? 0 : b.next.ids);
        long consumed = Math.max(0, installedIds - left);
        long wanted = core.minLease;
        if (fetchNanos != 0) {
            double seconds = Math.max(now - fetchNanos, 1) / 1e9;
            double rate = (consumed - consumedAtFetch) / seconds;
            long grown = Math.max(core.minLease, aheadIds * Limits.LEASE_GROWTH_MAX);
            wanted = (long) Math.min(Math.min(rate * core.leaseDurationS, (double) grown),
                    (double) Limits.READY_LEASES_MAX * Limits.LEASE_COUNT_MAX);
            wanted = Math.max(wanted, core.minLease);
        }
        fetchNanos = now;
        consumedAtFetch = consumed;
        aheadIds = wanted;
        return wanted;
    }

    /**
     * Puts a lease above the mark into the buffer: as the current range if that is spent and
     * nothing is ahead, else at the chain's end. False (not installed, the mark unchanged) when
     * the client is closed or the chain is full.
     */
    private boolean install(Wire.Lease lease) {
        if (lease.end <= mark) {
            // Callers never pass one: serving it would break the order, never skip it silently.
            throw new IllegalStateException("lease [" + lease.start + ", " + lease.end + ") of tag " + tag
                    + " lies below the ids already served (" + mark + ")");
        }
        long start = Math.max(lease.start, mark);
        Segment segment = new Segment(start, lease.end - start, lease);
        while (true) {
            Buffers b = buffers.get();
            if (b == CLOSED || (b.next != null && b.next.count >= Limits.READY_LEASES_MAX)) {
                return false; // closed meanwhile, or no room ahead: the caller queues it
            }
            Buffers replaced = b.next == null && b.current.taken() >= b.current.len
                    ? new Buffers(segment, null) : new Buffers(b.current, Ready.append(b.next, segment));
            if (buffers.compareAndSet(b, replaced)) {
                mark = lease.end;
                installedIds += segment.len;
                return true;
            }
        }
    }

    /** Whether a fetch's failure holds for good: every final error but an unknown tag (asked again, it may be created). */
    private static boolean isFinal(IdmintException failure) {
        return failure != null && failure.isFinal() && !(failure instanceof UnknownTagException);
    }

    /** Orders pieces highest first (a server takes back only the last ids it handed out). */
    static final Comparator<Piece> HIGHEST_FIRST = Comparator.comparingLong((Piece p) -> p.from).reversed();
}
