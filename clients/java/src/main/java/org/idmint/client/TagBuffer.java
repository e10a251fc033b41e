// TagBuffer: one tag's ids in the caller's process, a double buffer of ranges leased from the
// servers.
//
// The take path is lock-free: one volatile read of the pair (current, next), one
// getAndIncrement of the current range's AtomicLong cursor, one compare. A take that finds
// the current range spent switches to the next with one compareAndSet of the pair. Crossing
// PRELOAD_PERCENT of a range starts the one background fetch of the tag (single flight), so
// the next range is usually there before it is needed; only a take that finds both spent
// waits, bounded, for that fetch. The fetch size follows the consumption (the last lease's
// ids over the time it lasted, times the lease duration), within [min lease, BATCH_COUNT_MAX]
// and at most LEASE_GROWTH_MAX times the one before.
//
// A tag's lease requests go to the server that answered the last one while it is up (tags
// spread round robin): ranges of two servers are not ordered. Ids of a tag from one client
// increase: leases wholly below the highest lease end installed
// (the mark; a failover to a node that holds older ranges) are skipped, never served. A lease
// is installed once and never fetched twice; a fetch that failed is not replayed (a range
// the server leased in an answer that never arrived is lost for good, never served).
// freeze() stops the buffer for the close: each range's cursor is moved to its end in one
// atomic step, so an id is either handed out before it or given back after it, never both.
package org.idmint.client;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

/** One tag's double buffer of leased ranges. */
final class TagBuffer {
    /** What {@link #take()} answers when nothing is local; internal only, never handed to a caller. */
    static final long NONE = -1;

    /** A leased range in the buffer: ids {@code start .. start + len - 1}, an index cursor over them. */
    static final class Segment {
        final long start;
        final long len;
        final long preloadIndex;
        final AtomicLong taken = new AtomicLong();
        final Wire.Lease lease;

        Segment(long start, long len, Wire.Lease lease) {
            this.start = start;
            this.len = len;
            this.preloadIndex = len * Limits.PRELOAD_PERCENT / 100;
            this.lease = lease;
        }
    }

    /** The current range and the next one (or null); replaced whole, never changed. */
    static final class Buffers {
        final Segment current;
        final Segment next;

