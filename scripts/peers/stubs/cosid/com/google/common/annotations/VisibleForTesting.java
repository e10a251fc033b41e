// Stand-in for a marker annotation; it means nothing at run time.
package com.google.common.annotations;

public @interface VisibleForTesting {}
