// Stand-in for the logging facade's factory: one shared logger with every level off.
package org.slf4j;

public final class LoggerFactory {
    private LoggerFactory() {}

    public static Logger getLogger(Class<?> owner) { return Logger.OFF; }

    public static Logger getLogger(String name) { return Logger.OFF; }
}
