// JavaClientTake: times idmint's Java client taking ids from its local ranges, and the floor
// beside it, in PeerRounds' sustained rounds on 1 and 2 threads (scripts/bench-java runs it).
//
//   --mode atomic   a bare AtomicLong.incrementAndGet() (the floor: one shared atomic add)
//   --mode name     IdmintClient.nextId(tag), the tag named per call (as TinyId.nextId is)
//   --mode handle   TagIds.nextId() on a handle of the tag
//
// Run: java -cp CLASSES JavaClientTake --mode name --server http://HOST:PORT --tag bench
//   [--threads 1,2] [--seconds 2] [--rounds 5] [--warmup 5] [--load-max L]
// Not part of the library: compiled with it by scripts/bench-java, never packaged.

import java.util.concurrent.atomic.AtomicLong;
import org.idmint.client.IdmintClient;
import org.idmint.client.TagIds;

public final class JavaClientTake {
    public static void main(String[] args) throws Exception {
        PeerRounds options = new PeerRounds("options", args);
        String mode = options.option("--mode", "name");
        String server = options.option("--server", "http://127.0.0.1:8080");
        String tag = options.option("--tag", "bench");
        switch (mode) {
            case "atomic": {
                AtomicLong counter = new AtomicLong();
                new PeerRounds("atomiclong", args).run(counter::incrementAndGet);
                break;
            }
            case "name": {
                IdmintClient client = IdmintClient.builder().endpoints(server).build();
                new PeerRounds("idmint_java_by_name", args).run(() -> client.nextId(tag));
                client.close();
                break;
            }
            case "handle": {
                IdmintClient client = IdmintClient.builder().endpoints(server).build();
                TagIds ids = client.tag(tag);
                new PeerRounds("idmint_java_handle", args).run(ids::nextId);
                client.close();
                break;
            }
            default:
                throw new IllegalArgumentException("--mode atomic, name or handle");
        }
        System.exit(0);
    }
}
