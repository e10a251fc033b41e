// Wire: the routes the client calls, how their paths are written and how their answers are
// read. Every answer is checked before use (ranges valid, increasing and no more than asked,
// as many ids as asked); a malformed answer fails the attempt like a server that is down. The
// ROUTES list is the client's side of the wire contract: OpenApiContractTest checks each
// route, parameter and field named here against /openapi.json of the server under test.
// This file must not pick servers or retry (Endpoints does) nor keep state.
package org.idmint.client;

import java.net.http.HttpHeaders;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.UUID;
import java.util.regex.Pattern;

/** The routes, their paths and their answers. */
final class Wire {
    /** One route the client uses: what it sends and which answer fields it reads, with their JSON types. */
    static final class Route {
        final String method;
        final String template;
        final List<String> query;
        /** Request body fields ({@code a[].b} for a field of an array's items) and their JSON types. */
        final Map<String, String> request;
        /** Answer fields read on success and their JSON types. */
        final Map<String, String> answer;
        /** Answer headers read on success (optional ones: a hint when present). */
        final List<String> answerHeaders;

        Route(String method, String template, List<String> query, Map<String, String> request,
                Map<String, String> answer) {
            this(method, template, query, request, answer, List.of());
        }

        Route(String method, String template, List<String> query, Map<String, String> request,
                Map<String, String> answer, List<String> answerHeaders) {
            this.method = method;
            this.template = template;
            this.query = query;
            this.request = request;
            this.answer = answer;
            this.answerHeaders = answerHeaders;
        }

        @Override
        public String toString() {
            return method + " " + template;
        }
    }

    /** Leases ranges of a tag with their proofs. */
    static final Route RANGES = new Route("GET", "/v1/segment/{tag}/ranges", List.of("count"), Map.of(),
            fields("ranges[].start", "integer", "ranges[].end", "integer", "ranges[].proof", "string"));
    /** Gives unused leased ids back. */
    static final Route RETURN = new Route("POST", "/v1/segment/{tag}/return", List.of(),
            fields("start", "integer", "end", "integer", "leases[].start", "integer", "leases[].end", "integer",
                    "leases[].proof", "string"),
            fields("returned", "integer"));
    /** The answer header naming the server that answered a strict take, as its peers reach it. */
    static final String NODE_HEADER = "idmint-node";
    /** The answer header naming a strict tag's owner, in {@link #NODE_HEADER}'s form. */
    static final String OWNER_HEADER = "idmint-owner";
    /** Ids asked of the servers one call at a time (strict tags), naming the answering node and the owner. */
    static final Route IDS = new Route("GET", "/v1/segment/{tag}", List.of("count"), Map.of(),
            fields("ids[]", "integer"), List.of(NODE_HEADER, OWNER_HEADER));
    /** Snowflake ids. */
    static final Route SNOWFLAKE = new Route("GET", "/v1/snowflake", List.of("count"), Map.of(),
            fields("ids[]", "integer"));
    /** UUIDs (the client asks for version 7). */
    static final Route UUIDS = new Route("GET", "/v1/uuid", List.of("count", "version"), Map.of(),
            fields("ids[]", "string"));
    /** ULIDs. */
    static final Route ULIDS = new Route("GET", "/v1/ulid", List.of("count"), Map.of(), fields("ids[]", "string"));
    /** Every route above. */
    static final List<Route> ROUTES = List.of(RANGES, RETURN, IDS, SNOWFLAKE, UUIDS, ULIDS);
    /** What every error answer of those routes carries. */
    static final Map<String, String> ERROR_FIELDS = fields("error.code", "string", "error.message", "string");

    private static final Pattern PROOF = Pattern.compile("[0-9a-f]{16}");
    private static final Pattern UUID_TEXT =
            Pattern.compile("[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}");
    private static final Pattern ULID_TEXT = Pattern.compile("[0-7][0-9A-HJKMNP-TV-Z]{25}");

