// StrictOwnerTest: the client asks a strict tag's owner directly. Two nodes on the shared
// MariaDB, the owner found from the nodes' own answers (idmint-node, idmint-owner); the client
// is given the other node first. After a few takes that learn the names, every take goes to
// the owner: the other node's request count (its own /metrics) does not move while the
// owner's grows by every take, and the ids increase. Then the owner is killed with -9 mid-run:
// the takes go on through the other node, no id twice. Skipped (and recorded) without a MariaDB.
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

class StrictOwnerTest {
    /** The route label of the client's strict takes in the servers' metrics. */
    private static final String ROUTE = "/v1/segment/{tag}";
    private static final Map<String, String> ENV = Map.of("IDMINT_SNOWFLAKE_ENABLED", "false");
    private static final int WARM_UP = 5;
    private static final int TAKES = 200;

    @Test
    void after_a_few_takes_every_strict_take_goes_to_the_owner() throws Exception {
        String store = mariadb("after_a_few_takes_every_strict_take_goes_to_the_owner");
        String tag = Node.RUN + "-owner";
        try (Node a = Node.on(store, ENV); Node b = Node.on(store, ENV)) {
            a.createTag(tag, "\"strict\": true");
            Node[] owned = ownerFirst(a, b, tag);
            Node owner = owned[0];
            Node other = owned[1];
            try (IdmintClient client = IdmintClient.builder().endpoints(other.url(), owner.url()).build()) {
                long last = 0;
                for (int i = 0; i < WARM_UP; i++) {
                    last = increasing(client.nextId(tag), last);
                }
                long otherBefore = other.requests(ROUTE);
                long ownerBefore = owner.requests(ROUTE);
                for (int i = 0; i < TAKES; i++) {
                    last = increasing(client.nextId(tag), last);
                }
                assertEquals(otherBefore, other.requests(ROUTE), "takes went to the node that is not the owner");
                assertTrue(owner.requests(ROUTE) >= ownerBefore + TAKES,
                        "the owner answered " + (owner.requests(ROUTE) - ownerBefore) + " of " + TAKES + " takes");
            }
            b.deleteTag(tag);
        }
    }

    @Test
    void the_owner_killed_with_minus_9_mid_run_the_takes_go_on_elsewhere() throws Exception {
        String store = mariadb("the_owner_killed_with_minus_9_mid_run_the_takes_go_on_elsewhere");
        String tag = Node.RUN + "-owner-killed";
        ExecutorService pool = Executors.newFixedThreadPool(2);
        try (Node a = Node.on(store, ENV); Node b = Node.on(store, ENV)) {
            a.createTag(tag, "\"strict\": true");
            Node[] owned = ownerFirst(a, b, tag);
            Node owner = owned[0];
            Node other = owned[1];
            // The new owner takes over one lease TTL and margin after the kill (about 4 s): a
            // take waits for it at the other node, within the client's timeout.
            IdmintClient client = IdmintClient.builder().endpoints(other.url(), owner.url())
                    .timeout(Duration.ofSeconds(5)).build();
            AtomicLong taken = new AtomicLong();
            AtomicLong stopAt = new AtomicLong(Long.MAX_VALUE);
            List<Future<long[]>> takers = new ArrayList<>();
            for (int t = 0; t < 2; t++) {
                takers.add(pool.submit(() -> {
                    long[] ids = new long[1024];
                    int n = 0;
                    long last = 0;
                    while (taken.get() < stopAt.get()) {
                        last = increasing(client.nextId(tag), last);
                        ids = n == ids.length ? Arrays.copyOf(ids, n * 2) : ids;
                        ids[n++] = last;
                        taken.incrementAndGet();
                    }
                    return Arrays.copyOf(ids, n);
                }));
            }
            waitFor(taken, 200, takers);
            long ownerTakes = owner.requests(ROUTE);
            assertTrue(ownerTakes >= 150, "only " + ownerTakes + " takes asked of the owner before the kill");
            long failedBefore = client.failedAttemptsForTests();
            owner.kill9();
            stopAt.set(taken.get() + 300);
            long[] all = new long[0];
            for (Future<long[]> taker : takers) {
                long[] ids = taker.get(60, TimeUnit.SECONDS);
                int at = all.length;
                all = Arrays.copyOf(all, at + ids.length);
                System.arraycopy(ids, 0, all, at, ids.length);
            }
            assertTrue(client.failedAttemptsForTests() > failedBefore, "no take met the killed owner");
            client.close();
            Arrays.sort(all);
            assertTrue(all.length >= 500, all.length + " ids");
            for (int i = 1; i < all.length; i++) {
                assertTrue(all[i] != all[i - 1], "id " + all[i] + " handed out twice");
            }
            other.deleteTag(tag);
        } finally {
            pool.shutdownNow();
        }
    }

    /** The store, or the test is skipped (and the skip recorded). */
    private static String mariadb(String test) {
        String store = Node.mysqlUrl();
        if (!Node.reachable(store)) {
            String reason = "no MariaDB at IDMINT_TEST_MYSQL_URL or 127.0.0.1:3306 for the Java client's strict owner test";
            Node.recordSkip(reason, "StrictOwnerTest." + test);
            Assumptions.abort(reason);
        }
        return store;
    }

    /**
     * The tag's owner and the other node, as the nodes name them: each answer of a strict take
     * names the node that answered and the owner; both nodes must name one owner, itself or the other.
     */
    private static Node[] ownerFirst(Node a, Node b, String tag) {
        String[] fromA = named(a, tag);
        String[] fromB = named(b, tag);
        assertEquals(fromA[1], fromB[1], "the nodes name different owners");
        if (fromA[1].equals(fromA[0])) {
            return new Node[] {a, b};
        }
        assertEquals(fromB[0], fromB[1], "the owner named is neither node");
        return new Node[] {b, a};
    }

    /** {idmint-node, idmint-owner} of a strict take asked of {@code node} directly. */
    private static String[] named(Node node, String tag) {
        HttpResponse<String> answer = node.get("/v1/segment/" + Wire.segment(tag) + "?count=1");
        assertEquals(200, answer.statusCode(), answer.body());
        String self = answer.headers().firstValue(Wire.NODE_HEADER).orElse(null);
        String owner = answer.headers().firstValue(Wire.OWNER_HEADER).orElse(null);
        assertNotNull(self, "a strict take's answer names no node");
        assertNotNull(owner, "a strict take's answer names no owner");
        return new String[] {self, owner};
    }

    private static long increasing(long id, long last) {
        assertTrue(id > last, "id " + id + " after " + last);
        return id;
    }

    /** Waits until {@code count} ids were taken; a taker that failed fails the test with its error. */
    private static void waitFor(AtomicLong taken, long count, List<Future<long[]>> takers) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (taken.get() < count) {
            for (Future<long[]> taker : takers) {
                if (taker.isDone()) {
                    taker.get();
                }
            }
            assertTrue(System.nanoTime() < deadline, "only " + taken.get() + " ids within 60 s");
            Thread.sleep(1);
        }
    }
}
