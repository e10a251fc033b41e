// Node: an `idmint serve` process for the tests, the binary IDMINT_BIN names (else the
// workspace's target/debug/idmint), on a free loopback port, its data in a temporary
// directory; started, stopped with SIGTERM, killed with -9, restarted on the same store.
// Also the few HTTP calls the tests make beside the client (admin token included).
package org.idmint.client;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;

/** One idmint server process. */
final class Node implements AutoCloseable {
    /** Every node's admin token: nodes of one cluster share it (they present it to each other). */
    static final String ADMIN_TOKEN = "admin-token-java-client-tests-0123456789";
    /** A name part unique to this test run, so tags on the shared MariaDB never meet another run's. */
    static final String RUN = "java-" + UUID.randomUUID().toString().substring(0, 8);
    private static final Pattern LISTENING = Pattern.compile("listening on (http://[0-9.:]+)");
    private static final HttpClient HTTP = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(Duration.ofSeconds(5)).build();

    final String store;
    final Path dir;
    private final Map<String, String> env;
    private Process process;
    private String url;
    private int starts;

    private Node(String store, Path dir, Map<String, String> env) {
        this.store = store;
        this.dir = dir;
        this.env = env;
    }

    /** A node on its own SQLite store in a fresh temporary directory. */
    static Node sqlite() {
        Path dir = tempDir();
        return start(new Node("sqlite://" + dir.resolve("idmint.db"), dir, Map.of()));
    }

    /** A node on {@code store} (shared with other nodes), its own data directory. */
    static Node on(String store, Map<String, String> env) {
        return start(new Node(store, tempDir(), env));
    }

    /** The MariaDB the failover test uses: IDMINT_TEST_MYSQL_URL, else the local one. */
    static String mysqlUrl() {
        String url = System.getenv("IDMINT_TEST_MYSQL_URL");
        return url != null && !url.isEmpty() ? url : "mysql://root@127.0.0.1:3306/test";
    }

