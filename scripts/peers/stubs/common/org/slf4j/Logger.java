// Stand-in for the logging facade the peers call (idmint's benchmarks, scripts/peers/build):
// every level is off, so a log call costs what a disabled level costs, a method call that
// does nothing. Only the overloads the compiled peer classes call are here.
package org.slf4j;

public final class Logger {
    static final Logger OFF = new Logger();

    private Logger() {}

    public boolean isTraceEnabled() { return false; }
    public boolean isDebugEnabled() { return false; }
    public boolean isInfoEnabled() { return false; }
    public boolean isWarnEnabled() { return false; }
    public boolean isErrorEnabled() { return false; }

    public void trace(String message) {}
    public void trace(String format, Object arg) {}
    public void trace(String format, Object first, Object second) {}
    public void trace(String format, Object... args) {}
    public void trace(String message, Throwable error) {}

    public void debug(String message) {}
    public void debug(String format, Object arg) {}
    public void debug(String format, Object first, Object second) {}
    public void debug(String format, Object... args) {}
    public void debug(String message, Throwable error) {}

    public void info(String message) {}
    public void info(String format, Object arg) {}
    public void info(String format, Object first, Object second) {}
    public void info(String format, Object... args) {}
    public void info(String message, Throwable error) {}

    public void warn(String message) {}
    public void warn(String format, Object arg) {}
    public void warn(String format, Object first, Object second) {}
    public void warn(String format, Object... args) {}
    public void warn(String message, Throwable error) {}

    public void error(String message) {}
    public void error(String format, Object arg) {}
    public void error(String format, Object first, Object second) {}
    public void error(String format, Object... args) {}
    public void error(String message, Throwable error) {}
}
