// TagBufferModelTest: the buffer's lock-free chain against a model, with no server. Seeded
// runs race taking threads, an installing thread and the close's freeze(); every id of every
// lease offered must end in exactly one place: handed out by a take, given back by the
// freeze, or refused by install (the client queues those and gives them back whole). An id in
// two places would be served twice or served and given back; an id in none would be lost to a
// range linked after the freeze. A second test repeats the narrowest races (one take, one
// install, one freeze) twenty thousand times with the freeze's start swept across them; a third
// checks that a buffer the client drops is frozen like one it closes.
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.BitSet;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

class TagBufferModelTest {
    /** Seeds run; each is a different interleaving of lease sizes, thread counts and the freeze's moment. */
    static final int SEEDS = 200;

    @Test
    void every_id_is_handed_out_given_back_or_refused_exactly_once() throws Exception {
        Endpoints endpoints = new Endpoints(List.of("http://127.0.0.1:9"), 100, null);
        IdmintClient.Core core = new IdmintClient.Core(endpoints, 1, 1);
        core.closed = true; // no fetch ever starts: the test is the only source of leases
        try {
            for (int seed = 0; seed < SEEDS; seed++) {
                run(seed, core);
            }
        } finally {
            endpoints.close();
        }
    }

    /**
     * The narrowest races, many times over: one install and one take against the freeze, all
     * started together. The lease is either given back by the freeze or refused, never
     * installed and lost; the id taken is not given back, and no other id is lost.
     */
    @Test
    void an_install_and_a_take_racing_the_freeze() throws Exception {
        Endpoints endpoints = new Endpoints(List.of("http://127.0.0.1:9"), 100, null);
        IdmintClient.Core core = new IdmintClient.Core(endpoints, 1, 1);
        core.closed = true;
        int rounds = 20_000;
        TagBuffer[] buffers = new TagBuffer[rounds];
        boolean[] installed = new boolean[rounds];
        long[] taken = new long[rounds];
        List<List<TagBuffer.Piece>> pieces = new ArrayList<>();
        for (int r = 0; r < rounds; r++) {
            buffers[r] = new TagBuffer(null, "race", core);
            for (int k = 0; k < r % 4; k++) {
                buffers[r].install(new Wire.Lease(1 + 10 * k, 11 + 10 * k, 0, 0));
            }
            pieces.add(null);
        }
        AtomicInteger round = new AtomicInteger(-1);
        AtomicInteger done = new AtomicInteger();
        // One racer (two spinning threads on a two-core machine): a take then an install on
        // even rounds, the other way round on odd ones.
        Thread racer = new Thread(() -> {
            for (int r = 0; r < rounds; r++) {
                final int at = r;
                spinUntil(() -> round.get() >= at);
                if (r % 2 == 0) {
                    taken[r] = buffers[r].take();
                    installed[r] = buffers[r].install(new Wire.Lease(100, 110, 0, 0));
                } else {
                    installed[r] = buffers[r].install(new Wire.Lease(100, 110, 0, 0));
                    taken[r] = buffers[r].take();
                }
                done.incrementAndGet();
            }
        });
        racer.start();
        try {
            for (int r = 0; r < rounds; r++) {
                final int at = r;
                round.set(r);
                for (int i = r % 97; i > 0; i--) {
                    Thread.onSpinWait(); // sweeps the freeze's start across the racer's steps
                }
                pieces.set(r, buffers[r].freeze());
                spinUntil(() -> done.get() > at);
            }
            racer.join();
        } finally {
            endpoints.close();
        }
        for (int r = 0; r < rounds; r++) {
            boolean givenBack = pieces.get(r).stream().anyMatch(p -> p.from == 100 && p.to == 110);
            assertTrue(installed[r] == givenBack, "round " + r + ": installed " + installed[r] + ", given back " + givenBack);
            BitSet ids = new BitSet();
            if (taken[r] != TagBuffer.NONE) {
                ids.set((int) taken[r]);
            }
            for (TagBuffer.Piece p : pieces.get(r)) {
                if (p.from < 100) {
                    assertTrue(ids.get((int) p.from, (int) p.to).isEmpty(), "round " + r + ": id " + taken[r]
                            + " was taken and given back");
                    ids.set((int) p.from, (int) p.to);
                }
            }
            int preinstalled = 10 * (r % 4);
            assertEquals(preinstalled, ids.cardinality(), "round " + r + ": ids lost");
        }
    }

    /**
     * A buffer the client drops (a tag found strict, or unknown and empty when the client needs
     * room) is frozen: a handle still holding it takes nothing more from it, a lease arriving
     * for it is refused, and after the close the handle answers no id.
     */
    @Test
    void a_dropped_buffer_hands_out_nothing_more() {
        IdmintClient client = IdmintClient.builder().endpoints("http://127.0.0.1:9")
                .timeout(java.time.Duration.ofMillis(50)).build();
        TagIds handle = client.tag("dropped");
        TagBuffer buffer = (TagBuffer) handle;
        assertTrue(buffer.install(new Wire.Lease(1, 11, 0, 0)));
        assertEquals(1, handle.nextId());
        client.drop(buffer);
        assertTrue(handle.tryNextId().isEmpty(), "a dropped buffer handed an id out");
        assertTrue(!buffer.install(new Wire.Lease(11, 21, 0, 0)), "a dropped buffer took a lease");
        client.close();
        assertThrows(ClientClosedException.class, handle::nextId);
        assertTrue(handle.tryNextId().isEmpty());
    }

