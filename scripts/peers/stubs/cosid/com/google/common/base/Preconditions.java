// Stand-in for the argument checks CosId's segment classes make when they are built: a failed
// check throws IllegalArgumentException / NullPointerException, as the original does.
package com.google.common.base;

public final class Preconditions {
    private Preconditions() {}

    public static void checkArgument(boolean condition) {
        if (!condition) {
            throw new IllegalArgumentException();
        }
    }

    public static void checkArgument(boolean condition, Object message) {
        if (!condition) {
            throw new IllegalArgumentException(String.valueOf(message));
        }
    }

    public static void checkArgument(boolean condition, String template, Object... args) {
        if (!condition) {
            throw new IllegalArgumentException(Strings.lenientFormat(template, args));
        }
    }

    public static <T> T checkNotNull(T value, Object message) {
        if (value == null) {
            throw new NullPointerException(String.valueOf(message));
        }
        return value;
    }
}
