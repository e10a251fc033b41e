// LeafGet.java: a JDK-only MODEL of the per-id path of Meituan Leaf's segment mode,
// `SegmentIDGenImpl.get(key)` (leaf-core, com.sankuai.inf.leaf.segment) over its
// `SegmentBuffer`. It is not Leaf itself and contains none of its code: it repeats, in its
// own words, what Leaf does for every id, so idmint's in-process take by name has a
// same-machine, same-run baseline (issue 23, item 2). Leaf's own build needs Maven Central,
// which this machine does not reach.
//
// What each `get(key)` does here, as Leaf's does:
//   1. a volatile read of the "initialised" flag;
//   2. two ConcurrentHashMap lookups by String (`containsKey`, then `get`);
//   3. a volatile read of the buffer's "init ok" flag;
//   4. the buffer's ReentrantReadWriteLock read lock taken and released around the take;
//   5. the current segment read (volatile index into a two-slot array); the preload check:
//      next not ready, idle (max - value) below 90 % of the step, and a compareAndSet of the
//      "refill running" flag, which hands the refill to an executor thread;
//   6. `AtomicLong.getAndIncrement()` on the segment's value, compared with its max;
//   7. a new result object (id and status) per id.
// A spent segment takes the write lock, switches to the preloaded one and retries. The store
// is an in-memory row (max_id += step under a monitor), step 1 000 000 (Leaf's MAX_STEP and
// idmint's STEP_MAX), so refills are inside the measurement, as in idmint's bench.
//
// Run: `java scripts/peers/LeafGet.java [SECONDS_PER_ROUND] [ROUNDS]` (defaults 1 and 5).
// It warms the JIT up for WARMUP_SECONDS (C2 compiles the loop), then runs the timed rounds
// on 1 thread, twice: with one String key reused (its hash cached in the String, the
// friendliest case for Leaf), then with a new String per call (as a key taken from a request
// path is, so its hash is computed per call). Prints ids/s per round and the median, and a
// last line `leaf_get_ids_per_s MEDIAN` for scripts (scripts/bench-take reads it).

import java.util.Arrays;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantReadWriteLock;

public class LeafGet {
    static final int STEP = 1_000_000;
    static final double WARMUP_SECONDS = 3.0;

    /** The answer per id, allocated per call as Leaf's result is. */
    static final class Answer {
        final long id;
        final boolean ok;

        Answer(long id, boolean ok) {
            this.id = id;
            this.ok = ok;
        }
    }

    /** One range [value, max) handed out by an atomic counter. */
    static final class Range {
        final AtomicLong value = new AtomicLong(0);
        volatile long max;
        volatile int step;

        long idle() {
            return max - value.get();
        }
    }

    /** Two ranges, the index of the one in use, and the flags and lock around them. */
    static final class DoubleRange {
        final String key;
        final Range[] ranges = {new Range(), new Range()};
        volatile int current;
        volatile boolean nextReady;
        volatile boolean initOk;
        final AtomicBoolean refilling = new AtomicBoolean(false);
        final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();

        DoubleRange(String key) {
            this.key = key;
        }

        Range current() {
            return ranges[current];
        }

        int other() {
            return (current + 1) & 1;
        }
    }

    /** The store: one row's max_id, moved by `step` per allocation. */
    static final class Row {
        private long maxId = 1;

        synchronized long allocate(int step) {
            maxId += step;
            return maxId;
        }
    }

    static final class Generator {
        volatile boolean initialised;
        final ConcurrentHashMap<String, DoubleRange> cache = new ConcurrentHashMap<>();
        final ConcurrentHashMap<String, Row> rows = new ConcurrentHashMap<>();
        final ExecutorService refiller = Executors.newSingleThreadExecutor(r -> {
            Thread t = new Thread(r, "refill");
            t.setDaemon(true);
            return t;
        });

        void addTag(String key) {
            rows.put(key, new Row());
            cache.put(key, new DoubleRange(key));
            initialised = true;
        }

