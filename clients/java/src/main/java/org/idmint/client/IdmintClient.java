// IdmintClient: the public entry point. Ids of segment tags come from each tag's TagBuffer
// (local ranges, a lock-free take); strict tags, snowflake ids, UUID v7s and ULIDs are asked
// of the servers per call, never cached. close() stops in the order written once: freeze
// every buffer (no id after it), let the fetches under way finish, give each tag's unused ids
// back to the servers that leased them (with the leases' proofs), stop the threads.
package org.idmint.client;

import java.lang.System.Logger.Level;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Ids from idmint servers, handed out of local memory. Thread-safe; one per process is enough.
 *
 * <pre>{@code
 * IdmintClient ids = IdmintClient.builder()
 *         .endpoints("http://10.0.0.1:8080", "http://10.0.0.2:8080").build();
 * long orderId = ids.nextId("order");          // from a local range: no call per id
 * OptionalLong next = ids.tryNextId("order");  // never blocks; empty when nothing is local
 * ids.close();                                 // gives the unused ids back
 * }</pre>
 *
 * <p>Each tag's ids come from ranges leased from the servers ({@code GET /v1/segment/{tag}/ranges})
 * and handed out with one atomic add each; the next range is fetched in the background before
 * the current one runs out. Ids of a tag from one client increase, across failovers too. A
 * strict tag (its ids increase in real time across the cluster) is asked of the servers on
 * every call. Failures are typed exceptions ({@link UnknownTagException},
 * {@link ExhaustedTagException}, {@link UnavailableException}, ...), never a sentinel id.
 */
