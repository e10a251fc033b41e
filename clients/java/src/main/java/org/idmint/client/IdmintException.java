// IdmintException: the base of every error the client raises in place of an id. Each failure
// is its own subclass, so callers catch what they can act on; an id is never a sentinel value.
package org.idmint.client;

/**
 * Why the client could not answer with ids. Unchecked: catch a subclass where it can be acted
 * on ({@link UnknownTagException}, {@link ExhaustedTagException}, {@link UnavailableException},
 * ...). {@link #code()} is the server's machine-readable error code, or the client's own.
 */
public class IdmintException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String code;

    /** An error with a machine-readable {@code code} and a message for people. */
    public IdmintException(String code, String message) {
        super(message);
        this.code = code;
    }

    /** The error code: the server's ({@code unknown_tag}, {@code tag_exhausted}, ...) or the client's. */
    public String code() {
        return code;
    }

    /** Whether asking again cannot succeed (the caller's error or a final condition). */
    public boolean isFinal() {
        return true;
    }
}