        void load(String key, Range range) {
            long max = rows.get(key).allocate(STEP);
            range.value.set(max - STEP);
            range.max = max;
            range.step = STEP;
        }

        Answer get(String key) {
            if (!initialised) {
                return new Answer(-1, false);
            }
            if (!cache.containsKey(key)) {
                return new Answer(-2, false);
            }
            DoubleRange buffer = cache.get(key);
            if (!buffer.initOk) {
                synchronized (buffer) {
                    if (!buffer.initOk) {
                        load(key, buffer.current());
                        buffer.initOk = true;
                    }
                }
            }
            return take(cache.get(key));
        }

        Answer take(DoubleRange buffer) {
            while (true) {
                buffer.lock.readLock().lock();
                try {
                    Range range = buffer.current();
                    if (!buffer.nextReady
                            && range.idle() < 0.9 * range.step
                            && buffer.refilling.compareAndSet(false, true)) {
                        refiller.execute(() -> {
                            load(buffer.key, buffer.ranges[buffer.other()]);
                            buffer.lock.writeLock().lock();
                            try {
                                buffer.nextReady = true;
                                buffer.refilling.set(false);
                            } finally {
                                buffer.lock.writeLock().unlock();
                            }
                        });
                    }
                    long id = range.value.getAndIncrement();
                    if (id < range.max) {
                        return new Answer(id, true);
                    }
                } finally {
                    buffer.lock.readLock().unlock();
                }
                while (buffer.refilling.get()) {
                    Thread.onSpinWait();
                }
                buffer.lock.writeLock().lock();
                try {
                    Range range = buffer.current();
                    long id = range.value.getAndIncrement();
                    if (id < range.max) {
                        return new Answer(id, true);
                    }
                    if (!buffer.nextReady) {
                        return new Answer(-3, false);
                    }
                    buffer.current = buffer.other();
                    buffer.nextReady = false;
                } finally {
                    buffer.lock.writeLock().unlock();
                }
            }
        }
    }

    static long sink;

    /** Takes ids for `seconds`; returns ids per second. */
    static double round(Generator gen, String key, boolean freshKey, double seconds) {
        char[] chars = key.toCharArray();
        long ids = 0;
        long acc = 0;
        long start = System.nanoTime();
        long deadline = start + (long) (seconds * 1e9);
        long now;
        do {
            for (int i = 0; i < 1 << 20; i++) {
                Answer a = gen.get(freshKey ? new String(chars) : key);
                if (!a.ok) {
                    throw new IllegalStateException("no id: " + a.id);
                }
                acc += a.id;
            }
            ids += 1 << 20;
            now = System.nanoTime();
        } while (now < deadline);
        sink += acc;
        return ids / ((now - start) / 1e9);
    }

    static double median(double[] values) {
        double[] sorted = values.clone();
        Arrays.sort(sorted);
        int n = sorted.length;
        return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 1.0;
        int rounds = args.length > 1 ? Integer.parseInt(args[1]) : 5;
        String key = "bench";
        Generator gen = new Generator();
        gen.addTag(key);
        round(gen, key, false, WARMUP_SECONDS);
        round(gen, key, true, WARMUP_SECONDS / 2);
        double reused = 0;
        for (boolean fresh : new boolean[] {false, true}) {
            double[] rates = new double[rounds];
            for (int r = 0; r < rounds; r++) {
                rates[r] = round(gen, key, fresh, seconds);
            }
            StringBuilder line = new StringBuilder();
            line.append(fresh ? "get(new String(key))" : "get(key), one String  ");
            line.append(" ids/s per round:");
            for (double rate : rates) {
                line.append(String.format(" %.1fM", rate / 1e6));
            }
            line.append(String.format("  median %.1fM", median(rates) / 1e6));
            System.out.println(line);
            if (!fresh) {
                reused = median(rates);
            }
        }
        System.out.printf("leaf_get_ids_per_s %.0f%n", reused);
        if (sink == 42) {
            System.out.println();
        }
    }
}
