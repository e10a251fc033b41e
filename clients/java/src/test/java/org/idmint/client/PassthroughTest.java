// PassthroughTest: snowflake ids, UUID v7s and ULIDs are asked of the servers per call and
// answered as the server made them, checked (count, shape, order within the server).
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.UUID;
import org.junit.jupiter.api.Test;

class PassthroughTest {
    @Test
    void snowflake_ids_uuid_v7s_and_ulids_come_from_the_server() throws Exception {
        Node node = SharedNode.get();
        try (IdmintClient client = IdmintClient.builder().endpoints(node.url()).build()) {
            long[] snowflakes = null;
            // A node that just leased its worker id serves snowflake ids after a short delay.
            for (int i = 0; i < 100 && snowflakes == null; i++) {
                try {
                    snowflakes = client.nextSnowflakeIds(5);
                } catch (UnavailableException e) {
                    Thread.sleep(100);
                }
            }
            assertTrue(snowflakes != null, "no snowflake ids within 10 s");
            for (int i = 1; i < snowflakes.length; i++) {
                assertTrue(snowflakes[i] > snowflakes[i - 1]);
            }
            assertTrue(client.nextSnowflakeId() > snowflakes[4]);

            List<UUID> uuids = client.nextUuidV7s(3);
            assertEquals(3, uuids.size());
            for (UUID uuid : uuids) {
                assertEquals(7, uuid.version());
                assertEquals(2, uuid.variant());
            }
            assertTrue(uuids.get(0).compareTo(uuids.get(1)) < 0 && uuids.get(1).compareTo(uuids.get(2)) < 0);
            assertEquals(7, client.nextUuidV7().version());

            List<String> ulids = client.nextUlids(3);
            assertTrue(ulids.get(0).compareTo(ulids.get(1)) < 0 && ulids.get(1).compareTo(ulids.get(2)) < 0);
            assertEquals(26, client.nextUlid().length());
        }
    }
}
