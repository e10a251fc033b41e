// Json: a small, strict JSON reader for the few answers the client reads (no JSON library, so
// a service's dependency tree stays its own). RFC 8259 grammar, UTF-8 only, duplicate keys,
// trailing text, control characters in strings and nesting past JSON_DEPTH_MAX refused.
// Integers within a long are Longs, other numbers Doubles (no answer the client reads has
// one). It builds plain values; Wire checks the shapes. It must not know any answer.
package org.idmint.client;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** Reads JSON text into {@code Map<String,Object>}, {@code List<Object>}, String, Long, Double, Boolean, {@link #NULL}. */
final class Json {
    /** JSON's {@code null}. */
    static final Object NULL = new Object();

    /** The text is not JSON the reader accepts. */
    static final class Malformed extends Exception {
        private static final long serialVersionUID = 1L;

        Malformed(String message) {
            super(message);
        }
    }

    private final String text;
    private final int depthMax;
    private int at;

    private Json(String text, int depthMax) {
        this.text = text;
        this.depthMax = depthMax;
    }

    /** The value of a whole UTF-8 document, nested at most JSON_DEPTH_MAX deep. */
    static Object parse(byte[] utf8) throws Malformed {
        return parse(utf8, Limits.JSON_DEPTH_MAX);
    }

    /** The value of a whole UTF-8 document, nested at most {@code depthMax} deep. */
    static Object parse(byte[] utf8, int depthMax) throws Malformed {
        String text;
        try {
            text = StandardCharsets.UTF_8.newDecoder()
                    .onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT)
                    .decode(ByteBuffer.wrap(utf8)).toString();
        } catch (CharacterCodingException e) {
            throw new Malformed("not UTF-8");
        }
        Json reader = new Json(text, depthMax);
        reader.space();
        Object value = reader.value(0);
        reader.space();
        if (reader.at != text.length()) {
            throw reader.error("text after the value");
        }
        return value;
    }

    private Object value(int depth) throws Malformed {
        if (depth > depthMax) {
            throw error("nested deeper than " + depthMax);
        }
        char c = peek();
        switch (c) {
            case '{':
                return object(depth);
            case '[':
                return array(depth);
            case '"':
                return string();
            case 't':
                word("true");
                return Boolean.TRUE;
            case 'f':
                word("false");
                return Boolean.FALSE;
            case 'n':
                word("null");
                return NULL;
            default:
                if (c == '-' || (c >= '0' && c <= '9')) {
                    return number();
                }
                throw error("unexpected character");
        }
    }

    private Map<String, Object> object(int depth) throws Malformed {
        Map<String, Object> map = new LinkedHashMap<>();
        at++;
        space();
        if (peek() == '}') {
            at++;
            return map;
        }
        while (true) {
            space();
            if (peek() != '"') {
                throw error("expected a key");
            }
            String key = string();
            space();
            expect(':');
            space();
            if (map.put(key, value(depth + 1)) != null) {
                throw error("duplicate key " + key);
            }
            space();
            char c = next();
            if (c == '}') {
                return map;
            }
            if (c != ',') {
                throw error("expected , or }");
            }
        }
    }

    private List<Object> array(int depth) throws Malformed {
        List<Object> list = new ArrayList<>();
        at++;
        space();
        if (peek() == ']') {
            at++;
            return list;
        }
        while (true) {
            space();
            list.add(value(depth + 1));
            space();
            char c = next();
            if (c == ']') {
                return list;
            }
            if (c != ',') {
                throw error("expected , or ]");
            }
        }
    }

    private String string() throws Malformed {
        expect('"');
        StringBuilder out = new StringBuilder();
        while (true) {
            char c = next();
            if (c == '"') {
                return out.toString();
            }
            if (c < 0x20) {
                throw error("control character in a string");
            }
            if (c != '\\') {
                out.append(c);
                continue;
            }
            char e = next();
            switch (e) {
                case '"': case '\\': case '/':
                    out.append(e);
                    break;
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u':
                    if (at + 4 > text.length()) {
                        throw error("short \\u escape");
                    }
                    int code = 0;
                    for (int i = 0; i < 4; i++) {
                        int digit = Character.digit(text.charAt(at++), 16);
                        if (digit < 0) {
                            throw error("bad \\u escape");
                        }
                        code = code * 16 + digit;
                    }
                    out.append((char) code);
                    break;
                default:
                    throw error("bad escape");
            }
        }
    }

    private Object number() throws Malformed {
        int start = at;
        if (peek() == '-') {
            at++;
        }
        if (peek() == '0') {
            at++;
        } else {
            digits();
        }
        boolean integer = true;
        if (at < text.length() && text.charAt(at) == '.') {
            at++;
            digits();
            integer = false;
        }
        if (at < text.length() && (text.charAt(at) == 'e' || text.charAt(at) == 'E')) {
            at++;
            if (at < text.length() && (text.charAt(at) == '+' || text.charAt(at) == '-')) {
                at++;
            }
            digits();
            integer = false;
        }
        String token = text.substring(start, at);
        if (integer) {
            try {
                return Long.parseLong(token);
            } catch (NumberFormatException e) {
                throw error("integer out of range: " + token);
            }
        }
        return Double.parseDouble(token);
    }

    private void digits() throws Malformed {
        int start = at;
        while (at < text.length() && text.charAt(at) >= '0' && text.charAt(at) <= '9') {
            at++;
        }
        if (at == start) {
            throw error("expected a digit");
        }
    }

    private void word(String word) throws Malformed {
        if (!text.startsWith(word, at)) {
            throw error("expected " + word);
        }
        at += word.length();
    }

    private void space() {
        while (at < text.length()) {
            char c = text.charAt(at);
            if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                return;
            }
            at++;
        }
    }

    private char peek() throws Malformed {
        if (at >= text.length()) {
            throw error("unexpected end");
        }
        return text.charAt(at);
    }

    private char next() throws Malformed {
        char c = peek();
        at++;
        return c;
    }

    private void expect(char c) throws Malformed {
        if (next() != c) {
            throw error("expected " + c);
        }
    }

    private Malformed error(String what) {
        return new Malformed("malformed JSON at offset " + at + ": " + what);
    }
}
