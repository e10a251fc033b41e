// Stand-in: the one style constant the peers name; the text it gives is ours.
package org.apache.commons.lang.builder;

public class ToStringStyle {
    public static final ToStringStyle SHORT_PREFIX_STYLE = new ToStringStyle();
}
