// Stand-in for a nullness annotation on types; it means nothing at run time.
package org.jspecify.annotations;

import java.lang.annotation.ElementType;
import java.lang.annotation.Target;

@Target(ElementType.TYPE_USE)
public @interface Nullable {}
