// ReadmeTest: the README's examples cannot drift from the client. The first ```java block (the
// lines a service needs) is run here as written: its statements, with the example servers
// replaced by `serverA` and `serverB`, must be exactly the statements between the markers in
// this file's own source, which then run against two nodes on one store (the example's tag
// made first). The Spring block cannot run without Spring: every client method it calls,
// and its destroyMethod, must be public API of that name and shape.
package org.idmint.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;

class ReadmeTest {
    private static final Path README = Path.of("README.md");
    private static final Path SOURCE = Path.of("src/test/java/org/idmint/client/ReadmeTest.java");
    private static final String[][] EXAMPLE_SERVERS = {
        {"\"http://10.0.0.1:8080\"", "serverA"}, {"\"http://10.0.0.2:8080\"", "serverB"}};
    private static final Pattern MARKED = Pattern.compile("(?ms)^\\s*// README: begin$(.*?)^\\s*// README: end$");
    private static final Pattern JAVA_BLOCK = Pattern.compile("(?ms)^```java\\n(.*?)^```$");

    @Test
    void the_first_java_block_is_what_this_test_runs() throws Exception {
        String first = javaBlocks().get(0);
        for (String[] server : EXAMPLE_SERVERS) {
            assertTrue(first.contains(server[0]), "the example names " + server[0]);
            first = first.replace(server[0], server[1]);
        }
        List<String> readme = new ArrayList<>();
        for (String line : statements(first)) {
            if (line.startsWith("import ")) {
                // An import names a public class of the client.
                String name = line.substring("import ".length(), line.length() - 1);
                assertTrue(Modifier.isPublic(Class.forName(name).getModifiers()), line);
            } else {
                readme.add(line);
            }
        }
        assertEquals(readme, statements(marked(Files.readString(SOURCE, StandardCharsets.UTF_8))),
                "README.md's first ```java block (example servers as serverA, serverB) against the lines this test runs");

        String store = "sqlite://" + Node.tempDir().resolve("shared.db");
        try (Node a = Node.on(store, Map.of()); Node b = Node.on(store, Map.of())) {
            a.createTag("order", "");
            String serverA = a.url();
            String serverB = b.url();
            // README: begin
            IdmintClient ids = IdmintClient.builder().endpoints(serverA, serverB).build();
            long orderId = ids.nextId("order");   // from a local range: no call per id
            ids.close();                          // at shutdown: unused ids go back to the servers
            // README: end
            assertTrue(orderId >= 1, "an id of the tag: " + orderId);
            assertEquals(List.of(serverA, serverB), ids.endpoints());
            assertThrows(ClientClosedException.class, () -> ids.nextId("order"), "closed by the example");
        }
    }

    @Test
    void the_spring_block_calls_only_public_api() throws Exception {
        String spring = javaBlocks().get(1);
        Set<String> called = new TreeSet<>();
        Matcher call = Pattern.compile("\\.(\\w+)\\(").matcher(spring);
        while (call.find()) {
            called.add(call.group(1));
        }
        // Each call the block makes, checked below; a call added to the README fails here until it is.
        assertEquals(Set.of("build", "builder", "endpoints", "nextId"), called, "the client calls of the Spring block");
        assertTrue(spring.contains("IdmintClient.builder().endpoints(servers).build()"), spring);
        assertTrue(spring.contains("String[] servers"), spring);

        Method builder = publicMethod(IdmintClient.class, "builder");
        assertTrue(Modifier.isStatic(builder.getModifiers()), "builder() is static");
        Method endpoints = publicMethod(builder.getReturnType(), "endpoints", String[].class);
        assertTrue(endpoints.isVarArgs(), "endpoints(String...) takes a String[] too");
        assertEquals(builder.getReturnType(), endpoints.getReturnType());
        assertEquals(IdmintClient.class, publicMethod(builder.getReturnType(), "build").getReturnType());
        assertEquals(long.class, publicMethod(IdmintClient.class, "nextId", String.class).getReturnType());

        Matcher destroy = Pattern.compile("destroyMethod = \"(\\w+)\"").matcher(spring);
        assertTrue(destroy.find(), "the @Bean names its destroyMethod");
        assertEquals("close", destroy.group(1));
        publicMethod(IdmintClient.class, destroy.group(1));
    }

    /** The README's ```java blocks, in order. */
    private static List<String> javaBlocks() throws IOException {
        List<String> blocks = new ArrayList<>();
        Matcher block = JAVA_BLOCK.matcher(Files.readString(README, StandardCharsets.UTF_8));
        while (block.find()) {
            blocks.add(block.group(1));
        }
        assertTrue(blocks.size() >= 2, "README.md has the five lines' block and the Spring block");
        return blocks;
    }

    /** The lines of {@code code} holding a statement: trailing comments and blank lines dropped, trimmed. */
    private static List<String> statements(String code) {
        List<String> out = new ArrayList<>();
        for (String line : code.split("\n")) {
            int comment = line.indexOf("//");
            String statement = (comment < 0 ? line : line.substring(0, comment)).trim();
            if (!statement.isEmpty()) {
                out.add(statement);
            }
        }
        return out;
    }

    /** The lines of {@code source} between the begin and end marker comments, each alone on its line. */
    private static String marked(String source) {
        Matcher region = MARKED.matcher(source);
        assertTrue(region.find(), "this test's README markers");
        return region.group(1);
    }

    private static Method publicMethod(Class<?> type, String name, Class<?>... parameters) throws NoSuchMethodException {
        Method method = type.getMethod(name, parameters);
        assertTrue(Modifier.isPublic(method.getModifiers()) && Modifier.isPublic(type.getModifiers()),
                type.getSimpleName() + "." + name + " is public");
        return method;
    }
}