        Buffers(Segment current, Segment next) {
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
    /** Leases answered beyond the one installed, for the next fetches. Guarded by itself. */
    private final ArrayDeque<Wire.Lease> queued = new ArrayDeque<>();
    /** The last fetch's failure, cleared by a fetch that installed a range. */
    private volatile IdmintException failure;
    /** Fetches finished; waiters wait for it to change. Guarded by {@link #signal}. */
    private long fetches;
    private final Object signal = new Object();
    // Written by the fetch only (one at a time; volatile for the next fetch's thread).
    private volatile long mark;
    private volatile long leaseSize;
    private volatile long lastLeaseNanos;
    private volatile long lastLeaseLen;
    /** The ids the next fetch wants in all (past BATCH_COUNT_MAX: several calls). */
    private volatile long wantedIds;
    /** The server that answered the tag's last lease request, asked first next time; -1 for none. */
    private volatile int server = -1;

    TagBuffer(String tag, IdmintClient.Core core) {
        this.tag = tag;
        this.core = core;
    }

    /** The next id from the local ranges, or NONE when both are spent (a fetch is then started). */
    long take() {
        while (true) {
            Buffers b = buffers.get();
            Segment s = b.current;
            long i = s.taken.getAndIncrement();
            if (i < s.len) {
                if (i == s.preloadIndex) {
                    startFetch();
                }
                return s.start + i;
            }
            Segment n = b.next;
            if (n == null) {
                startFetch();
                return NONE;
            }
            buffers.compareAndSet(b, new Buffers(n, null));
        }
    }

    /** Up to {@code max} ids from one local range into {@code out[from..]}; how many (0 when nothing is local). */
    int takeInto(long[] out, int from, int max) {
        while (true) {
            Buffers b = buffers.get();
            Segment s = b.current;
            long i = s.taken.getAndAdd(max);
            if (i < s.len) {
                int k = (int) Math.min(max, s.len - i);
                for (int j = 0; j < k; j++) {
                    out[from + j] = s.start + i + j;
                }
                if (i <= s.preloadIndex && s.preloadIndex < i + k) {
                    startFetch();
                }
                return k;
            }
            Segment n = b.next;
            if (n == null) {
                startFetch();
                return 0;
            }
            buffers.compareAndSet(b, new Buffers(n, null));
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
                && b.current.taken.get() >= b.current.len && !loading.get();
    }

    /**
     * Stops the buffer: after this no id is handed out. Answers the unused ids of its two ranges:
     * each cursor is moved past its range's end in one atomic step, so every id was either
     * handed out before (and is not given back) or is given back (and never handed out).
     */
    List<Piece> freeze() {
        Buffers old = buffers.getAndSet(CLOSED);
        List<Piece> pieces = new ArrayList<>();
        for (Segment s : new Segment[] {old.current, old.next}) {
            if (s != null && s.lease != null) {
                long taken = s.taken.getAndSet(s.len);
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

    /** Starts the tag's one fetch unless one runs, the client is closed or the tag is spent. */
    private void startFetch() {
        if (core.closed || isFinal(failure) || !loading.compareAndSet(false, true)) {
            return;
        }
        if (!core.submit(this::fetch)) {
            loading.set(false);
        }
    }

    /** One fetch: a queued lease, else a lease from the servers; installed, then waiters woken. */
    private void fetch() {
        IdmintException error = null;
        try {
            install(nextLease());
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
        // A take may have passed the preload point while this fetch ran: fetch again.
        Buffers b = buffers.get();
        if (error == null && b != CLOSED && b.next == null && b.current.taken.get() > b.current.preloadIndex) {
            startFetch();
        }
    }

    /** A lease above the mark: a queued one, else one from the servers (skipping those below it). */
    private Wire.Lease nextLease() {
        synchronized (queued) {
            while (!queued.isEmpty()) {
                Wire.Lease lease = queued.pollFirst();
                if (lease.end > mark) {
                    return lease;
                }
            }
        }
        long count = leaseSize();
        for (int round = 0; round < Limits.ALLOCATE_ROUNDS_MAX; round++) {
            long asked = count;
            // Past the batch limit the consumption wants more than one call brings: the extra
            // calls run beside this one and their ranges wait in the queue.
            List<CompletableFuture<List<Wire.Lease>>> extra = new ArrayList<>();
            for (long more = wantedIds - asked; more > 0 && extra.size() < Limits.QUEUED_LEASES_MAX; more -= asked) {
                int at = server;
                extra.add(CompletableFuture.supplyAsync(() -> core.endpoints.call(at, "GET",
                        Wire.path(Wire.RANGES, tag, asked), null, tag, (body, s) -> Wire.leases(body, asked, s)),
                        core.leaseCalls));
            }
            List<Wire.Lease> leases = new ArrayList<>(core.endpoints.call(server, "GET",
                    Wire.path(Wire.RANGES, tag, asked), null, tag, (body, answered) -> Wire.leases(body, asked, answered)));
            server = leases.get(0).server;
            for (CompletableFuture<List<Wire.Lease>> call : extra) {
                try {
                    leases.addAll(call.get(core.endpoints.deadlineMs() + 500, TimeUnit.MILLISECONDS));
                } catch (Exception e) {
                    // Fewer ranges queued; a range an unanswered call leased is lost, never served.
                }
            }
            leases.sort(Comparator.comparingLong((Wire.Lease l) -> l.start));
            Wire.Lease first = null;
            for (Wire.Lease lease : leases) {
                if (lease.end <= mark) {
                    continue; // below ids already served (a failover): skipped, never served
                }
                if (first == null) {
                    first = lease;
                } else {
                    synchronized (queued) {
                        if (queued.size() < Limits.QUEUED_LEASES_MAX) {
                            queued.addLast(lease);
                        }
                    }
                }
            }
            if (first != null) {
                return first;
            }
            count = Limits.BATCH_COUNT_MAX; // pass the older ranges fast
        }
        throw new UnavailableException(Limits.ALLOCATE_ROUNDS_MAX + " lease requests for tag " + tag
                + " in a row answered ranges below the ids this client already served; retrying later");
    }

    /** The next lease's size: the last lease's rate times the lease duration, bounded. */
    private long leaseSize() {
        long now = System.nanoTime();
        long size = core.minLease;
        if (lastLeaseNanos != 0) {
            double seconds = Math.max(now - lastLeaseNanos, 1) / 1e9;
            double wanted = lastLeaseLen / seconds * core.leaseDurationS;
            long grown = Math.max(core.minLease, leaseSize * Limits.LEASE_GROWTH_MAX);
            size = (long) Math.min(Math.min(wanted, grown), Limits.BATCH_COUNT_MAX);
            size = Math.max(size, core.minLease);
            wantedIds = (long) Math.min(Math.min(wanted, (double) grown), Limits.BATCH_COUNT_MAX * 8.0);
        } else {
            wantedIds = size;
        }
        lastLeaseNanos = now;
        leaseSize = size;
        return size;
    }

    /** Puts a lease into the buffer: as the current range if that is spent, else as the next. */
    private void install(Wire.Lease lease) {
        if (lease.end <= mark) {
            // nextLease() never answers one: serving it would break the order, never skip it silently.
            throw new IllegalStateException("lease [" + lease.start + ", " + lease.end + ") of tag " + tag
                    + " lies below the ids already served (" + mark + ")");
        }
        long start = Math.max(lease.start, mark);
        Segment segment = new Segment(start, lease.end - start, lease);
        mark = lease.end;
        lastLeaseLen = segment.len;
        while (true) {
            Buffers b = buffers.get();
            if (b == CLOSED || b.next != null) {
                // Closed meanwhile (given back by the close), or a next range already there.
                synchronized (queued) {
                    queued.addFirst(lease);
                }
                return;
            }
            Buffers replaced = b.current.taken.get() >= b.current.len
                    ? new Buffers(segment, null) : new Buffers(b.current, segment);
            if (buffers.compareAndSet(b, replaced)) {
                return;
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
