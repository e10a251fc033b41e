// ClientClosedException: the client was closed; it hands out no more ids.
package org.idmint.client;

/** The client was closed ({@link IdmintClient#close()}); build a new one to take more ids. */
public final class ClientClosedException extends IdmintException {
    private static final long serialVersionUID = 1L;

    /** The client is closed. */
    public ClientClosedException() {
        super("closed", "the idmint client is closed; build a new one to take more ids");
    }
}
