// Stand-in: fills each `%s` of a message template with the next argument.
package com.google.common.base;

public final class Strings {
    private Strings() {}

    public static String lenientFormat(String template, Object... args) {
        StringBuilder out = new StringBuilder();
        int from = 0;
        for (Object arg : args == null ? new Object[0] : args) {
            int at = template.indexOf("%s", from);
            if (at < 0) {
                break;
            }
            out.append(template, from, at).append(arg);
            from = at + 2;
        }
        return out.append(template.substring(from)).toString();
    }
}