    private Wire() {}

    /** A leased range {@code [start, end)}, its proof, and the server (index) that leased it. */
    static final class Lease {
        final long start;
        final long end;
        final long proof;
        final int server;

        Lease(long start, long end, long proof, int server) {
            this.start = start;
            this.end = end;
            this.proof = proof;
            this.server = server;
        }
    }

    /** The answer is not the shape the route promises. */
    static final class BadAnswer extends Exception {
        private static final long serialVersionUID = 1L;

        BadAnswer(String message) {
            super(message);
        }
    }

    /** The path of {@code route} for {@code tag} (percent-encoded) and the query values, in ROUTE order. */
    static String path(Route route, String tag, Object... query) {
        StringBuilder out = new StringBuilder(route.template.replace("{tag}", tag == null ? "" : segment(tag)));
        for (int i = 0; i < query.length; i++) {
            out.append(i == 0 ? '?' : '&').append(route.query.get(i)).append('=').append(query[i]);
        }
        return out.toString();
    }

    /**
     * A tag as one URL path segment: every byte of its UTF-8 outside {@code A-Z a-z 0-9 - . _ ~}
     * percent-encoded, so {@code user/login} or {@code 订单} reach the server as the one name they are.
     */
    static String segment(String tag) {
        StringBuilder out = new StringBuilder();
        for (byte b : tag.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || "-._~".indexOf(c) >= 0) {
                out.append((char) c);
            } else {
                out.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                        .append(Character.toUpperCase(Character.forDigit(c & 15, 16)));
            }
        }
        return out.toString();
    }

    /** The leases of a ranges answer: valid ids, increasing, disjoint, at most {@code count} ids in all. */
    static List<Lease> leases(byte[] body, long count, int server) throws BadAnswer {
        List<Object> ranges = array(object(parse(body)), "ranges");
        List<Lease> leases = new ArrayList<>();
        long total = 0;
        long previousEnd = 0;
        for (Object item : ranges) {
            Map<String, Object> range = object(item);
            long start = integer(range, "start");
            long end = integer(range, "end");
            Object proof = range.get("proof");
            if (!(proof instanceof String) || !PROOF.matcher((String) proof).matches()) {
                throw new BadAnswer("malformed lease proof " + proof);
            }
            if (start < 1 || end <= start || start < previousEnd) {
                throw new BadAnswer("malformed or unordered range [" + start + ", " + end + ")");
            }
            total += end - start;
            previousEnd = end;
            leases.add(new Lease(start, end, Long.parseUnsignedLong((String) proof, 16), server));
        }
        if (leases.isEmpty() || total > count) {
            throw new BadAnswer(leases.size() + " ranges of " + total + " ids for " + count + " asked");
        }
        return leases;
    }

    /** The body of a give-back of {@code [start, end)} covered by {@code leases}. */
    static byte[] returnBody(long start, long end, List<Lease> leases) {
        StringBuilder out = new StringBuilder();
        out.append("{\"start\":").append(start).append(",\"end\":").append(end).append(",\"leases\":[");
        for (int i = 0; i < leases.size(); i++) {
            Lease l = leases.get(i);
            out.append(i == 0 ? "" : ",").append("{\"start\":").append(l.start).append(",\"end\":").append(l.end)
                    .append(",\"proof\":\"").append(String.format(Locale.ROOT, "%016x", l.proof)).append("\"}");
        }
        return out.append("]}").toString().getBytes(StandardCharsets.UTF_8);
    }

    /** The ids a give-back took back: from 0 to all {@code asked}. */
    static long returned(byte[] body, long asked) throws BadAnswer {
        long returned = integer(object(parse(body)), "returned");
        if (returned < 0 || returned > asked) {
            throw new BadAnswer("took back " + returned + " of " + asked + " ids");
        }
        return returned;
    }

    /** Exactly {@code count} positive integer ids, from an {@code {"ids": [...]}} answer. */
    static long[] ids(byte[] body, int count) throws BadAnswer {
        List<Object> list = array(object(parse(body)), "ids");
        if (list.size() != count) {
            throw new BadAnswer("answered " + list.size() + " ids for " + count);
        }
        long[] ids = new long[count];
        for (int i = 0; i < count; i++) {
            Object id = list.get(i);
            if (!(id instanceof Long) || (Long) id < 1) {
                throw new BadAnswer("not an id: " + id);
            }
            ids[i] = (Long) id;
        }
        return ids;
    }

    /** Exactly {@code count} UUID v7s from an {@code {"ids": [...]}} answer. */
    static List<UUID> uuids(byte[] body, int count) throws BadAnswer {
        List<UUID> out = new ArrayList<>();
        for (String text : texts(body, count, UUID_TEXT)) {
            out.add(UUID.fromString(text));
        }
        return out;
    }

    /** Exactly {@code count} ULIDs from an {@code {"ids": [...]}} answer. */
    static List<String> ulids(byte[] body, int count) throws BadAnswer {
        return texts(body, count, ULID_TEXT);
    }

    /**
     * A node's name from answer header {@code key}: visible ASCII, at most
     * {@link Limits#NODE_NAME_LENGTH_MAX} characters; null when absent or not a name (a hint
     * only: a malformed one is ignored, never fails the answer).
     */
    static String nodeName(HttpHeaders headers, String key) {
        String value = headers.firstValue(key).orElse(null);
        if (value == null || value.isEmpty() || value.length() > Limits.NODE_NAME_LENGTH_MAX
                || !value.chars().allMatch(c -> c > 0x20 && c < 0x7f)) {
            return null;
        }
        return value;
    }

    /** An error answer's {@code code} and {@code message}, or null when the body is not idmint's error. */
    static String[] error(byte[] body) {
        try {
            Map<String, Object> detail = object(object(parse(body)).get("error"));
            Object code = detail.get("code");
            Object message = detail.get("message");
            if (code instanceof String && message instanceof String) {
                return new String[] {(String) code, (String) message};
            }
        } catch (BadAnswer e) {
            // Not idmint's error body: classified by its status.
        }
        return null;
    }

    private static List<String> texts(byte[] body, int count, Pattern pattern) throws BadAnswer {
        List<Object> list = array(object(parse(body)), "ids");
        if (list.size() != count) {
            throw new BadAnswer("answered " + list.size() + " ids for " + count);
        }
        List<String> out = new ArrayList<>(count);
        for (Object id : list) {
            if (!(id instanceof String) || !pattern.matcher((String) id).matches()) {
                throw new BadAnswer("malformed id " + id);
            }
            out.add((String) id);
        }
        return out;
    }

    private static Object parse(byte[] body) throws BadAnswer {
        try {
            return Json.parse(body);
        } catch (Json.Malformed e) {
            throw new BadAnswer(e.getMessage());
        }
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> object(Object value) throws BadAnswer {
        if (!(value instanceof Map)) {
            throw new BadAnswer("expected a JSON object");
        }
        return (Map<String, Object>) value;
    }

    @SuppressWarnings("unchecked")
    private static List<Object> array(Map<String, Object> object, String key) throws BadAnswer {
        Object value = object.get(key);
        if (!(value instanceof List)) {
            throw new BadAnswer("expected an array " + key);
        }
        return (List<Object>) value;
    }

    private static long integer(Map<String, Object> object, String key) throws BadAnswer {
        Object value = object.get(key);
        if (!(value instanceof Long)) {
            throw new BadAnswer("expected an integer " + key + ", got " + value);
        }
        return (Long) value;
    }

    private static Map<String, String> fields(String... pairs) {
        Map<String, String> map = new LinkedHashMap<>();
        for (int i = 0; i < pairs.length; i += 2) {
            map.put(pairs[i], pairs[i + 1]);
        }
        return Collections.unmodifiableMap(map);
    }
}