    /** Whether something listens at the URL's host and port. */
    static boolean reachable(String storeUrl) {
        URI uri = URI.create(storeUrl);
        try (Socket socket = new Socket()) {
            socket.connect(new InetSocketAddress(uri.getHost(), uri.getPort() < 0 ? 3306 : uri.getPort()), 2_000);
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** The binary under test. */
    static Path binary() {
        String named = System.getenv("IDMINT_BIN");
        if (named != null && !named.isEmpty()) {
            return Path.of(named).toAbsolutePath();
        }
        Path dir = Path.of("").toAbsolutePath();
        while (dir != null && !Files.exists(dir.resolve("Cargo.toml"))) {
            dir = dir.getParent();
        }
        if (dir == null) {
            throw new IllegalStateException("no IDMINT_BIN and no workspace above " + Path.of("").toAbsolutePath());
        }
        return dir.resolve("target/debug/idmint");
    }

    /** The node's base URL, {@code http://127.0.0.1:PORT}. */
    String url() {
        return url;
    }

    /** Stops the node with SIGTERM (it gives its unissued ids back to the store) and waits. */
    void stop() {
        if (process != null && process.isAlive()) {
            process.destroy();
            try {
                if (!process.waitFor(30, TimeUnit.SECONDS)) {
                    process.destroyForcibly().waitFor();
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** Kills the node with SIGKILL (kill -9): nothing given back, nothing flushed. */
    void kill9() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor();
    }

    /** Starts the node again on the same store and data directory (a new port). */
    Node restart() {
        stop();
        return start(this);
    }

    @Override
    public void close() {
        stop();
        deleteTree(dir);
    }

    /** Creates a tag through the admin API; {@code extra} is more JSON members, e.g. {@code "strict": true}. */
    void createTag(String tag, String extra) {
        String body = "{\"tag\":\"" + tag + "\"" + (extra.isEmpty() ? "" : "," + extra) + "}";
        HttpResponse<String> answer = send("POST", "/v1/tags", body);
        if (answer.statusCode() != 201) {
            throw new IllegalStateException("creating tag " + tag + ": " + answer.statusCode() + " " + answer.body());
        }
    }

    /** Deletes a tag through the admin API (best effort: the tests' own tags on a shared store). */
    void deleteTag(String tag) {
        send("DELETE", "/v1/tags/" + Wire.segment(tag), null);
    }

    /** GET {@code path}; the answer's status and body. */
    HttpResponse<String> get(String path) {
        return send("GET", path, null);
    }

    /** The ids of {@code GET /v1/segment/{tag}?count=N}, asked of this node directly. */
    long[] segmentIds(String tag, int count) {
        HttpResponse<String> answer = get("/v1/segment/" + Wire.segment(tag) + "?count=" + count);
        if (answer.statusCode() != 200) {
            throw new IllegalStateException(answer.statusCode() + " " + answer.body());
        }
        try {
            return Wire.ids(answer.body().getBytes(StandardCharsets.UTF_8), count);
        } catch (Wire.BadAnswer e) {
            throw new IllegalStateException(e);
        }
    }

    /**
     * The HTTP requests this node counted on {@code route} (a route template), any method and
     * status, from its own {@code /metrics}: {@code idmint_http_requests_total{route="..."}}.
     */
    long requests(String route) {
        HttpResponse<String> answer = get("/metrics");
        if (answer.statusCode() != 200) {
            throw new IllegalStateException("/metrics: " + answer.statusCode() + " " + answer.body());
        }
        String label = "route=\"" + route + "\"";
        long total = 0;
        for (String line : answer.body().split("\n")) {
            if (line.startsWith("idmint_http_requests_total{") && line.contains(label)) {
                total += (long) Double.parseDouble(line.substring(line.lastIndexOf(' ') + 1));
            }
        }
        return total;
    }

    private HttpResponse<String> send(String method, String path, String body) {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(url + path))
                .timeout(Duration.ofSeconds(20))
                .header("authorization", "Bearer " + ADMIN_TOKEN)
                .method(method, body == null ? HttpRequest.BodyPublishers.noBody()
                        : HttpRequest.BodyPublishers.ofString(body));
        if (body != null) {
            request.header("content-type", "application/json");
        }
        try {
            return HTTP.send(request.build(), HttpResponse.BodyHandlers.ofString());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    private static Node start(Node node) {
        node.starts++;
        Path out = node.dir.resolve("stdout-" + node.starts + ".log");
        Path err = node.dir.resolve("stderr-" + node.starts + ".log");
        List<String> command = new ArrayList<>(List.of(binary().toString(), "serve", "--listen", "127.0.0.1:0",
                "--store", node.store, "--data-dir", node.dir.resolve("data").toString()));
        ProcessBuilder builder = new ProcessBuilder(command).directory(node.dir.toFile())
                .redirectOutput(out.toFile()).redirectError(err.toFile());
        builder.environment().put("IDMINT_ADMIN_TOKEN", ADMIN_TOKEN);
        builder.environment().putAll(node.env);
        try {
            node.process = builder.start();
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (System.nanoTime() < deadline) {
                Matcher found = LISTENING.matcher(Files.readString(out));
                if (found.find()) {
                    node.url = found.group(1);
                    return node;
                }
                if (!node.process.isAlive()) {
                    break;
                }
                Thread.sleep(50);
            }
            node.process.destroyForcibly();
            throw new IllegalStateException("idmint did not start (" + command + "): " + Files.readString(err));
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException(e);
        }
    }

    static Path tempDir() {
        try {
            return Files.createTempDirectory("idmint-java-");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void deleteTree(Path dir) {
        try (Stream<Path> paths = Files.walk(dir)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // A temporary directory left behind is harmless.
        }
    }

    /** Records a skipped test where scripts/test's summary reads it (IDMINT_TEST_SKIP_DIR), and says so. */
    static void recordSkip(String reason, String test) {
        System.err.println("skipped: " + reason);
        String dir = System.getenv("IDMINT_TEST_SKIP_DIR");
        if (dir == null || dir.isEmpty()) {
            return;
        }
        Path file = Path.of(dir, "idmint-client-java-" + ProcessHandle.current().pid() + ".tsv");
        try {
            Files.createDirectories(file.getParent());
            Files.writeString(file, reason + "\tclients/java: " + test + "\n", StandardOpenOption.CREATE,
                    StandardOpenOption.APPEND);
        } catch (IOException e) {
            System.err.println("(the skip is not recorded in " + file + ": " + e + ")");
        }
    }
}
