// LeafTake: times Meituan Leaf's own `SegmentIDGenImpl.get(key)` (leaf-core, compiled from the
// source directory given to scripts/peers/build) in sustained rounds on 1 and 2 threads.
// Ours: the harness and an in-memory stand-in for Leaf's data access (one row per tag,
// `max_id += step` under a lock, as Leaf's `UPDATE leaf_alloc SET max_id = max_id + step`).
// The row's step is 1 000 000 (Leaf's MAX_STEP, idmint's STEP_MAX), so Leaf's adaptive step
// stays there and refills fall inside the rounds as they do in idmint's bench.
//
// Run (after the build): java -cp target/peers/leaf LeafTake [--threads 1,2] [--seconds 2]
//   [--rounds 5] [--warmup 5] [--load-max L]; output as PeerRounds describes, peer=leaf.

import com.sankuai.inf.leaf.common.Result;
import com.sankuai.inf.leaf.common.Status;
import com.sankuai.inf.leaf.segment.SegmentIDGenImpl;
import com.sankuai.inf.leaf.segment.dao.IDAllocDao;
import com.sankuai.inf.leaf.segment.model.LeafAlloc;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

public final class LeafTake {
    static final String KEY = "bench";
    static final int STEP = 1_000_000;

    /** Leaf's table as a map: tag -> {max_id, step}; each allocation under one lock. */
    static final class MemoryAllocDao implements IDAllocDao {
        private final Map<String, long[]> rows = new HashMap<>();

        MemoryAllocDao(String tag, int step) {
            rows.put(tag, new long[] {1, step});
        }

        @Override
        public synchronized List<LeafAlloc> getAllLeafAllocs() {
            List<LeafAlloc> all = new ArrayList<>();
            for (String tag : rows.keySet()) {
                all.add(answer(tag, rows.get(tag)[1]));
            }
            return all;
        }

        @Override
        public synchronized LeafAlloc updateMaxIdAndGetLeafAlloc(String tag) {
            long[] row = rows.get(tag);
            row[0] += row[1];
            return answer(tag, (int) row[1]);
        }

        @Override
        public synchronized LeafAlloc updateMaxIdByCustomStepAndGetLeafAlloc(LeafAlloc asked) {
            long[] row = rows.get(asked.getKey());
            row[0] += asked.getStep();
            return answer(asked.getKey(), (int) row[1]);
        }

        @Override
        public synchronized List<String> getAllTags() {
            return new ArrayList<>(rows.keySet());
        }

        private LeafAlloc answer(String tag, long step) {
            LeafAlloc alloc = new LeafAlloc();
            alloc.setKey(tag);
            alloc.setMaxId(rows.get(tag)[0]);
            alloc.setStep((int) step);
            return alloc;
        }
    }

    public static void main(String[] args) throws Exception {
        PeerRounds rounds = new PeerRounds("leaf", args);
        SegmentIDGenImpl leaf = new SegmentIDGenImpl();
        leaf.setDao(new MemoryAllocDao(KEY, STEP));
        if (!leaf.init()) {
            throw new IllegalStateException("Leaf did not initialise");
        }
        String key = KEY;
        rounds.run(() -> {
            Result result = leaf.get(key);
            return result.getStatus() == Status.SUCCESS ? result.getId() : -1;
        });
        System.exit(0);
    }
}
