// Stand-in for toString() helpers (log text only): the class's simple name.
package org.apache.commons.lang.builder;

public class ReflectionToStringBuilder {
    public static String toString(Object value, ToStringStyle style) {
        return value.getClass().getSimpleName();
    }
}
