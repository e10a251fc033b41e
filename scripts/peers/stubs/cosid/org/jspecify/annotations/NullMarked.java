// Stand-in for a nullness annotation on scopes; it means nothing at run time.
package org.jspecify.annotations;

public @interface NullMarked {}
