// Stand-in for a marker annotation; it means nothing at run time.
package com.google.errorprone.annotations.concurrent;

public @interface GuardedBy {
    String value();
}
