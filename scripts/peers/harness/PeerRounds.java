// PeerRounds: the timing loop every peer harness here shares (idmint's benchmarks against the
// real peers, scripts/peers/README.md). It holds no peer code: a harness hands it a `Taker`
// that calls the peer's own take once, and this runs that take in sustained rounds.
//
// Per thread count: an untimed warm-up (so the JIT has compiled the take), then timed rounds
// of at least `--seconds` each; every round starts fresh threads behind a latch, each thread
// takes in batches and reads the clock between batches. A round line records the ids, the
// rate, the rejected takes (a take that threw or answered an error), the ids that were not
// above the thread's previous id (a harness check: 0 for every peer here), the load average
// at the round's end and the takers' CPU time over their wall time. A round whose 1-minute
// load is above `--load-max` is flagged noisy and left out of the median (all rounds count
// when every one was noisy, and the summary says so). Output, one line each:
//   round peer=P threads=T n=N seconds=S ids=I ids_per_s=R rejected=J not_increasing=K load1=L cpu_share=C noisy=0|1
//   summary peer=P threads=T rounds=N kept=M median_ids_per_s=R min=A max=B rejected=J all_noisy=0|1

import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;

public final class PeerRounds {
    /** One take of the peer's generator; a negative answer is a rejected take. */
    public interface Taker {
        long take();
    }

    /** Takes between two clock reads. */
    static final int BATCH = 4096;

    public final String peer;
    public int[] threads = {1, 2};
    public double seconds = 2.0;
    public int rounds = 5;
    public double warmupSeconds = 5.0;
    public double loadMax = Runtime.getRuntime().availableProcessors() + 1.0;
    /** Arguments not read here, for the harness (`--name value` pairs and flags). */
    public final List<String> rest = new ArrayList<>();

    private static volatile long sink;

    /** Reads `--threads 1,2 --seconds S --rounds N --warmup S --load-max L`; keeps the rest. */
    public PeerRounds(String peer, String[] args) {
        this.peer = peer;
        for (int i = 0; i < args.length; i++) {
            String value = i + 1 < args.length ? args[i + 1] : "";
            switch (args[i]) {
                case "--threads" -> threads = Arrays.stream(value.split(",")).mapToInt(Integer::parseInt).toArray();
                case "--seconds" -> seconds = Double.parseDouble(value);
                case "--rounds" -> rounds = Integer.parseInt(value);
                case "--warmup" -> warmupSeconds = Double.parseDouble(value);
                case "--load-max" -> loadMax = Double.parseDouble(value);
                default -> {
                    rest.add(args[i]);
                    continue;
                }
            }
            i++;
        }
    }

    /** The value after `name` among the harness's own arguments, or `otherwise`. */
    public String option(String name, String otherwise) {
        int at = rest.indexOf(name);
        return at >= 0 && at + 1 < rest.size() ? rest.get(at + 1) : otherwise;
    }

    /** Runs the warm-up and the rounds on each thread count; prints round and summary lines. */
    public void run(Taker taker) throws InterruptedException {
        for (int t : threads) {
            once(taker, t, warmupSeconds);
            double[] rates = new double[rounds];
            boolean[] noisy = new boolean[rounds];
            long rejected = 0;
            for (int n = 0; n < rounds; n++) {
                Round r = once(taker, t, seconds);
                double load = load1();
                rates[n] = r.ids / r.seconds;
                noisy[n] = load > loadMax;
                rejected += r.rejected;
                System.out.printf("round peer=%s threads=%d n=%d seconds=%.3f ids=%d ids_per_s=%.0f rejected=%d "
                        + "not_increasing=%d load1=%.2f cpu_share=%.2f noisy=%d%n",
                        peer, t, n + 1, r.seconds, r.ids, rates[n], r.rejected, r.notIncreasing, load,
                        r.cpuSeconds / (r.seconds * t), noisy[n] ? 1 : 0);
            }
            List<Double> kept = new ArrayList<>();
            for (int n = 0; n < rounds; n++) {
                if (!noisy[n]) {
                    kept.add(rates[n]);
                }
            }
            boolean allNoisy = kept.isEmpty();
            if (allNoisy) {
                for (double rate : rates) {
                    kept.add(rate);
                }
            }
            double[] sorted = kept.stream().mapToDouble(Double::doubleValue).sorted().toArray();
            int k = sorted.length;
            double median = k % 2 == 1 ? sorted[k / 2] : (sorted[k / 2 - 1] + sorted[k / 2]) / 2;
            System.out.printf("summary peer=%s threads=%d rounds=%d kept=%d median_ids_per_s=%.0f min=%.0f max=%.0f "
                    + "rejected=%d all_noisy=%d%n",
                    peer, t, rounds, allNoisy ? 0 : k, median, sorted[0], sorted[k - 1], rejected, allNoisy ? 1 : 0);
            System.out.flush();
        }
        if (sink == 42) {
            System.out.println();
        }
    }

    /** What one round measured, summed over its threads. */
    static final class Round {
        long ids, rejected, notIncreasing;
        double seconds, cpuSeconds;
    }

    static Round once(Taker taker, int threads, double seconds) throws InterruptedException {
        ThreadMXBean mx = ManagementFactory.getThreadMXBean();
        Round total = new Round();
        CountDownLatch ready = new CountDownLatch(threads);
        CountDownLatch go = new CountDownLatch(1);
        long nanos = (long) (seconds * 1e9);
        long[][] results = new long[threads][];
        Thread[] workers = new Thread[threads];
        for (int w = 0; w < threads; w++) {
            final int slot = w;
            workers[w] = new Thread(() -> {
                ready.countDown();
                try {
                    go.await();
                } catch (InterruptedException e) {
                    return;
                }
                long cpuStart = mx.getCurrentThreadCpuTime();
                long start = System.nanoTime();
                long deadline = start + nanos;
                long ids = 0, rejected = 0, notIncreasing = 0, last = Long.MIN_VALUE, acc = 0, now;
                do {
                    for (int i = 0; i < BATCH; i++) {
                        long id = taker.take();
                        if (id < 0) {
                            rejected++;
                            continue;
                        }
                        if (id <= last) {
                            notIncreasing++;
                        }
                        last = id;
                        acc += id;
                        ids++;
                    }
                    now = System.nanoTime();
                } while (now < deadline);
                sink += acc;
                results[slot] = new long[] {ids, rejected, notIncreasing, now - start,
                        mx.getCurrentThreadCpuTime() - cpuStart};
            }, "taker-" + w);
            workers[w].start();
        }
        ready.await();
        go.countDown();
        long wallMax = 0;
        for (int w = 0; w < threads; w++) {
            workers[w].join();
            total.ids += results[w][0];
            total.rejected += results[w][1];
            total.notIncreasing += results[w][2];
            wallMax = Math.max(wallMax, results[w][3]);
            total.cpuSeconds += results[w][4] / 1e9;
        }
        total.seconds = wallMax / 1e9;
        return total;
    }

    /** The 1-minute load average (as `uptime` prints it), or -1 where /proc is absent. */
    static double load1() {
        try {
            return Double.parseDouble(Files.readString(Path.of("/proc/loadavg")).split(" ")[0]);
        } catch (Exception e) {
            return -1;
        }
    }
}
