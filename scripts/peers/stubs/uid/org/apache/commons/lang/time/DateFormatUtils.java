// Stand-in: a date as text in a pattern.
package org.apache.commons.lang.time;

import java.text.SimpleDateFormat;
import java.util.Date;

public class DateFormatUtils {
    public static String format(Date date, String pattern) {
        return new SimpleDateFormat(pattern).format(date);
    }
}
