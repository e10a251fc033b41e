// Stand-in: a class name without its package (thread names only).
package org.apache.commons.lang;

public class ClassUtils {
    public static String getShortClassName(String name) {
        return name == null ? "" : name.substring(name.lastIndexOf('.') + 1);
    }
}
