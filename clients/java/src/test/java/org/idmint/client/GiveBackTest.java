// GiveBackTest: close() gives back the ids it leased and did not hand out (with the leases'
// proofs), so after the node stops (SIGTERM) and starts again, the next id it serves is the
// first one the client did not hand out.
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

class GiveBackTest {
    @Test
    void after_close_and_a_restart_the_next_id_is_the_first_not_handed_out() {
        try (Node node = Node.sqlite()) {
            String tag = Node.RUN + "-giveback";
            // A node segment larger than what the client leases: the leases lie in the node's
            // current segment, the part a node can take back.
            node.createTag(tag, "\"step\": 100000");
            IdmintClient client = IdmintClient.builder().endpoints(node.url()).build();
            long last = 0;
            for (int i = 0; i < 12_345; i++) {
                last = client.nextId(tag);
            }
            client.close();
            assertTrue(client.returnedIds.get() > 0, "nothing was given back");
            assertThrows(ClientClosedException.class, () -> client.nextId(tag));
            assertTrue(client.tryNextId(tag).isEmpty());

            Node restarted = node.restart();
            assertEquals(last + 1, restarted.segmentIds(tag, 1)[0], "the first id the client did not hand out");
        }
    }
}
