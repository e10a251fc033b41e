// StrictTest: a strict tag's ids increase in real time across the cluster. Two nodes on one
// store; the client (round robin over both) takes on two threads while a third thread asks a
// node directly over HTTP. An id answered before a take began is below that take's id,
// whoever answered either. A client that cached a strict tag's ids would break it.
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.function.LongSupplier;
import org.junit.jupiter.api.Test;

class StrictTest {
    private static final int TAKES = 300;

    @Test
    void a_strict_tags_ids_increase_in_real_time() throws Exception {
        String store = "sqlite://" + Node.tempDir().resolve("shared.db");
        String tag = Node.RUN + "-strict";
        ExecutorService pool = Executors.newFixedThreadPool(3);
        try (Node a = Node.on(store, Map.of()); Node b = Node.on(store, Map.of());
                IdmintClient client = IdmintClient.builder().endpoints(a.url(), b.url()).build()) {
            a.createTag(tag, "\"strict\": true");
            List<Future<List<long[]>>> futures = new ArrayList<>();
            futures.add(pool.submit(() -> takes(() -> client.nextId(tag))));
            futures.add(pool.submit(() -> takes(() -> client.nextIds(tag, 2)[1])));
            futures.add(pool.submit(() -> takes(() -> b.segmentIds(tag, 1)[0])));
            List<long[]> all = new ArrayList<>();
            for (Future<List<long[]>> future : futures) {
                all.addAll(future.get());
            }
            // {began, answered, id}: an id answered before another take began is below its id.
            for (long[] earlier : all) {
                for (long[] later : all) {
                    if (earlier[1] < later[0]) {
                        assertTrue(earlier[2] < later[2], "id " + later[2] + " taken after " + earlier[2]
                                + " was answered");
                    }
                }
            }
            assertTrue(client.tryNextId(tag).isEmpty(), "a strict tag's ids are never local");
        } finally {
            pool.shutdownNow();
        }
    }

    private static List<long[]> takes(LongSupplier take) {
        List<long[]> out = new ArrayList<>();
        for (int i = 0; i < TAKES; i++) {
            long began = System.nanoTime();
            long id = take.getAsLong();
            out.add(new long[] {began, System.nanoTime(), id});
        }
        return out;
    }
}
