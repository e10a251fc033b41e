// ExhaustedTagException: the tag's ids are spent (409 tag_exhausted): its next range would pass
// the largest id, 2^63-1. A final condition, never a retryable one.
package org.idmint.client;

/** The tag has no more ids (its next range would pass 2^63-1). Final: take ids of a new tag. */
public final class ExhaustedTagException extends IdmintException {
    private static final long serialVersionUID = 1L;

    private final String tag;

    /** The tag {@code tag} is spent; {@code message} is the server's. */
    public ExhaustedTagException(String tag, String message) {
        super("tag_exhausted", message);
        this.tag = tag;
    }

    /** The tag asked for. */
    public String tag() {
        return tag;
    }
}
