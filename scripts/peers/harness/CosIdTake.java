// CosIdTake: times CosId's own segment generators (cosid-core, compiled from the source
// directory given to scripts/peers/build) in sustained rounds on 1 and 2 threads:
// `SegmentChainId.generate()` (its segment chain with prefetching; `--mode chain`, the
// default) or `DefaultSegmentId.generate()` (one segment at a time; `--mode default`). Both
// take their segments from CosId's own in-memory distributor, `IdSegmentDistributor.Atomic`,
// with a step of 1 000 000 (idmint's STEP_MAX, as in idmint's bench), so refills fall inside
// the rounds; the chain keeps CosId's defaults (segments that never expire, safe distance 2,
// its default prefetch worker pool). Ours: the harness only.
//
// Run (after the build): java -cp target/peers/cosid CosIdTake [--mode chain|default]
//   [--threads 1,2] [--seconds 2] [--rounds 5] [--warmup 5] [--load-max L]

import me.ahoo.cosid.segment.DefaultSegmentId;
import me.ahoo.cosid.segment.IdSegmentDistributor;
import me.ahoo.cosid.segment.SegmentChainId;
import me.ahoo.cosid.segment.SegmentId;

public final class CosIdTake {
    static final long STEP = 1_000_000;

    public static void main(String[] args) throws Exception {
        String mode = new PeerRounds("cosid", args).option("--mode", "chain");
        IdSegmentDistributor distributor = new IdSegmentDistributor.Atomic(STEP);
        SegmentId generator = switch (mode) {
            case "chain" -> new SegmentChainId(distributor);
            case "default" -> new DefaultSegmentId(distributor);
            default -> throw new IllegalArgumentException("--mode chain or default");
        };
        new PeerRounds("cosid_" + mode, args).run(generator::generate);
        System.exit(0);
    }
}
