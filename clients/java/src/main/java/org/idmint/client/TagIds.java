// TagIds: a handle on one tag's ids, for the hot path: no lookup by name per id. The handle is
// the tag's buffer itself (TagBuffer extends it), so a take goes from the handle straight to
// the tag's current range.
package org.idmint.client;

import java.util.OptionalLong;

/**
 * One tag's ids without a lookup by name per id; from {@link IdmintClient#tag(String)}.
 * Thread-safe. Not for subclassing (its constructor is not public).
 */
public abstract class TagIds {
    TagIds() {
    }

    /** The tag. */
    public abstract String tag();

    /** The next id; as {@link IdmintClient#nextId(String)}. */
    public abstract long nextId();

    /** {@code count} ids, increasing; as {@link IdmintClient#nextIds(String, int)}. */
    public abstract long[] nextIds(int count);

    /** The next id if one is in local memory now; never blocks (as {@link IdmintClient#tryNextId(String)}). */
    public abstract OptionalLong tryNextId();
}
