// TagIds: a handle on one tag's ids, for the hot path: no lookup by name per id.
package org.idmint.client;

import java.util.OptionalLong;

/** One tag's ids without a lookup by name per id; from {@link IdmintClient#tag(String)}. Thread-safe. */
public final class TagIds {
    private final IdmintClient client;
    private final TagBuffer buffer;

    TagIds(IdmintClient client, TagBuffer buffer) {
        this.client = client;
        this.buffer = buffer;
    }

    /** The tag. */
    public String tag() {
        return buffer.tag;
    }

    /** The next id; as {@link IdmintClient#nextId(String)}. */
    public long nextId() {
        long id = buffer.take();
        return id != TagBuffer.NONE ? id : client.nextIdWaiting(buffer.tag);
    }

    /** {@code count} ids, increasing; as {@link IdmintClient#nextIds(String, int)}. */
    public long[] nextIds(int count) {
        return client.nextIds(buffer.tag, count);
    }

    /** The next id if one is in local memory now; never blocks (as {@link IdmintClient#tryNextId(String)}). */
    public OptionalLong tryNextId() {
        long id = buffer.take();
        return id == TagBuffer.NONE ? OptionalLong.empty() : OptionalLong.of(id);
    }
}
