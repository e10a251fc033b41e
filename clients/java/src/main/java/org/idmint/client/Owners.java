// Owners: which configured server to ask first for a strict tag's ids. The servers name, on
// every answer of a strict take, themselves (`idmint-node`, as their peers reach them) and the
// tag's owner (`idmint-owner`); any other node forwards each take to the owner, so asking the
// owner directly saves a hop. The client remembers each server's name and each strict tag's
// owner, and picks the server whose name is the owner's while it is up.
//
// A name only ever picks among the servers the client was configured with: a header never
// makes it connect anywhere new. It is a hint: an owner that moved or died costs one attempt,
// after which the call goes on in the usual failover order (every node answers in order).
// Lock-free (an atomic array and a concurrent map); this file makes no call.
package org.idmint.client;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.function.IntPredicate;

/** The servers' names and the strict tags' owners, as the servers told them. */
final class Owners {
    /** What {@link #pick} answers when the usual failover order applies. */
    static final int ANY = -1;

    /** Each configured server's own name (its {@code idmint-node}), null until it gave one. */
    private final AtomicReferenceArray<String> names;
    /** Each strict tag's owner as the servers last named it. */
    private final ConcurrentHashMap<String, String> owners = new ConcurrentHashMap<>();
    /** Spreads the asks that learn names over the servers not named yet. */
    private final AtomicInteger probe = new AtomicInteger();

    Owners(int servers) {
        this.names = new AtomicReferenceArray<>(servers);
    }

    /**
     * The server a take of strict {@code tag} asks first: the owner's if it is up; when the
     * owner named is none of the servers named so far, one that is up and not named yet (its
     * answer names it, so the owner's server is found within a few takes); else {@link #ANY}.
     */
    int pick(String tag, IntPredicate up) {
        String owner = owners.get(tag);
        if (owner == null) {
            return ANY;
        }
        int n = names.length();
        for (int i = 0; i < n; i++) {
            if (owner.equals(names.get(i))) {
                return up.test(i) ? i : ANY;
            }
        }
        int from = Math.floorMod(probe.getAndIncrement(), n);
        for (int k = 0; k < n; k++) {
            int i = (from + k) % n;
            if (names.get(i) == null && up.test(i)) {
                return i;
            }
        }
        return ANY;
    }

    /**
     * Learns from an answer of server {@code server} to a take of strict {@code tag}: the
     * server's name and the tag's owner, each when the answer carries it (null: unchanged).
     */
    void learn(String tag, int server, String node, String owner) {
        if (node != null && !node.equals(names.get(server))) {
            // A name is one server's: a server that moved (a restart) takes it from the other.
            for (int i = 0; i < names.length(); i++) {
                String name = names.get(i);
                if (i != server && node.equals(name)) {
                    names.compareAndSet(i, name, null);
                }
            }
            names.set(server, node);
        }
        if (owner != null && (owners.size() < Limits.STRICT_TAGS_MAX || owners.containsKey(tag))) {
            owners.put(tag, owner);
        }
    }

    /** Forgets {@code tag}'s owner (asking it failed): the next take goes in the usual order. */
    void forget(String tag) {
        owners.remove(tag);
    }
}
