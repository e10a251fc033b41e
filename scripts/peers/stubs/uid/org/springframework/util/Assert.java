// Stand-in for the argument checks the peers call: a failed check throws
// IllegalArgumentException with the given message, as the original does.
package org.springframework.util;

public abstract class Assert {
    public static void isTrue(boolean condition, String message) {
        if (!condition) {
            throw new IllegalArgumentException(message);
        }
    }

    public static void notNull(Object value, String message) {
        if (value == null) {
            throw new IllegalArgumentException(message);
        }
    }
}
