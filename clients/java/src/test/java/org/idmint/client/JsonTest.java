// JsonTest: the client's JSON reader accepts the answers' JSON and refuses what is not JSON or
// is ambiguous (duplicate keys, trailing text, raw control characters, integers past a long,
// nesting past the bound).
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class JsonTest {
    private static Object parse(String text) throws Json.Malformed {
        return Json.parse(text.getBytes(StandardCharsets.UTF_8));
    }

    @Test
    void reads_the_answers_shapes() throws Exception {
        Object value = parse(" {\"tag\":\"a\\u00e9\\\"\",\"ranges\":[{\"start\":1,\"end\":9223372036854775807,"
                + "\"proof\":\"00ff\"}],\"x\":[true,false,null,-0.5e3]} ");
        Map<?, ?> map = (Map<?, ?>) value;
        assertEquals("aé\"", map.get("tag"));
        Map<?, ?> range = (Map<?, ?>) ((List<?>) map.get("ranges")).get(0);
        assertEquals(Long.MAX_VALUE, range.get("end"));
        assertEquals(List.of(true, false, Json.NULL, -500.0), map.get("x"));
    }

    @Test
    void refuses_what_is_not_strict_json() {
        for (String bad : new String[] {"", "{", "{\"a\":1,\"a\":2}", "{} x", "[1,]", "{\"a\":01}", "\"\u0001\"",
                "9223372036854775808", "[1 2]", "{'a':1}", "\"\\x\"", "tru", "[" .repeat(40) + "]".repeat(40)}) {
            assertThrows(Json.Malformed.class, () -> parse(bad), bad);
        }
        assertThrows(Json.Malformed.class, () -> Json.parse(new byte[] {'"', (byte) 0xff, '"'}));
    }

    @Test
    void answers_of_the_wrong_shape_fail_the_attempt() {
        byte[] twoForOne = "{\"ranges\":[{\"start\":1,\"end\":3,\"proof\":\"0123456789abcdef\"}]}"
                .getBytes(StandardCharsets.UTF_8);
        assertThrows(Wire.BadAnswer.class, () -> Wire.leases(twoForOne, 1, 0));
        byte[] unordered = ("{\"ranges\":[{\"start\":5,\"end\":6,\"proof\":\"0123456789abcdef\"},"
                + "{\"start\":1,\"end\":2,\"proof\":\"0123456789abcdef\"}]}").getBytes(StandardCharsets.UTF_8);
        assertThrows(Wire.BadAnswer.class, () -> Wire.leases(unordered, 10, 0));
        byte[] shortProof = "{\"ranges\":[{\"start\":1,\"end\":2,\"proof\":\"12\"}]}".getBytes(StandardCharsets.UTF_8);
        assertThrows(Wire.BadAnswer.class, () -> Wire.leases(shortProof, 10, 0));
        assertThrows(Wire.BadAnswer.class, () -> Wire.ids("{\"ids\":[1,2]}".getBytes(StandardCharsets.UTF_8), 3));
        assertThrows(Wire.BadAnswer.class, () -> Wire.ids("{\"ids\":[0]}".getBytes(StandardCharsets.UTF_8), 1));
    }
}