public final class IdmintClient implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("org.idmint.client");

    private final Core core;
    private final ConcurrentHashMap<String, TagBuffer> tags = new ConcurrentHashMap<>();
    /**
     * The current range of the tag a take by name last found in {@link #tags}: a take of the
     * same name (the common case, one hot tag) reads this one field and adds to the range's
     * cursor, as a take on a handle does. A spent range sends the take to its buffer, which
     * moves on; a frozen one (the close, or a buffer that left the map) is forgotten.
     */
    private volatile TagBuffer.Segment hot;
    private final Set<String> strict = ConcurrentHashMap.newKeySet();
    private final Object closeLock = new Object();
    private boolean closeDone;
    /** Ids the servers took back at close (for tests and operators). */
    final AtomicLong returnedIds = new AtomicLong();

    /** What every tag's buffer shares: the servers, the settings, the fetch threads, the closed flag. */
    static final class Core {
        final Endpoints endpoints;
        /** The strict tags' owners and the servers' names, as the servers told them. */
        final Owners owners;
        final long minLease;
        final long leaseDurationS;
        /** Longest a take waits for its tag's fetch. */
        final long waitMs;
        final ThreadPoolExecutor loaders;
        /** Runs a fetch's extra lease calls (a consumption of several batches ahead). */
        final ThreadPoolExecutor leaseCalls;
        volatile boolean closed;

        Core(Endpoints endpoints, long minLease, long leaseDurationS) {
            this.endpoints = endpoints;
            this.owners = new Owners(endpoints.urls().size());
            this.minLease = minLease;
            this.leaseDurationS = leaseDurationS;
            this.waitMs = endpoints.deadlineMs() + 500;
            // One fetch per tag at a time, so the queue holds at most one task per tag.
            this.loaders = new ThreadPoolExecutor(Limits.LOADER_THREADS, Limits.LOADER_THREADS, 0,
                    TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(Limits.TAGS_MAX), daemons("idmint-fetch"));
            // At most LEASE_CALLS_MAX - 1 extra calls per fetch, and LOADER_THREADS fetches at once.
            int extra = Limits.LEASE_CALLS_MAX - 1;
            this.leaseCalls = new ThreadPoolExecutor(Math.max(1, extra), Math.max(1, extra), 0,
                    TimeUnit.MILLISECONDS, new LinkedBlockingQueue<>(Math.max(1, extra * Limits.LOADER_THREADS)),
                    daemons("idmint-lease"));
        }

        /** Runs a fetch on the fetch threads; false when they are stopped. */
        boolean submit(Runnable fetch) {
            try {
                loaders.execute(fetch);
                return true;
            } catch (RejectedExecutionException e) {
                return false;
            }
        }
    }

    private IdmintClient(Core core) {
        this.core = core;
    }

    /** A builder with the defaults; add at least one server with {@link Builder#endpoints}. */
    public static Builder builder() {
        return new Builder();
    }

    /**
     * The next id of {@code tag}, from the local ranges; waits (bounded) only when they are
     * spent and the next range has not arrived.
     *
     * @throws UnknownTagException the tag does not exist (asked again on the next call)
     * @throws ExhaustedTagException the tag's ids are spent (final)
     * @throws UnavailableException no server answered within the bounds
     * @throws ClientClosedException the client was closed
     */
    public long nextId(String tag) {
        TagBuffer.Segment s = hot;
        if (s != null && (s.tag == tag || s.tag.equals(tag))) {
            long i = s.takeIndex(1);
            if (i < s.len && i != s.preloadIndex) {
                return s.start + i;
            }
            return nextIdPastRange(s, i);
        }
        return nextIdLooked(tag);
    }

    /** {@link #nextId} at the remembered range's preload point or past its end: index {@code i} was taken. */
    private long nextIdPastRange(TagBuffer.Segment s, long i) {
        TagBuffer buffer = s.owner;
        long id = buffer.takeSlow(s, i);
        remember(buffer);
        return id != TagBuffer.NONE ? id : nextIdWaiting(buffer.tag);
    }

    /** {@link #nextId} past the remembered range: the map, then the wait. Kept out of line. */
    private long nextIdLooked(String tag) {
        TagBuffer buffer = tags.get(tag);
        if (buffer == null) {
            return nextIdWaiting(tag);
        }
        long id = buffer.nextId();
        remember(buffer);
        return id;
    }

    /**
     * Remembers the buffer's current range for the next take by name: not a frozen one, and
     * not one of a buffer that left the map (a strict tag's, a dropped one's).
     */
    private void remember(TagBuffer buffer) {
        TagBuffer.Segment current = buffer.current();
        if (current.owner != buffer || tags.get(buffer.tag) != buffer) {
            hot = null; // frozen, or gone from the map: the next take by name looks it up
        } else if (hot != current) {
            hot = current;
        }
    }

    /** {@code count} ids of {@code tag} (1 to {@link Limits#BATCH_COUNT_MAX}), increasing. Throws as {@link #nextId}. */
    public long[] nextIds(String tag, int count) {
        checkCount(count);
        if (strict.contains(tag)) {
            return strictIds(tag, count);
        }
        try {
            return buffer(tag).takeIds(count);
        } catch (RefusedException e) {
            if (!learnStrict(tag, e)) {
                throw e;
            }
            return strictIds(tag, count);
        }
    }

    /**
     * The next id of {@code tag} if one is in local memory now; never blocks and never calls a
     * server on the caller's thread (a fetch is started in the background when nothing is
     * local). Empty for a strict tag (its ids are never local) and after {@link #close()}.
     *
     * @throws InvalidArgumentException the tag name is not one idmint accepts
     */
    public OptionalLong tryNextId(String tag) {
        TagBuffer buffer = tags.get(tag);
        if (buffer == null) {
            if (core.closed || strict.contains(tag)) {
                return OptionalLong.empty();
            }
            buffer = buffer(tag);
        }
        long id = buffer.take();
        return id == TagBuffer.NONE ? OptionalLong.empty() : OptionalLong.of(id);
    }

    /** A handle on {@code tag}'s ids: no lookup by name per id. */
    public TagIds tag(String tag) {
        return buffer(tag);
    }

    /** The next snowflake id, asked of a server. */
    public long nextSnowflakeId() {
        return nextSnowflakeIds(1)[0];
    }

    /** {@code count} snowflake ids (1 to {@link Limits#BATCH_COUNT_MAX}), increasing, in one call. */
    public long[] nextSnowflakeIds(int count) {
        checkOpen();
        checkCount(count);
        return core.endpoints.call("GET", Wire.path(Wire.SNOWFLAKE, null, count), null, null,
                (body, server, headers) -> Wire.ids(body, count));
    }

    /** A time-ordered UUID (version 7), made by a server. */
    public UUID nextUuidV7() {
        return nextUuidV7s(1).get(0);
    }

    /** {@code count} UUID v7s (1 to {@link Limits#BATCH_COUNT_MAX}) in one call, increasing within the server. */
    public List<UUID> nextUuidV7s(int count) {
        checkOpen();
        checkCount(count);
        return core.endpoints.call("GET", Wire.path(Wire.UUIDS, null, count, 7), null, null,
                (body, server, headers) -> Wire.uuids(body, count));
    }

    /** A ULID (26 characters, Crockford base32), made by a server. */
    public String nextUlid() {
        return nextUlids(1).get(0);
    }

    /** {@code count} ULIDs (1 to {@link Limits#BATCH_COUNT_MAX}) in one call, increasing within the server. */
    public List<String> nextUlids(int count) {
        checkOpen();
        checkCount(count);
        return core.endpoints.call("GET", Wire.path(Wire.ULIDS, null, count), null, null,
                (body, server, headers) -> Wire.ulids(body, count));
    }

    /** Attempts on servers that failed so far (for tests). */
    long failedAttemptsForTests() {
        return core.endpoints.failedAttempts.get();
    }

    /** The servers, as given (normalised). */
    public List<String> endpoints() {
        return core.endpoints.urls();
    }

    /**
     * Stops the client: every tag's buffer is frozen (later calls throw
     * {@link ClientClosedException}, never answer an id), the fetches under way finish (bounded),
     * the unused ids go back to the servers that leased them, with the leases' proofs (a server
     * takes them back when it can prove it safe, else they are wasted, never repeated), and the
     * threads stop. Idempotent.
     */
    @Override
    public void close() {
        synchronized (closeLock) {
            if (closeDone) {
                return;
            }
            core.closed = true;
            Map<TagBuffer, List<TagBuffer.Piece>> unused = new java.util.LinkedHashMap<>();
            for (TagBuffer buffer : tags.values()) {
                unused.put(buffer, buffer.freeze());
            }
            core.loaders.shutdown();
            try {
                core.loaders.awaitTermination(core.waitMs * Limits.ALLOCATE_ROUNDS_MAX, TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            for (Map.Entry<TagBuffer, List<TagBuffer.Piece>> entry : unused.entrySet()) {
                List<TagBuffer.Piece> pieces = new ArrayList<>(entry.getValue());
                pieces.addAll(entry.getKey().drainQueued());
                giveBack(entry.getKey().tag, pieces);
            }
            core.leaseCalls.shutdown();
            core.endpoints.close();
            closeDone = true;
        }
    }

    /** The slow path of {@link #nextId}: a strict tag, a new tag, or a wait for the tag's fetch. */
    long nextIdWaiting(String tag) {
        checkOpen();
        if (strict.contains(tag)) {
            return strictIds(tag, 1)[0];
        }
        try {
            return buffer(tag).nextIdWaiting();
        } catch (RefusedException e) {
            if (!learnStrict(tag, e)) {
                throw e;
            }
            return strictIds(tag, 1)[0];
        }
    }

    /** The buffer of {@code tag}, made (name checked) when it is new. */
    private TagBuffer buffer(String tag) {
        TagBuffer buffer = tags.get(tag);
        if (buffer != null) {
            return buffer;
        }
        checkOpen();
        checkTag(tag);
        if (tags.size() >= Limits.TAGS_MAX) {
            // Make room: tags that hold nothing and were found unknown go first.
            for (TagBuffer unknown : tags.values()) {
                if (unknown.isUnknownAndEmpty()) {
                    drop(unknown);
                }
            }
            if (tags.size() >= Limits.TAGS_MAX) {
                throw new InvalidArgumentException("too_many_tags",
                        "this client already serves " + Limits.TAGS_MAX + " tags, the most it serves");
            }
        }
        return tags.computeIfAbsent(tag, name -> new TagBuffer(this, name, core));
    }

    /** Whether the refusal says the tag is strict; if so it is remembered and its buffer dropped. */
    private boolean learnStrict(String tag, RefusedException refusal) {
        if (!"strict_tag".equals(refusal.code())) {
            return false;
        }
        if (strict.size() < Limits.STRICT_TAGS_MAX) {
            strict.add(tag);
        }
        TagBuffer buffer = tags.get(tag);
        if (buffer != null) {
            drop(buffer);
        }
        return true;
    }

    /**
     * Takes a buffer out of the map and freezes it, so a handle still holding it hands out
     * nothing more from it (its takes go by name: to the map, the strict path or the close).
     * A lease it held or that arrives later is not given back: a gap, never a repeat (the
     * buffers dropped hold nothing when they are dropped).
     */
    void drop(TagBuffer buffer) {
        if (tags.remove(buffer.tag, buffer)) {
            buffer.freeze();
        }
        hot = null;
    }

    /**
     * {@code count} ids of a strict tag, asked of the servers in one call and never cached:
     * first of the tag's owner when the servers named it and it is up (any other node would
     * forward to it), else in the usual failover order. When the owner does not answer, the
     * same call goes on to the others (every node answers in order) and the owner is forgotten.
     */
    private long[] strictIds(String tag, int count) {
        checkOpen();
        Owners owners = core.owners;
        int direct = owners.pick(tag, core.endpoints::isUp);
        try {
            return core.endpoints.call(direct, "GET", Wire.path(Wire.IDS, tag, count), null, tag,
                    (body, server, headers) -> {
                        long[] ids = Wire.ids(body, count);
                        if (direct != Owners.ANY && server != direct) {
                            owners.forget(tag);
                        }
                        owners.learn(tag, server, Wire.nodeName(headers, Wire.NODE_HEADER),
                                Wire.nodeName(headers, Wire.OWNER_HEADER));
                        return ids;
                    });
        } catch (UnavailableException e) {
            owners.forget(tag);
            throw e;
        }
    }

    /** Gives {@code pieces} back, highest first, contiguous pieces of one server in one call. */
    private void giveBack(String tag, List<TagBuffer.Piece> pieces) {
        pieces.sort(TagBuffer.HIGHEST_FIRST);
        int i = 0;
        while (i < pieces.size()) {
            // A run of pieces of one server, each ending where the one above begins.
            List<TagBuffer.Piece> run = new ArrayList<>();
            run.add(pieces.get(i++));
            while (i < pieces.size() && run.size() < Limits.GIVE_BACK_LEASES_MAX
                    && pieces.get(i).lease.server == run.get(0).lease.server
                    && pieces.get(i).to == run.get(run.size() - 1).from
                    && pieces.get(i).to == run.get(run.size() - 1).lease.start) {
                run.add(pieces.get(i++));
            }
            long from = run.get(run.size() - 1).from;
            long to = run.get(0).to;
            List<Wire.Lease> leases = new ArrayList<>();
            for (int k = run.size() - 1; k >= 0; k--) {
                leases.add(run.get(k).lease);
            }
            int server = run.get(0).lease.server;
            try {
                long returned = core.endpoints.callAt(server, "POST", Wire.path(Wire.RETURN, tag),
                        Wire.returnBody(from, to, leases), tag, (body, s, headers) -> Wire.returned(body, to - from));
                returnedIds.addAndGet(returned);
                LOG.log(Level.DEBUG, "tag {0}: gave back [{1}, {2}), {3} taken back", tag, from, to, returned);
            } catch (IdmintException e) {
                LOG.log(Level.INFO, "tag {0}: unused ids [{1}, {2}) not given back (wasted, never repeated): {3}",
                        tag, from, to, e.getMessage());
            }
        }
    }

    private void checkOpen() {
        if (core.closed) {
            throw new ClientClosedException();
        }
    }

    private static void checkCount(int count) {
        if (count < 1 || count > Limits.BATCH_COUNT_MAX) {
            throw new InvalidArgumentException("bad_count",
                    "count " + count + " is out of range; ask for 1 to " + Limits.BATCH_COUNT_MAX + " ids");
        }
    }

    /** The checks the client can make alone; the servers check the rest (bidi overrides, reserved names). */
    private static void checkTag(String tag) {
        if (tag == null) {
            throw new InvalidArgumentException("bad_tag", "a tag is required");
        }
        int bytes = tag.getBytes(StandardCharsets.UTF_8).length;
        if (bytes < 1 || bytes > Limits.TAG_BYTES_MAX) {
            throw new InvalidArgumentException("bad_tag",
                    "tag " + tag + " has " + bytes + " bytes; a tag has 1 to " + Limits.TAG_BYTES_MAX + " bytes of UTF-8");
        }
        for (int i = 0; i < tag.length(); i++) {
            if (Character.isISOControl(tag.charAt(i))) {
                throw new InvalidArgumentException("bad_tag", "a tag holds no control character");
            }
        }
        if (Character.isWhitespace(tag.charAt(0)) || Character.isWhitespace(tag.charAt(tag.length() - 1))) {
            throw new InvalidArgumentException("bad_tag", "a tag has no leading or trailing whitespace");
        }
    }

    /** Daemon threads named {@code name-N}: the client never keeps a JVM alive. */
    static ThreadFactory daemons(String name) {
        AtomicInteger count = new AtomicInteger();
        return runnable -> {
            Thread thread = new Thread(runnable, name + "-" + count.incrementAndGet());
            thread.setDaemon(true);
            return thread;
        };
    }

    /** Builds an {@link IdmintClient}: {@code IdmintClient.builder().endpoints(url, ...).build()}. */
    public static final class Builder {
        private final List<String> endpoints = new ArrayList<>();
        private String token;
        private long minLease = Limits.MIN_LEASE_DEFAULT;
        private long leaseDurationS = Limits.LEASE_DURATION_S_DEFAULT;
        private long timeoutMs = Limits.CALL_TIMEOUT_MS_DEFAULT;

        private Builder() {}

        /** Adds servers, {@code http://host:port}; calls go round robin over those that answer. */
        public Builder endpoints(String... urls) {
            endpoints.addAll(List.of(urls));
            return this;
        }

        /** A bearer token sent with every call, for tags guarded by a client token. Never shown in errors. */
        public Builder token(String token) {
            this.token = token;
            return this;
        }

        /** Fewest ids one lease holds (1 to {@link Limits#BATCH_COUNT_MAX}; default {@link Limits#MIN_LEASE_DEFAULT}). */
        public Builder minLease(long ids) {
            this.minLease = ids;
            return this;
        }

        /**
         * How long one lease should last at the measured rate, whole seconds (1 to
         * {@link Limits#LEASE_DURATION_S_MAX}; default {@link Limits#LEASE_DURATION_S_DEFAULT}).
         */
        public Builder leaseDuration(Duration duration) {
            this.leaseDurationS = duration.getNano() == 0 ? duration.getSeconds() : -1;
            return this;
        }

        /** Bound on one call to one server ({@link Limits#CALL_TIMEOUT_MS_MIN} to {@link Limits#CALL_TIMEOUT_MS_MAX} ms). */
        public Builder timeout(Duration timeout) {
            this.timeoutMs = timeout.toMillis();
            return this;
        }

        /**
         * Checks the settings and makes the client. Connects lazily: a server that is down now
         * is tried when ids are first needed.
         *
         * @throws InvalidArgumentException a setting is out of range
         */
        public IdmintClient build() {
            if (endpoints.isEmpty() || endpoints.size() > Limits.ENDPOINTS_MAX) {
                throw bad("endpoints", "give 1 to " + Limits.ENDPOINTS_MAX + " servers, http://host:port");
            }
            List<String> urls = new ArrayList<>();
            for (String url : endpoints) {
                urls.add(checkedUrl(url));
            }
            if (token != null && (token.isEmpty() || token.length() > Limits.TOKEN_LENGTH_MAX
                    || !token.chars().allMatch(c -> c > 0x20 && c < 0x7f))) {
                throw bad("token", "a token is 1 to " + Limits.TOKEN_LENGTH_MAX + " visible ASCII characters");
            }
            if (minLease < 1 || minLease > Limits.BATCH_COUNT_MAX) {
                throw bad("minLease", minLease + " is out of range; use 1 to " + Limits.BATCH_COUNT_MAX);
            }
            if (leaseDurationS < 1 || leaseDurationS > Limits.LEASE_DURATION_S_MAX) {
                throw bad("leaseDuration", "use whole seconds from 1 to " + Limits.LEASE_DURATION_S_MAX);
            }
            if (timeoutMs < Limits.CALL_TIMEOUT_MS_MIN || timeoutMs > Limits.CALL_TIMEOUT_MS_MAX) {
                throw bad("timeout", timeoutMs + " ms is out of range; use " + Limits.CALL_TIMEOUT_MS_MIN + " to "
                        + Limits.CALL_TIMEOUT_MS_MAX + " ms");
            }
            return new IdmintClient(new Core(new Endpoints(urls, timeoutMs, token), minLease, leaseDurationS));
        }

        private static String checkedUrl(String url) {
            String trimmed = url == null ? "" : url.trim();
            while (trimmed.endsWith("/")) {
                trimmed = trimmed.substring(0, trimmed.length() - 1);
            }
            if (!trimmed.startsWith("http://")) {
                throw bad("endpoints", "give a server as http://host:port (plain HTTP: terminate TLS in front of "
                        + "idmint), not " + url);
            }
            String authority = trimmed.substring("http://".length());
            if (authority.isEmpty() || authority.matches(".*[/?#@ ].*")) {
                throw bad("endpoints", "give a server as http://host:port, without a path, query or user: " + url);
            }
            return trimmed;
        }

        private static InvalidArgumentException bad(String field, String reason) {
            return new InvalidArgumentException("bad_config", "bad client setting " + field + ": " + reason);
        }
    }
}
