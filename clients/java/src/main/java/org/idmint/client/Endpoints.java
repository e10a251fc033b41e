// Endpoints: the servers a client talks to, their health, and the failover between them.
//
// A call tries the servers round robin, those that answered lately first: one that fails
// (unreachable, timed out, 5xx, shutting down, a malformed answer) is marked down with an
// exponential backoff and tried last until it passes (still tried, so a client whose servers
// all failed recovers at once). Each attempt is bounded by the per-call timeout, each call by
// CALL_ATTEMPTS_MAX attempts and a deadline. An answer that is the caller's or final (unknown
// tag, exhausted tag, bad count, no token) ends the call at once: another server would answer
// the same. A call whose attempt timed out is never answered later: its answer is dropped.
// This file must not know any answer's shape (Wire does).
package org.idmint.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.lang.System.Logger.Level;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpHeaders;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Flow;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/** The servers, their health and the shared HTTP client. */
final class Endpoints {
    private static final System.Logger LOG = System.getLogger("org.idmint.client");

    /** Reads one answer (its body and headers) of server {@code server} into what the call answers. */
    interface Decoder<T> {
        T decode(byte[] body, int server, HttpHeaders headers) throws Wire.BadAnswer;
    }

    /** One server. */
    static final class Server {
        final String url;
        /** Failures in a row; 0 while it answers. Guarded by this. */
        private int failures;
        /** Until when (System.nanoTime) it is tried last. Guarded by this. */
        private long downUntilNanos;

        Server(String url) {
            this.url = url;
        }

        synchronized boolean isDown(long now) {
            return failures > 0 && now - downUntilNanos < 0;
        }

        synchronized long downUntil() {
            return downUntilNanos;
        }
    }

    /** How one attempt failed, when it was not an answer to hand to the caller. */
    private static final class Retry extends Exception {
        private static final long serialVersionUID = 1L;
        final boolean down;

        Retry(String reason, boolean down) {
            super(reason, null, false, false);
            this.down = down;
        }
    }

    private final List<Server> servers;
    private final AtomicInteger turn = new AtomicInteger();
    private final long timeoutMs;
    private final long deadlineMs;
    private final String token;
    private final ExecutorService httpThreads;
    private final HttpClient http;
    /** Attempts that failed (for tests and operators). */
    final AtomicLong failedAttempts = new AtomicLong();

    Endpoints(List<String> urls, long timeoutMs, String token) {
        List<Server> list = new ArrayList<>();
        for (String url : urls) {
            list.add(new Server(url));
        }
        this.servers = List.copyOf(list);
        this.timeoutMs = timeoutMs;
        this.deadlineMs = Math.min(timeoutMs * Limits.CALL_ATTEMPTS_MAX, Limits.CALL_DEADLINE_MS_MAX);
        this.token = token;
        this.httpThreads = Executors.newFixedThreadPool(Limits.HTTP_THREADS, IdmintClient.daemons("idmint-http"));
        this.http = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(Duration.ofMillis(timeoutMs))
                .executor(httpThreads)
                .followRedirects(HttpClient.Redirect.NEVER)
                .build();
    }

    /** The bound on one call with all its attempts. */
    long deadlineMs() {
        return deadlineMs;
    }

    /** The servers' URLs. */
    List<String> urls() {
        List<String> out = new ArrayList<>();
        for (Server s : servers) {
            out.add(s.url);
        }
        return out;
    }

    /** The URL of server {@code index}. */
    String url(int index) {
        return servers.get(index).url;
    }

    /** Whether server {@code index} is not marked down now. */
    boolean isUp(int index) {
        return !servers.get(index).isDown(System.nanoTime());
    }

    /** Stops the HTTP client's threads. */
    void close() {
        httpThreads.shutdownNow();
    }

    /**
     * Sends the request to the servers in failover order until one answers, the answer is the
     * caller's or final, CALL_ATTEMPTS_MAX attempts were made, or the deadline passes.
     *
     * @param subject the tag the call is about (named in errors), or null
     */
    <T> T call(String method, String path, byte[] body, String subject, Decoder<T> decoder) {
        return call(-1, method, path, body, subject, decoder);
    }

