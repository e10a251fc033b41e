// Stand-in for a marker annotation; it means nothing at run time.
package com.google.errorprone.annotations;

public @interface Immutable {}
