// Stand-in for the date parsing uid-generator inherits (its epoch, "yyyy-MM-dd"): the first
// pattern that parses the whole text wins.
package org.apache.commons.lang.time;

import java.text.ParseException;
import java.text.ParsePosition;
import java.text.SimpleDateFormat;
import java.util.Date;

public class DateUtils {
    public static Date parseDate(String text, String[] patterns) throws ParseException {
        for (String pattern : patterns) {
            SimpleDateFormat format = new SimpleDateFormat(pattern);
            format.setLenient(false);
            ParsePosition at = new ParsePosition(0);
            Date date = format.parse(text, at);
            if (date != null && at.getIndex() == text.length()) {
                return date;
            }
        }
        throw new ParseException("no pattern parses " + text, 0);
    }
}
