// UnavailableException: no server answered with ids within the bounds (down, unreachable,
// slow, shutting down, its store unavailable). Nothing was guessed; asking later may succeed.
package org.idmint.client;

/**
 * No server answered within the client's bounds. {@link #reason()} says what each server
 * answered or why it did not (the server's own reason when it gave one). Retryable.
 */
public final class UnavailableException extends IdmintException {
    private static final long serialVersionUID = 1L;

    private final String reason;

    /** Unavailable because of {@code reason}. */
    public UnavailableException(String reason) {
        super("unavailable", "idmint unavailable: " + reason);
        this.reason = reason;
    }

    /** What went wrong, per server, for the operator. */
    public String reason() {
        return reason;
    }

    @Override
    public boolean isFinal() {
        return false;
    }
}
