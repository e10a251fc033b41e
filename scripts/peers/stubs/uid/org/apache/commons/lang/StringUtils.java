// Stand-in for the two string checks uid-generator calls.
package org.apache.commons.lang;

public class StringUtils {
    public static boolean isBlank(String text) {
        return text == null || text.trim().isEmpty();
    }

    public static boolean isNotBlank(String text) {
        return !isBlank(text);
    }
}
