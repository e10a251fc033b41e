// UidTake: times Baidu uid-generator's own `CachedUidGenerator.getUID()` (its RingBuffer and
// BufferPaddingExecutor, compiled from the source directory given to scripts/peers/build) in
// sustained rounds on 1 and 2 threads. Ours: the harness and an in-memory worker-id assigner
// (worker 1; uid-generator's own assigner writes a database row). The generator runs with
// its defaults (28 time bits in seconds, 22 worker bits, 13 sequence bits, boostPower 3 so a
// ring of 65 536 ids, paddingFactor 50, padding on demand, no schedule) except the epoch: the
// default one, 2016-05-20, ran out of 28-bit seconds in 2024 (the cached generator then hands
// out negative ids), so the epoch is 1 January of the current year (UTC). It also keeps
// uid-generator's default rejected-take policy (it throws): a take that throws counts as rejected.
// `--mode default` times `DefaultUidGenerator.getUID()` instead (no ring: one synchronized
// take per id, bounded by 8 192 ids per second).
//
// Run (after the build): java -cp target/peers/uid UidTake [--mode cached|default]
//   [--threads 1,2] [--seconds 2] [--rounds 5] [--warmup 5] [--load-max L]

import com.baidu.fsg.uid.impl.CachedUidGenerator;
import com.baidu.fsg.uid.impl.DefaultUidGenerator;

public final class UidTake {
    public static void main(String[] args) throws Exception {
        String mode = new PeerRounds("uid", args).option("--mode", "cached");
        DefaultUidGenerator generator = switch (mode) {
            case "cached" -> new CachedUidGenerator();
            case "default" -> new DefaultUidGenerator();
            default -> throw new IllegalArgumentException("--mode cached or default");
        };
        generator.setWorkerIdAssigner(() -> 1L);
        generator.setEpochStr(java.time.Year.now(java.time.ZoneOffset.UTC) + "-01-01");
        generator.afterPropertiesSet();
        PeerRounds named = new PeerRounds(mode.equals("cached") ? "uid_cached" : "uid_default", args);
        named.run(() -> {
            try {
                return generator.getUID();
            } catch (RuntimeException rejected) {
                return -1;
            }
        });
        System.exit(0);
    }
}
