// TinyidTake: times Didi Tinyid's own client, `TinyId.nextId(bizType)` (tinyid-client with
// tinyid-base's CachedIdGenerator and SegmentId, compiled from the source directory given to
// scripts/peers/build), in sustained rounds on 1 and 2 threads.
//
// `--source http` (the default): the client as shipped. It reads `tinyid_client.properties`
// from the class path (`tinyid.server=HOST:PORT`, `tinyid.token=TOKEN`) and fetches its
// segments over HTTP from `/tinyid/id/nextSegmentIdSimple`, from a Tinyid server or from
// idmint's Tinyid routes (scripts/bench-client runs it that way). `--source memory`: the
// same CachedIdGenerator fed by an in-memory segment source of ours instead (a segment of
// `--step` ids, its loading mark at 20 % as Tinyid's server sets it), to see the client's
// own cost without the network. `--biz NAME` names the biz type (default: bench).
//
// Run (after the build): java -cp DIR_WITH_PROPERTIES:target/peers/tinyid TinyidTake
//   [--source http|memory] [--biz bench] [--step 1000000] [--threads 1,2] [--seconds 2]
//   [--rounds 5] [--warmup 5] [--load-max L]

import com.xiaoju.uemc.tinyid.base.entity.SegmentId;
import com.xiaoju.uemc.tinyid.base.generator.IdGenerator;
import com.xiaoju.uemc.tinyid.base.generator.impl.CachedIdGenerator;
import com.xiaoju.uemc.tinyid.base.service.SegmentIdService;
import com.xiaoju.uemc.tinyid.client.utils.TinyId;
import java.util.concurrent.atomic.AtomicLong;

public final class TinyidTake {
    /** Segments of `step` ids from a counter: what Tinyid's server hands out, minus the wire. */
    static final class MemorySegments implements SegmentIdService {
        private final long step;
        private long maxId;

        MemorySegments(long step) {
            this.step = step;
        }

        @Override
        public synchronized SegmentId getNextSegmentId(String bizType) {
            long current = maxId;
            maxId += step;
            SegmentId segment = new SegmentId();
            segment.setCurrentId(new AtomicLong(current));
            segment.setLoadingId(current + step * 20 / 100);
            segment.setMaxId(maxId);
            segment.setDelta(1);
            segment.setRemainder(0);
            return segment;
        }
    }

    public static void main(String[] args) throws Exception {
        PeerRounds options = new PeerRounds("tinyid", args);
        String source = options.option("--source", "http");
        String biz = options.option("--biz", "bench");
        long step = Long.parseLong(options.option("--step", "1000000"));
        PeerRounds rounds = new PeerRounds("tinyid_" + source, args);
        switch (source) {
            case "http" -> rounds.run(() -> TinyId.nextId(biz));
            case "memory" -> {
                IdGenerator generator = new CachedIdGenerator(biz, new MemorySegments(step));
                rounds.run(generator::nextId);
            }
            default -> throw new IllegalArgumentException("--source http or memory");
        }
        System.exit(0);
    }
}
