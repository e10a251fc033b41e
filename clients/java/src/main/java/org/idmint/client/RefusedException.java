// RefusedException: the servers refused the call for a reason every server shares (409 and
// the like): a formatted tag, a changed format key, a tag the store cannot hold, ...
package org.idmint.client;

/** The servers refused for a reason another server would share; the message names the fix. */
public final class RefusedException extends IdmintException {
    private static final long serialVersionUID = 1L;

    /** Refused with the server's {@code code} and {@code message}. */
    public RefusedException(String code, String message) {
        super(code, "refused (" + code + "): " + message);
    }
}
