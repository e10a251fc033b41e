// UniquenessTest: a million ids of one tag taken by eight threads through every take the
// client offers (by name, a handle, batches, tryNextId) are all different, and each thread's
// ids increase (within each leased range and across them).
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.OptionalLong;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

class UniquenessTest {
    private static final int THREADS = 8;
    private static final int PER_THREAD = 125_000;

    @Test
    void a_million_ids_over_eight_threads_are_unique_and_increase_per_thread() throws Exception {
        Node node = SharedNode.get();
        String tag = Node.RUN + "-unique";
        node.createTag(tag, "");
        ExecutorService pool = Executors.newFixedThreadPool(THREADS);
        try (IdmintClient client = IdmintClient.builder().endpoints(node.url()).build()) {
            TagIds handle = client.tag(tag);
            List<Future<long[]>> futures = new ArrayList<>();
            for (int t = 0; t < THREADS; t++) {
                int kind = t % 4;
                Callable<long[]> taker = () -> {
                    long[] ids = new long[PER_THREAD];
                    int n = 0;
                    while (n < PER_THREAD) {
                        switch (kind) {
                            case 0:
                                ids[n++] = client.nextId(tag);
                                break;
                            case 1:
                                ids[n++] = handle.nextId();
                                break;
                            case 2:
                                long[] batch = client.nextIds(tag, Math.min(777, PER_THREAD - n));
                                System.arraycopy(batch, 0, ids, n, batch.length);
                                n += batch.length;
                                break;
                            default:
                                OptionalLong id = client.tryNextId(tag);
                                ids[n++] = id.isPresent() ? id.getAsLong() : client.nextId(tag);
                        }
                    }
                    return ids;
                };
                futures.add(pool.submit(taker));
            }
            long[] all = new long[THREADS * PER_THREAD];
            for (int t = 0; t < THREADS; t++) {
                long[] ids = futures.get(t).get();
                for (int i = 1; i < ids.length; i++) {
                    assertTrue(ids[i] > ids[i - 1], "thread " + t + ": " + ids[i] + " after " + ids[i - 1]);
                }
                System.arraycopy(ids, 0, all, t * PER_THREAD, PER_THREAD);
            }
            Arrays.sort(all);
            assertTrue(all[0] >= 1, "an id below 1: " + all[0]);
            for (int i = 1; i < all.length; i++) {
                assertTrue(all[i] != all[i - 1], "id " + all[i] + " handed out twice");
            }
            assertEquals(THREADS * PER_THREAD, all.length);
        } finally {
            pool.shutdownNow();
        }
    }

    /**
     * Takes by name that alternate between two tags (a new String each time, equal to the
     * name) each draw from their own tag: the buffer a take by name remembers is used only
     * for that tag. Each tag starts at 1, so a take served from the other tag's buffer would
     * repeat an id or break the order.
     */
    @Test
    void takes_by_name_alternating_between_tags_stay_with_each_tag() {
        Node node = SharedNode.get();
        String a = Node.RUN + "-alt-a";
        String b = Node.RUN + "-alt-b";
        node.createTag(a, "");
        node.createTag(b, "");
        try (IdmintClient client = IdmintClient.builder().endpoints(node.url()).build()) {
            long[] last = {0, 0};
            for (int i = 0; i < 20_000; i++) {
                int which = i % 2;
                long id = client.nextId(new String(which == 0 ? a : b));
                assertEquals(last[which] + 1, id, "tag " + which + " after " + last[which]);
                last[which] = id;
            }
        }
    }
}