    /**
     * As {@link #call(String, String, byte[], String, Decoder)}, starting with server
     * {@code preferred} while it is up (a tag's leases stay with the server that gave the last
     * one: leases of two servers are not ordered, and one below the ids served is wasted).
     */
    <T> T call(int preferred, String method, String path, byte[] body, String subject, Decoder<T> decoder) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(deadlineMs);
        List<String> failures = new ArrayList<>();
        int attempts = 0;
        for (int index : order(preferred)) {
            if (attempts >= Limits.CALL_ATTEMPTS_MAX || System.nanoTime() - deadline >= 0) {
                break;
            }
            attempts++;
            try {
                return attempt(index, method, path, body, subject, decoder, deadline);
            } catch (Retry retry) {
                failures.add(url(index) + ": " + retry.getMessage());
            }
        }
        throw new UnavailableException("no server answered (" + attempts + " attempt(s): "
                + (failures.isEmpty() ? "out of time" : String.join("; ", failures)) + ")");
    }

    /** Sends the request to server {@code index} only (a give-back goes to the server that leased). */
    <T> T callAt(int index, String method, String path, byte[] body, String subject, Decoder<T> decoder) {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(deadlineMs);
        try {
            return attempt(index, method, path, body, subject, decoder, deadline);
        } catch (Retry retry) {
            throw new UnavailableException(url(index) + ": " + retry.getMessage());
        }
    }

    /** One attempt on one server; marks it up or down by the outcome. */
    private <T> T attempt(int index, String method, String path, byte[] body, String subject, Decoder<T> decoder,
            long deadline) throws Retry {
        Server server = servers.get(index);
        long limitMs = Math.max(1, Math.min(timeoutMs, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(server.url + path))
                .timeout(Duration.ofMillis(limitMs))
                .header("accept", "application/json");
        if (token != null) {
            request.header("authorization", "Bearer " + token);
        }
        if (body != null) {
            request.header("content-type", "application/json")
                    .method(method, HttpRequest.BodyPublishers.ofByteArray(body));
        } else {
            request.method(method, HttpRequest.BodyPublishers.noBody());
        }
        CompletableFuture<HttpResponse<byte[]>> sent = http.sendAsync(request.build(), info -> new Bounded());
        HttpResponse<byte[]> response;
        try {
            response = sent.get(limitMs, TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            // Cancelled: an answer arriving later is dropped (a range it leased is lost, never used).
            sent.cancel(true);
            throw failed(server, "no answer within " + limitMs + " ms");
        } catch (ExecutionException e) {
            Throwable cause = e.getCause() == null ? e : e.getCause();
            throw failed(server, "HTTP request failed: " + cause);
        } catch (InterruptedException e) {
            sent.cancel(true);
            Thread.currentThread().interrupt();
            throw new UnavailableException("interrupted while waiting for " + server.url);
        }
        int status = response.statusCode();
        if (status >= 200 && status < 300) {
            try {
                T answer = decoder.decode(response.body(), index, response.headers());
                succeeded(server);
                return answer;
            } catch (Wire.BadAnswer e) {
                throw failed(server, "malformed answer: " + e.getMessage());
            }
        }
        String[] error = Wire.error(response.body());
        try {
            IdmintException callers = error == null ? byStatus(status) : byCode(error[0], error[1], subject);
            if (callers != null) {
                succeeded(server);
                throw callers;
            }
        } catch (Retry retry) {
            if (retry.down) {
                throw failed(server, retry.getMessage());
            }
            failedAttempts.incrementAndGet();
            throw retry;
        }
        throw failed(server, "HTTP " + status);
    }

    /**
     * What an idmint error code means: an exception for the caller (final, or the caller's own
     * error: no other server would answer differently), or a Retry (another server may answer).
     */
    private static IdmintException byCode(String code, String message, String subject) throws Retry {
        switch (code) {
            case "unknown_tag":
                return new UnknownTagException(subject, message);
            case "tag_exhausted":
                return new ExhaustedTagException(subject, message);
            case "unauthorized":
            case "forbidden":
                return new AccessDeniedException(code, message);
            case "formatted_tag":
            case "strict_tag":
            case "public_ids_exhausted":
            case "key_changed":
            case "tag_not_storable":
            case "too_many_tags":
                return new RefusedException(code, message);
            case "no_route":
            case "method_not_allowed":
            case "too_many_requests":
            case "snowflake_not_running":
            case "snowflake_not_configured":
            case "tag_policy_not_served":
            case "worker_ids_exhausted":
            case "layout_exhausted":
            case "clock_skew":
            case "lease_settling":
                // This node does not serve it (now); another may, and this one is not down.
                throw new Retry(code + ": " + message, false);
            default:
                if (code.startsWith("bad_") || code.equals("not_an_id")) {
                    return new InvalidArgumentException(code, message);
                }
                // unavailable, shutting_down, request_timeout, internal, ...: the server could
                // not serve now; another may.
                throw new Retry(code + ": " + message, true);
        }
    }

    private static IdmintException byStatus(int status) throws Retry {
        String message = "HTTP " + status + " without an idmint error body";
        if (status == 401 || status == 403) {
            return new AccessDeniedException(status == 401 ? "unauthorized" : "forbidden", message);
        }
        throw new Retry(message, !(status == 404 || status == 405 || status == 429));
    }

    /**
     * The servers in the order a call tries them: {@code preferred} first if it is up, else
     * round robin; those marked down last (soonest back first).
     */
    private List<Integer> order(int preferred) {
        int n = servers.size();
        long now = System.nanoTime();
        boolean sticky = preferred >= 0 && preferred < n && !servers.get(preferred).isDown(now);
        int first = sticky ? preferred : Math.floorMod(turn.getAndIncrement(), n);
        List<Integer> up = new ArrayList<>(n);
        List<Integer> down = new ArrayList<>();
        for (int k = 0; k < n; k++) {
            int index = (first + k) % n;
            (servers.get(index).isDown(now) ? down : up).add(index);
        }
        down.sort((a, b) -> Long.compare(servers.get(a).downUntil() - now, servers.get(b).downUntil() - now));
        up.addAll(down);
        return up;
    }

    private void succeeded(Server server) {
        synchronized (server) {
            if (server.failures > 0) {
                LOG.log(Level.INFO, "idmint server {0} answers again", server.url);
            }
            server.failures = 0;
        }
    }

    private Retry failed(Server server, String reason) {
        failedAttempts.incrementAndGet();
        synchronized (server) {
            long backoffMs = Math.min(Limits.DOWN_BACKOFF_MS_MAX,
                    Limits.DOWN_BACKOFF_MS_MIN << Math.min(server.failures, 16));
            server.failures++;
            server.downUntilNanos = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(backoffMs);
            if (server.failures == 1) {
                LOG.log(Level.WARNING, "idmint server {0} failed ({1}); trying the others first for {2} ms",
                        server.url, reason, backoffMs);
            }
        }
        return new Retry(reason, true);
    }

    /** An answer body of at most ANSWER_BYTES_MAX bytes. */
    private static final class Bounded implements HttpResponse.BodySubscriber<byte[]> {
        private final CompletableFuture<byte[]> result = new CompletableFuture<>();
        private final ByteArrayOutputStream out = new ByteArrayOutputStream();
        private Flow.Subscription subscription;

        @Override
        public CompletionStage<byte[]> getBody() {
            return result;
        }

        @Override
        public void onSubscribe(Flow.Subscription subscription) {
            this.subscription = subscription;
            subscription.request(Long.MAX_VALUE);
        }

        @Override
        public void onNext(List<ByteBuffer> items) {
            for (ByteBuffer item : items) {
                if (out.size() + item.remaining() > Limits.ANSWER_BYTES_MAX) {
                    subscription.cancel();
                    result.completeExceptionally(
                            new IOException("answer larger than " + Limits.ANSWER_BYTES_MAX + " bytes"));
                    return;
                }
                byte[] bytes = new byte[item.remaining()];
                item.get(bytes);
                out.write(bytes, 0, bytes.length);
            }
        }

        @Override
        public void onError(Throwable error) {
            result.completeExceptionally(error);
        }

        @Override
        public void onComplete() {
            result.complete(out.toByteArray());
        }
    }
}
