// FailoverTest: two nodes on the shared MariaDB; while four threads take ids through a client
// of both, one node is killed with -9. The client fails over to the other, and no id is handed
// out twice over more than a million ids, and each thread's ids keep increasing. Skipped (and recorded as skipped) without a MariaDB.
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

class FailoverTest {
    private static final int THREADS = 4;
    /**
     * Ids a taker takes between two 1 ms pauses: at most about 4 M ids a second in all, so the
     * client holds a few million ids ahead (its rate times the 1 s lease duration) and the ids
     * kept until the check stay in the tens of millions at most, not the heap's worth an
     * unpaced run takes before its held ranges are spent and a call meets the killed node.
     */
    private static final int PACE_IDS = 1_000;

    @Test
    void a_node_killed_with_minus_9_mid_run_repeats_no_id() throws Exception {
        String store = Node.mysqlUrl();
        if (!Node.reachable(store)) {
            String reason = "no MariaDB at IDMINT_TEST_MYSQL_URL or 127.0.0.1:3306 for the Java client's failover test";
            Node.recordSkip(reason, "FailoverTest.a_node_killed_with_minus_9_mid_run_repeats_no_id");
            Assumptions.abort(reason);
        }
        // Snowflake off: the test needs segment ids only, and touches no other table.
        Map<String, String> env = Map.of("IDMINT_SNOWFLAKE_ENABLED", "false");
        String tag = Node.RUN + "-failover";
        ExecutorService pool = Executors.newFixedThreadPool(THREADS);
        try (Node a = Node.on(store, env); Node b = Node.on(store, env)) {
            a.createTag(tag, "");
            // b holds the tag's first segment, below the ranges the client then leases from a:
            // after the kill the client skips b's older ids, so each thread's ids still increase.
            b.segmentIds(tag, 1);
            IdmintClient client = IdmintClient.builder().endpoints(a.url(), b.url())
                    .timeout(Duration.ofMillis(500)).leaseDuration(Duration.ofSeconds(1)).build();
            AtomicBoolean stop = new AtomicBoolean();
            AtomicLong taken = new AtomicLong();
            List<Future<long[]>> futures = new ArrayList<>();
            for (int t = 0; t < THREADS; t++) {
                futures.add(pool.submit(() -> {
                    long[] ids = new long[1 << 16];
                    int n = 0;
                    long last = 0;
                    while (!stop.get()) {
                        long id = client.nextId(tag);
                        if (id <= last) {
                            throw new AssertionError(id + " after " + last);
                        }
                        last = id;
                        if (n == ids.length) {
                            ids = Arrays.copyOf(ids, n * 2);
                        }
                        ids[n++] = id;
                        taken.incrementAndGet();
                        if (n % PACE_IDS == 0) {
                            Thread.sleep(1); // paced: every id is kept, and a free run fills the heap
                        }
                    }
                    return Arrays.copyOf(ids, n);
                }));
            }
            waitFor(taken, 300_000, futures);
            a.kill9();
            long failedBefore = client.failedAttemptsForTests();
            // The ranges the client holds (up to a lease of 10^6 each) are spent first; then a
            // lease call meets the dead node, and the takes go on from b.
            waitUntil(() -> client.failedAttemptsForTests() > failedBefore, "no call met the killed node",
                    taken, futures);
            waitFor(taken, Math.max(taken.get() + 200_000, 1_100_000), futures);
            stop.set(true);
            long[] all = new long[0];
            for (Future<long[]> future : futures) {
                long[] ids = future.get(30, TimeUnit.SECONDS);
                int at = all.length;
                all = Arrays.copyOf(all, at + ids.length);
                System.arraycopy(ids, 0, all, at, ids.length);
            }
            client.close();
            Arrays.sort(all);
            assertTrue(all.length >= 1_000_000, all.length + " ids");
            for (int i = 1; i < all.length; i++) {
                assertTrue(all[i] != all[i - 1], "id " + all[i] + " handed out twice");
            }
            b.deleteTag(tag);
        } finally {
            pool.shutdownNow();
        }
    }

    /** Waits until {@code count} ids were taken; a taker that failed fails the test with its error at once. */
    private static void waitFor(AtomicLong taken, long count, List<Future<long[]>> takers) throws Exception {
        waitUntil(() -> taken.get() >= count, "only " + taken.get() + " of " + count + " ids", taken, takers);
    }

    /** Waits (60 s at most) until {@code done}; a taker that failed fails the test with its error at once. */
    private static void waitUntil(java.util.function.BooleanSupplier done, String otherwise, AtomicLong taken,
            List<Future<long[]>> takers) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!done.getAsBoolean()) {
            for (Future<long[]> taker : takers) {
                if (taker.isDone()) {
                    taker.get();
                }
            }
            assertTrue(System.nanoTime() < deadline, otherwise + " within 60 s (" + taken.get() + " ids taken)");
            Thread.sleep(1);
        }
    }
}
