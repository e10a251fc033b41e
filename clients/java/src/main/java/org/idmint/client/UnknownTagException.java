// UnknownTagException: the servers do not know the tag (404 unknown_tag). Final until the tag
// is created; the client asks again on the next call, so a tag created a moment ago works.
package org.idmint.client;

/** The tag does not exist on the servers; create it ({@code idmint tag create TAG}). */
public final class UnknownTagException extends IdmintException {
    private static final long serialVersionUID = 1L;

    private final String tag;

    /** The tag {@code tag} is unknown; {@code message} is the server's. */
    public UnknownTagException(String tag, String message) {
        super("unknown_tag", message);
        this.tag = tag;
    }

    /** The tag asked for. */
    public String tag() {
        return tag;
    }
}
