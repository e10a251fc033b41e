// A JDK-only MODEL of Baidu uid-generator's hot path CachedUidGenerator.getUID() ->
// RingBuffer.take(), written for idmint's benchmarks (issue 23, item 3). It is NOT
// uid-generator itself and contains none of its code: it redoes, in its own words, what a take
// costs there, so that idmint's cached ring can be compared with it in the same run on the
// same machine (no Maven Central here, so the real jar cannot be fetched).
//
// What a take does in uid-generator (read from baidu/uid-generator, src/main/java/com/baidu/
// fsg/uid/buffer/RingBuffer.java, BufferPaddingExecutor.java, impl/CachedUidGenerator.java,
// utils/PaddedAtomicLong.java), and so here:
//   1. read the cursor, then move it by one with a CAS loop (AtomicLong.updateAndGet) unless
//      it has caught the tail (read inside the loop);
//   2. read the tail again; below the padding threshold (paddingFactor 50 % of the ring) hand
//      a padding job to the padding executor (a thread pool of 2 x cores threads; a job that
//      finds another padding running returns at once);
//   3. a cursor that did not move is a rejected take (uid-generator throws; counted here);
//   4. check the slot's flag (a padded AtomicLong per slot) says "can take", read the id,
//      set the flag back to "can put".
// Puts are `synchronized` on the ring; the padding job borrows the next second
// (lastSecond.incrementAndGet()) and puts its 8 192 ids (a boxed List<Long>, as there) until a
// put finds the ring full. The ring holds (max sequence + 1) << boostPower ids: 8 192 << 3 =
// 65 536 with the defaults (28 time bits in seconds, 22 worker bits, 13 sequence bits). The
// ring is filled once before the first take, as uid-generator's init does. Logging is modelled
// as disabled (its debug/info calls cost a level check; uid-generator logs at INFO on every
// take below the threshold, which would only make it slower).
//
// Run:  java scripts/peers/CachedUid.java [ROUNDS] [SECONDS_PER_ROUND]   (defaults 5 and 1)
// The JIT is warmed up first (3 untimed rounds), then each timed round takes ids on 1 thread
// and prints ids/s and the rejected takes; the last line is a summary scripts/bench-ring reads:
//   cached-uid-model rounds=N median_ids_per_s=X min=... max=... rejected=R

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

public class CachedUid {
    /** An AtomicLong padded out to its own cache line, against false sharing. */
    static final class PaddedLong extends AtomicLong {
        volatile long q1, q2, q3, q4, q5, q6 = 7L;

        PaddedLong(long value) {
            super(value);
        }

        long keepPadding() {
            return q1 + q2 + q3 + q4 + q5 + q6;
        }
    }

    /** uid-generator's default bit split: 1 sign, 28 time (seconds), 22 worker, 13 sequence. */
    static final int TIME_BITS = 28, WORKER_BITS = 22, SEQUENCE_BITS = 13;
    static final long MAX_SEQUENCE = (1L << SEQUENCE_BITS) - 1;
    static final int BOOST_POWER = 3, PADDING_PERCENT = 50;
    static final boolean DEBUG_LOGGING = false;

    /** The ring: slots, a flag per slot, a tail and a cursor, each padded. */
    static final class Ring {
        static final long START = -1, PUT_OK = 0, TAKE_OK = 1;
        final int size;
        final long mask;
        final long[] slots;
        final PaddedLong[] flags;
        final PaddedLong tail = new PaddedLong(START);
        final PaddedLong cursor = new PaddedLong(START);
        final int threshold;
        Padding padding;
        final AtomicLong rejectedTakes = new AtomicLong();

        Ring(int size, int paddingPercent) {
            this.size = size;
            this.mask = size - 1;
            this.slots = new long[size];
            this.flags = new PaddedLong[size];
            for (int i = 0; i < size; i++) {
                flags[i] = new PaddedLong(PUT_OK);
            }
            this.threshold = size * paddingPercent / 100;
        }

        /** One id in, under the ring's monitor; false when full. */
        boolean put(long id) {
            synchronized (this) {
                long t = tail.get();
                long c = cursor.get();
                long used = t - (c == START ? 0 : c);
                if (used == size - 1) {
                    return false;
                }
                int index = (int) ((t + 1) & mask);
                if (flags[index].get() != PUT_OK) {
                    return false;
                }
                slots[index] = id;
                flags[index].set(TAKE_OK);
                tail.incrementAndGet();
                return true;
            }
        }

        /** One id out; throws when the cursor has caught the tail (a rejected take). */
        long take() {
            long before = cursor.get();
            long next = cursor.updateAndGet(c -> c == tail.get() ? c : c + 1);
            if (next < before) {
                throw new IllegalStateException("cursor moved back");
            }
            long t = tail.get();
            if (t - next < threshold) {
                padding.submit();
            }
            if (next == before) {
                throw new IllegalStateException("rejected take: ring empty, tail " + t);
            }
            int index = (int) (next & mask);
            if (flags[index].get() != TAKE_OK) {
                throw new IllegalStateException("slot not ready to take");
            }
            long id = slots[index];
            flags[index].set(PUT_OK);
            return id;
        }
    }

