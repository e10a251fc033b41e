// Stand-in for the logging flavour of the timing helper; see org.perf4j.StopWatch here.
package org.perf4j.slf4j;

public class Slf4JStopWatch extends org.perf4j.StopWatch {}
