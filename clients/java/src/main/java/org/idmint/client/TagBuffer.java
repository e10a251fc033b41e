// TagBuffer: one tag's ids in the caller's process: the current range and a short chain of
// ranges leased ahead from the servers.
//
// The take path is lock-free: one volatile read of the current range, one getAndAdd of its
// cursor, two compares (the range's end, its preload point). The ranges leased ahead hang off the current one as a linked chain; a
// take that finds the current range spent moves to the next with one compareAndSet, on the
// caller's thread: no thread has to wake up for it. Crossing PRELOAD_PERCENT of a range
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
// served). freeze() stops the buffer for the close: the current range is swapped for CLOSED in
// one atomic step, then each range's cursor moved to its end and its link sealed, one atomic
// step each, so an id is either handed out before it or given back after it, never both.
package org.idmint.client;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

/** One tag's leased ranges: the current one and a chain of ranges ahead; also the tag's {@link TagIds} handle. */
final class TagBuffer extends TagIds {
    /** What {@link #take()} answers when nothing is local; internal only, never handed to a caller. */
    static final long NONE = -1;

    /** A field's VarHandle (the buffer's lookup reaches its nested classes' private fields: they are nestmates). */
    static VarHandle varHandle(Class<?> owner, String field, Class<?> type) {
        try {
            return MethodHandles.lookup().findVarHandle(owner, field, type);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    /** A range's fixed part, and its link to the range after it (set once). */
    abstract static class SegmentHead {
        private static final VarHandle NEXT = varHandle(SegmentHead.class, "next", Segment.class);

        final long start;
        final long len;
        final long preloadIndex;
        final Wire.Lease lease;
        /** The buffer the range belongs to (null for the shared sentinels), and its tag. */
        final TagBuffer owner;
        final String tag;
        /** The range after this one: null until one is installed, SEALED once frozen. Only through NEXT. */
        @SuppressWarnings("unused")
        private volatile Segment next;

        SegmentHead(long start, long len, Wire.Lease lease, TagBuffer owner) {
            this.start = start;
            this.len = len;
            this.preloadIndex = len * Limits.PRELOAD_PERCENT / 100;
            this.lease = lease;
            this.owner = owner;
            this.tag = owner == null ? null : owner.tag;
        }

        Segment next() {
            return (Segment) NEXT.getVolatile(this);
        }

        /** Links {@code segment} after this one unless a range is already linked (or this is sealed). */
        boolean link(Segment segment) {
            return NEXT.compareAndSet(this, (Segment) null, segment);
        }

        /** Seals the link (no range can be linked after it); the range that was linked, or null. */
        Segment seal() {
            return (Segment) NEXT.getAndSet(this, SEALED);
        }
    }

    /** Keeps the cursor off the cache line of the fixed fields and of whatever lies before the object. */
    abstract static class SegmentPadBefore extends SegmentHead {
        @SuppressWarnings("unused")
        private long p01, p02, p03, p04, p05, p06, p07, p08;

        SegmentPadBefore(long start, long len, Wire.Lease lease, TagBuffer owner) {
            super(start, len, lease, owner);
        }
    }

    /** The cursor: written by every take, so it gets a cache line of its own. */
    abstract static class SegmentCursor extends SegmentPadBefore {
        private static final VarHandle TAKEN = varHandle(SegmentCursor.class, "taken", long.class);

        /** Ids handed out of the range (past len: spent); only through TAKEN, atomically. */
        @SuppressWarnings("unused")
        private volatile long taken;

        SegmentCursor(long start, long len, Wire.Lease lease, TagBuffer owner) {
            super(start, len, lease, owner);
        }

        /** The cursor before adding {@code n} (the field is the cursor: no AtomicLong to reach through). */
        final long takeIndex(long n) {
            return (long) TAKEN.getAndAdd(this, n);
        }

        final long taken() {
            return (long) TAKEN.getVolatile(this);
        }

        /** Moves the cursor past the end; the cursor before. */
        final long spend() {
            return (long) TAKEN.getAndSet(this, len);
        }
    }

    /**
     * A leased range in the buffer: ids {@code start .. start + len - 1}, an index cursor over
     * them, and the next range of the chain. The padding on both sides of the cursor keeps
     * other objects (a garbage collection may move the tag's buffer next to it) off its line, so
     * a take on one thread does not make another thread's reads miss.
     */
    static final class Segment extends SegmentCursor {
        @SuppressWarnings("unused")
        private long p11, p12, p13, p14, p15, p16, p17, p18;

        Segment(long start, long len, Wire.Lease lease, TagBuffer owner) {
            super(start, len, lease, owner);
        }

        /** Ids not handed out yet. */
        long left() {
            return Math.max(0, len - taken());
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

    /** The link of a frozen range: nothing can be linked after it. Never current. */
    static final Segment SEALED = new Segment(0, 0, null, null);
    /** The current range of a closed buffer: empty, and sealed. */
    private static final Segment CLOSED = new Segment(0, 0, null, null);

    static {
        CLOSED.seal();
    }

    private static final VarHandle CURRENT = varHandle(TagBuffer.class, "current", Segment.class);

    final String tag;
    /** The client, for what a take from local memory cannot answer (a wait, a strict tag, the close). */
    private final IdmintClient client;
    private final IdmintClient.Core core;
    /**
     * The range takes take from; the ranges ahead hang off it, in increasing order. A take
     * reads this one field and adds to the range's cursor; it moves forward only, along the
     * links (CLOSED after the freeze). Written only through CURRENT.
     */
    @SuppressWarnings("unused")
    private volatile Segment current;
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

    TagBuffer(IdmintClient client, String tag, IdmintClient.Core core) {
        this.client = client;
        this.tag = tag;
        this.core = core;
        this.current = new Segment(0, 0, null, this);
    }

    @Override
    public String tag() {
        return tag;
    }

    /**
     * The next id: {@link #take}'s common case inline, everything else (the preload point, a
     * spent range, a wait, a strict tag) in one call, so the caller's compiled loop holds no
     * branch that only a rare event takes (the JIT would compile it as a trap and deoptimize
     * the loop when it comes).
     */
    @Override
    public long nextId() {
        Segment s = current;
        long i = s.takeIndex(1);
        if (i < s.len && i != s.preloadIndex) {
            return s.start + i;
        }
        return nextIdSlow(s, i);
    }

    /** {@link #nextId} past the common case: index {@code i} of {@code s} was taken. */
    private long nextIdSlow(Segment s, long i) {
        long id = takeSlow(s, i);
        return id != NONE ? id : client.nextIdWaiting(tag);
    }

    @Override
    public long[] nextIds(int count) {
        return client.nextIds(tag, count);
    }

    @Override
    public OptionalLong tryNextId() {
        long id = take();
        if (id != NONE) {
            return OptionalLong.of(id);
        }
        // A dropped buffer (frozen while the client is open): the tag's buffer now, by name.
        return current == CLOSED && !core.closed ? client.tryNextId(tag) : OptionalLong.empty();
    }

    /**
     * The next id from the local ranges, or NONE when all are spent (a fetch is then started).
     * Only the common case is here, so the JIT inlines it into the caller's loop; the preload
     * point and a spent range go to {@link #takeSlow}.
     */
    long take() {
        Segment s = current;
        long i = s.takeIndex(1);
        if (i < s.len && i != s.preloadIndex) {
            return s.start + i;
        }
        return takeSlow(s, i);
    }

    /** The current range (for a take by name to remember; CLOSED once frozen). */
    Segment current() {
        return current;
    }

    /** {@link #take} at the preload point or past the range's end: index {@code i} of {@code s} was taken. */
    long takeSlow(Segment s, long i) {
        while (true) {
            if (i < s.len) {
                if (i == s.preloadIndex) {
                    preload(s);
                }
                return s.start + i;
            }
            Segment n = s.next();
            if (n == null) {
                startFetch();
                return NONE;
            }
            if (n == SEALED) {
                return NONE; // frozen: the client is closing
            }
            CURRENT.compareAndSet(this, s, n);
            s = current;
            i = s.takeIndex(1);
        }
    }

    /** Up to {@code max} ids from one local range into {@code out[from..]}; how many (0 when nothing is local). */
    int takeInto(long[] out, int from, int max) {
        while (true) {
            Segment s = current;
            long i = s.takeIndex(max);
            if (i < s.len) {
                int k = (int) Math.min(max, s.len - i);
                for (int j = 0; j < k; j++) {
                    out[from + j] = s.start + i + j;
                }
                if (i <= s.preloadIndex && s.preloadIndex < i + k) {
                    preload(s);
                }
                return k;
            }
            Segment n = s.next();
            if (n == null || n == SEALED) {
                if (n == null) {
                    startFetch();
                }
                return 0;
            }
            CURRENT.compareAndSet(this, s, n);
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
    long[] takeIds(int count) {
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
        Segment s = current;
        return failure instanceof UnknownTagException && s.next() == null && s.taken() >= s.len && !loading.get();
    }

    /**
     * Stops the buffer: after this no id is handed out. Answers the unused ids of its ranges:
     * the current range is swapped for CLOSED (no take can switch to a range after it), then
     * each range's cursor is moved past its end and its link sealed, each in one atomic step,
     * so every id was either handed out before (and is not given back) or is given back (and
     * never handed out), and a range installed meanwhile is either sealed in here or refused
     * (and queued, for {@link #drainQueued}).
     */
    List<Piece> freeze() {
        List<Piece> pieces = new ArrayList<>();
        Segment s = (Segment) CURRENT.getAndSet(this, CLOSED);
        while (s != null && s != CLOSED && s != SEALED) {
            if (s.lease != null) {
                long taken = s.spend();
                if (taken < s.len) {
                    pieces.add(new Piece(s.start + taken, s.start + s.len, s.lease));
                }
            }
            s = s.seal();
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
    private void preload(Segment s) {
        if (s.next() == null || idsAhead(s) < aheadIds / 2) {
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
        Segment s = current;
        if (error == null && s != CLOSED && (s.next() == null
                ? s.taken() > s.preloadIndex : idsAhead(s) < aheadIds / 2)) {
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
        Segment s = current;
        long have = idsAhead(s);
        int room = Limits.READY_LEASES_MAX - rangesAhead(s);
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
        Segment s = current;
        long left = s.left() + idsAhead(s);
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
     * Puts a lease above the mark at the chain's end (after the current range when nothing is
     * ahead). False (not installed, the mark unchanged) when the client is closed or the chain
     * is full. Package-private for the buffer's model test; otherwise only the fetch calls it.
     */
    boolean install(Wire.Lease lease) {
        if (lease.end <= mark) {
            // Callers never pass one: serving it would break the order, never skip it silently.
            throw new IllegalStateException("lease [" + lease.start + ", " + lease.end + ") of tag " + tag
                    + " lies below the ids already served (" + mark + ")");
        }
        long start = Math.max(lease.start, mark);
        Segment segment = new Segment(start, lease.end - start, lease, this);
        Segment s = current;
        if (s == CLOSED || rangesAhead(s) >= Limits.READY_LEASES_MAX) {
            return false; // closed meanwhile, or no room ahead: the caller queues it
        }
        while (true) {
            Segment tail = s;
            for (Segment n = tail.next(); n != null; n = tail.next()) {
                if (n == SEALED) {
                    return false; // frozen meanwhile: the caller queues it for the give-back
                }
                tail = n;
            }
            if (tail.link(segment)) {
                mark = lease.end;
                installedIds += segment.len;
                return true;
            }
            s = tail; // only the freeze links (seals) besides the one fetch: look again
        }
    }

    /** Ids in the ranges linked after {@code s}. */
    private static long idsAhead(Segment s) {
        long ids = 0;
        for (Segment n = s.next(); n != null && n != SEALED; n = n.next()) {
            ids += n.len;
        }
        return ids;
    }

    /** Ranges linked after {@code s}. */
    private static int rangesAhead(Segment s) {
        int count = 0;
        for (Segment n = s.next(); n != null && n != SEALED; n = n.next()) {
            count++;
        }
        return count;
    }

    /** Whether a fetch's failure holds for good: every final error but an unknown tag (asked again, it may be created). */
    private static boolean isFinal(IdmintException failure) {
        return failure != null && failure.isFinal() && !(failure instanceof UnknownTagException);
    }

    /** Orders pieces highest first (a server takes back only the last ids it handed out). */
    static final Comparator<Piece> HIGHEST_FIRST = Comparator.comparingLong((Piece p) -> p.from).reversed();
}
