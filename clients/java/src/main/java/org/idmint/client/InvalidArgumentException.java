// InvalidArgumentException: a tag name, count or setting out of range, refused by the client
// before any call or by the server (400).
package org.idmint.client;

/** A bad tag name, count or client setting; the message says what is accepted. */
public final class InvalidArgumentException extends IdmintException {
    private static final long serialVersionUID = 1L;

    /** Refused with {@code code} ({@code bad_tag}, {@code bad_count}, ...) and {@code message}. */
    public InvalidArgumentException(String code, String message) {
        super(code, message);
    }
}
