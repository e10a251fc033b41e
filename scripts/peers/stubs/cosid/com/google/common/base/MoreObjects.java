// Stand-in for a toString() builder (log text only): "Name{key=value, ...}".
package com.google.common.base;

public final class MoreObjects {
    private MoreObjects() {}

    public static ToStringHelper toStringHelper(Object owner) {
        return new ToStringHelper(owner.getClass().getSimpleName());
    }

    public static final class ToStringHelper {
        private final StringBuilder text;
        private String separator = "";

        ToStringHelper(String name) {
            text = new StringBuilder(name).append('{');
        }

        public ToStringHelper add(String name, Object value) {
            text.append(separator).append(name).append('=').append(value);
            separator = ", ";
            return this;
        }

        public ToStringHelper add(String name, long value) {
            return add(name, (Object) value);
        }

        @Override
        public String toString() {
            return text + "}";
        }
    }
}