    private static void run(int seed, IdmintClient.Core core) throws Exception {
        Random rng = new Random(seed);
        TagBuffer buffer = new TagBuffer(null, "model", core);
        List<Wire.Lease> refused = new ArrayList<>();
        long[] next = {1};
        // Some leases before the takes start, more while they run.
        for (int k = rng.nextInt(4); k > 0; k--) {
            assertTrue(buffer.install(lease(next, rng)), "seed " + seed + ": an empty chain refused a lease");
        }
        int takers = 2 + rng.nextInt(2);
        AtomicBoolean frozen = new AtomicBoolean();
        CountDownLatch go = new CountDownLatch(1);
        List<long[][]> handed = new ArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int t = 0; t < takers; t++) {
            long[][] ids = {new long[1024]};
            handed.add(ids);
            threads.add(new Thread(() -> {
                await(go);
                int n = 1;
                // Until the freeze is over and a take found nothing: then nothing can come.
                while (true) {
                    boolean after = frozen.get();
                    long id = buffer.take();
                    if (id == TagBuffer.NONE) {
                        if (after) {
                            break;
                        }
                        Thread.yield();
                        continue;
                    }
                    if (n == ids[0].length) {
                        ids[0] = Arrays.copyOf(ids[0], 2 * n);
                    }
                    ids[0][n++] = id;
                }
                ids[0][0] = n - 1; // the count, in slot 0
            }));
        }
        int before = rng.nextInt(300); // leases offered before the freeze starts
        AtomicInteger offers = new AtomicInteger();
        Random installing = new Random(rng.nextLong()); // the installer's own: the run stays seeded
        // Installs around the freeze, so installs race its walk along the chain. A lease the full
        // chain refused is offered again (the client queues it) until the freeze is over.
        Thread installer = new Thread(() -> {
            await(go);
            for (int k = 0; k < before + 50; k++) {
                Wire.Lease lease = lease(next, installing);
                while (!buffer.install(lease)) {
                    if (frozen.get() && !buffer.install(lease)) {
                        synchronized (refused) {
                            refused.add(lease);
                        }
                        break;
                    }
                    Thread.yield();
                }
                offers.incrementAndGet();
            }
        });
        threads.forEach(Thread::start);
        installer.start();
        go.countDown();
        while (offers.get() < before) {
            Thread.yield();
        }
        List<TagBuffer.Piece> pieces = buffer.freeze();
        frozen.set(true);
        installer.join();
        for (Thread t : threads) {
            t.join();
        }

        long end = next[0];
        BitSet seen = new BitSet();
        for (long[][] holder : handed) {
            long[] ids = holder[0];
            long previous = 0;
            for (int i = 1; i <= ids[0]; i++) {
                long id = ids[i];
                assertTrue(id > previous, "seed " + seed + ": a thread's ids did not increase at " + id);
                previous = id;
                mark(seen, id, "handed out", seed);
            }
        }
        for (TagBuffer.Piece p : pieces) {
            for (long id = p.from; id < p.to; id++) {
                mark(seen, id, "given back", seed);
            }
        }
        for (Wire.Lease l : refused) {
            for (long id = l.start; id < l.end; id++) {
                mark(seen, id, "refused", seed);
            }
        }
        assertEquals(end - 1, seen.cardinality(), "seed " + seed + ": ids lost (neither handed out, given back nor refused): "
                + "first missing " + seen.nextClearBit(1));
        assertEquals(TagBuffer.NONE, buffer.take(), "seed " + seed + ": a frozen buffer handed an id out");
    }

    /**
     * A lease right after the last one offered: mostly 1 to 40 ids (ranges switch often), some
     * of up to 4 000 (takes under way at the freeze).
     */
    private static Wire.Lease lease(long[] next, Random rng) {
        long start;
        long len;
        synchronized (next) {
            start = next[0];
            len = 1 + rng.nextInt(rng.nextInt(8) == 0 ? 4_000 : 40);
            next[0] = start + len;
        }
        return new Wire.Lease(start, start + len, 0, 0);
    }

    private static void mark(BitSet seen, long id, String where, int seed) {
        assertTrue(!seen.get((int) id), "seed " + seed + ": id " + id + " " + where + " was already accounted for");
        seen.set((int) id);
    }

    /** Spins briefly, then yields: the racers stay close without starving a loaded machine. */
    private static void spinUntil(java.util.function.BooleanSupplier condition) {
        for (int i = 0; !condition.getAsBoolean(); i++) {
            if (i < 1_000) {
                Thread.onSpinWait();
            } else {
                Thread.yield();
            }
        }
    }

    private static void await(CountDownLatch latch) {
        try {
            latch.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