    /** The padding executor: a pool that refills the ring one borrowed second at a time. */
    static final class Padding {
        final Ring ring;
        final long workerId;
        final long epochSeconds;
        final AtomicBoolean running = new AtomicBoolean(false);
        final PaddedLong lastSecond;
        final ExecutorService pool;

        Padding(Ring ring, long workerId, long epochSeconds) {
            this.ring = ring;
            this.workerId = workerId;
            this.epochSeconds = epochSeconds;
            this.lastSecond = new PaddedLong(System.currentTimeMillis() / 1000);
            int cores = Runtime.getRuntime().availableProcessors();
            this.pool = Executors.newFixedThreadPool(cores * 2, r -> {
                Thread thread = new Thread(r, "padding");
                thread.setDaemon(true);
                return thread;
            });
        }

        void submit() {
            pool.submit(this::pad);
        }

        /** Puts whole seconds of ids until a put finds the ring full. */
        void pad() {
            if (!running.compareAndSet(false, true)) {
                return;
            }
            boolean full = false;
            while (!full) {
                for (Long id : idsOfSecond(lastSecond.incrementAndGet())) {
                    if (!ring.put(id)) {
                        full = true;
                        break;
                    }
                }
            }
            running.compareAndSet(true, false);
        }

        /** Every id of one second for this worker, as a boxed list like uid-generator's. */
        List<Long> idsOfSecond(long second) {
            int count = (int) MAX_SEQUENCE + 1;
            List<Long> ids = new ArrayList<>(count);
            long first = ((second - epochSeconds) << (WORKER_BITS + SEQUENCE_BITS))
                    | (workerId << SEQUENCE_BITS);
            for (int i = 0; i < count; i++) {
                ids.add(first + i);
            }
            return ids;
        }
    }

    /** The generator: getUID() is a take, with the rejected take counted. */
    static final class Generator {
        final Ring ring;

        Generator() {
            ring = new Ring((int) (MAX_SEQUENCE + 1) << BOOST_POWER, PADDING_PERCENT);
            // Epoch 2025-01-01: uid-generator's default (2016-05-20) plus 28 bits of seconds
            // ran out in 2024, and a deployment today sets its own epoch.
            ring.padding = new Padding(ring, 1, 1735689600L);
            ring.padding.pad();
        }

        long getUid() {
            try {
                long id = ring.take();
                if (DEBUG_LOGGING) {
                    System.out.println(id);
                }
                return id;
            } catch (IllegalStateException e) {
                ring.rejectedTakes.incrementAndGet();
                return -1;
            }
        }
    }

    static long sink;

    /** Ids per second one thread takes for `seconds`. */
    static double round(Generator generator, double seconds) {
        long deadline = System.nanoTime() + (long) (seconds * 1e9);
        long started = System.nanoTime();
        long taken = 0;
        long mix = 0;
        while (System.nanoTime() < deadline) {
            for (int i = 0; i < 1024; i++) {
                long id = generator.getUid();
                if (id >= 0) {
                    mix ^= id;
                    taken++;
                }
            }
        }
        sink ^= mix;
        return taken / ((System.nanoTime() - started) / 1e9);
    }

    public static void main(String[] args) throws Exception {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 5;
        double seconds = args.length > 1 ? Double.parseDouble(args[1]) : 1.0;
        Generator generator = new Generator();
        for (int i = 0; i < 3; i++) {
            round(generator, seconds);
        }
        long rejectedBefore = generator.ring.rejectedTakes.get();
        double[] rates = new double[rounds];
        for (int i = 0; i < rounds; i++) {
            long rejected = generator.ring.rejectedTakes.get();
            rates[i] = round(generator, seconds);
            System.out.printf("round %d: %.0f ids/s on 1 thread, %d rejected takes%n", i + 1,
                    rates[i], generator.ring.rejectedTakes.get() - rejected);
        }
        double[] sorted = rates.clone();
        Arrays.sort(sorted);
        System.out.printf(
                "cached-uid-model rounds=%d median_ids_per_s=%.0f min=%.0f max=%.0f rejected=%d%n",
                rounds, sorted[rounds / 2], sorted[0], sorted[rounds - 1],
                generator.ring.rejectedTakes.get() - rejectedBefore);
        if (sink == 42) {
            System.out.println(generator.ring.tail.keepPadding());
        }
        generator.ring.padding.pool.shutdownNow();
        generator.ring.padding.pool.awaitTermination(1, TimeUnit.SECONDS);
    }
}
