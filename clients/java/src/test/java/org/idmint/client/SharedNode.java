// SharedNode: one SQLite node shared by the test classes that need a plain server and do not
// stop it (uniqueness, errors, passthrough, the OpenAPI contract), started once per test JVM
// and stopped when the JVM exits.
package org.idmint.client;

/** The shared SQLite node. */
final class SharedNode {
    private static Node node;

    private SharedNode() {}

    /** The node, started on first use. */
    static synchronized Node get() {
        if (node == null) {
            node = Node.sqlite();
            Node started = node;
            Runtime.getRuntime().addShutdownHook(new Thread(started::close));
        }
        return node;
    }
}
