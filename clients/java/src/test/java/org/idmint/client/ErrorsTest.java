// ErrorsTest: failures are typed exceptions, never a sentinel id: an unknown tag (asked again
// on the next call, so a tag created meanwhile works), an exhausted tag (final: the servers are
// not asked again), no server answering (the servers' own reason kept), bad arguments, a
// closed client.
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

class ErrorsTest {
    /** The largest start a tag takes: one full step below 2^63-1. */
    private static final long START_MAX = Long.MAX_VALUE - 1_000_000;

    @Test
    void an_unknown_tag_raises_its_typed_error_and_is_asked_again() {
        Node node = SharedNode.get();
        String tag = Node.RUN + "-created-later";
        try (IdmintClient client = IdmintClient.builder().endpoints(node.url()).build()) {
            UnknownTagException unknown = assertThrows(UnknownTagException.class, () -> client.nextId(tag));
            assertEquals(tag, unknown.tag());
            assertEquals("unknown_tag", unknown.code());
            assertThrows(UnknownTagException.class, () -> client.nextIds(tag, 10));
            assertThrows(UnknownTagException.class, () -> client.tag(tag).nextId());
            node.createTag(tag, "");
            // The node may answer from its memory of unknown names for up to 1 s
            // (UNKNOWN_TAG_TTL_MS); the client asks again on every call.
            long deadline = System.nanoTime() + 3_000_000_000L;
            Long first = null;
            while (first == null) {
                try {
                    first = client.nextId(tag);
                } catch (UnknownTagException e) {
                    assertTrue(System.nanoTime() < deadline, "the created tag is still unknown after 3 s");
                }
            }
            assertEquals(1, first, "the next calls ask again and find the tag");
        }
    }

    @Test
    void an_exhausted_tag_raises_its_typed_error_for_good() {
        Node node = SharedNode.get();
        String tag = Node.RUN + "-exhausted";
        node.createTag(tag, "\"start\": " + START_MAX + ", \"step\": 1000000");
        try (IdmintClient client = IdmintClient.builder().endpoints(node.url()).build()) {
            long last = START_MAX - 1;
            long taken = 0;
            ExhaustedTagException exhausted = null;
            while (exhausted == null) {
                try {
                    long id = client.nextId(tag);
                    assertTrue(id > last && id < Long.MAX_VALUE, id + " after " + last);
                    last = id;
                    taken++;
                    assertTrue(taken <= 1_000_000, "more ids than the tag holds");
                } catch (ExhaustedTagException e) {
                    exhausted = e;
                }
            }
            assertEquals(tag, exhausted.tag());
            assertTrue(exhausted.isFinal());
            assertTrue(taken > 0, "no id before the end");
            assertThrows(ExhaustedTagException.class, () -> client.nextId(tag));
            assertThrows(ExhaustedTagException.class, () -> client.nextIds(tag, 3));
            assertTrue(client.tryNextId(tag).isEmpty());
        }
    }

    @Test
    void no_server_answering_raises_unavailable_with_each_servers_reason() throws Exception {
        HttpServer busy = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        AtomicInteger asked = new AtomicInteger();
        busy.createContext("/", exchange -> {
            asked.incrementAndGet();
            byte[] body = "{\"error\":{\"code\":\"unavailable\",\"message\":\"the store did not answer in time\"}}"
                    .getBytes(StandardCharsets.UTF_8);
            exchange.getResponseHeaders().add("content-type", "application/json");
            exchange.sendResponseHeaders(503, body.length);
            exchange.getResponseBody().write(body);
            exchange.close();
        });
        busy.start();
        int closedPort;
        try (ServerSocket socket = new ServerSocket(0)) {
            closedPort = socket.getLocalPort();
        }
        String busyUrl = "http://127.0.0.1:" + busy.getAddress().getPort();
        try (IdmintClient client = IdmintClient.builder().endpoints(busyUrl, "http://127.0.0.1:" + closedPort).build()) {
            UnavailableException e = assertThrows(UnavailableException.class, () -> client.nextId("order"));
            assertTrue(e.reason().contains("the store did not answer in time"), e.reason());
            assertTrue(e.reason().contains("127.0.0.1:" + closedPort), e.reason());
            assertFalse(e.isFinal());
            assertTrue(asked.get() >= 1);
            assertThrows(UnavailableException.class, () -> client.nextSnowflakeId());
        } finally {
            busy.stop(0);
        }
    }

    @Test
    void bad_arguments_and_a_closed_client_raise_their_typed_errors() {
        Node node = SharedNode.get();
        IdmintClient client = IdmintClient.builder().endpoints(node.url()).build();
        assertEquals("bad_count", assertThrows(InvalidArgumentException.class, () -> client.nextIds("x", 0)).code());
        assertEquals("bad_tag", assertThrows(InvalidArgumentException.class, () -> client.nextId("")).code());
        assertEquals("bad_tag", assertThrows(InvalidArgumentException.class, () -> client.nextId("a\nb")).code());
        assertThrows(InvalidArgumentException.class, () -> IdmintClient.builder().build());
        assertThrows(InvalidArgumentException.class, () -> IdmintClient.builder().endpoints("https://x:1").build());
        client.close();
        assertThrows(ClientClosedException.class, () -> client.nextId("x"));
        assertThrows(ClientClosedException.class, () -> client.nextSnowflakeId());
        assertTrue(client.tryNextId("x").isEmpty());
    }
}
