// AccessDeniedException: the server wants a bearer token the call did not carry (401), or the
// token is not one the tag accepts (403).
package org.idmint.client;

/** No token, or a token the tag does not accept ({@code unauthorized} / {@code forbidden}). */
public final class AccessDeniedException extends IdmintException {
    private static final long serialVersionUID = 1L;

    /** Denied with the server's {@code code} and {@code message}. */
    public AccessDeniedException(String code, String message) {
        super(code, message + "; give the tag's client token with IdmintClient.builder().token(...)");
    }
}
