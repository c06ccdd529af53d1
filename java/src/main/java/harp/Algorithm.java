package harp;

/**
 * Algorithm choices for the collectives that have several. Each constant's {@code wireName()}
 * is the engine's name for it (the engine parses it; no numeric codes cross the boundary).
 */
public final class Algorithm {
  private Algorithm() {}

  /** Broadcast algorithms. */
  public enum Broadcast {
    /**
     * The default: binomial tree for small tables (latency), pipelined chain for large ones; with
     * a network model (harp.net.model, harp.net.measure) the candidate of least predicted time,
     * the network-aware ones included.
     */
    AUTO("auto"),
    /** Pipelined chain in rack order (≈ n/B whatever the number of workers). */
    CHAIN("chain"),
    /** Binomial tree. */
    BINOMIAL("binomial"),
    /** The root sends to each worker in turn (the papers' baseline). */
    ONE_BY_ONE("one-by-one"),
    /** Network model: pipelined chain in the order whose slowest link is fastest (else CHAIN). */
    NET_CHAIN("net-chain"),
    /** Network model: pipelined chain over the network performance hierarchy (else CHAIN). */
    NET_HIERARCHY("net-hierarchy"),
    /** Network model: pipelined over the spanning tree of least predicted time (else CHAIN). */
    NET_TREE("net-tree"),
    /**
     * Scatter-allgather (van de Geijn): the root scatters p segments, then a ring allgathers
     * them (≈ 2(p−1)/p · n/B; a candidate of AUTO only with a network model).
     */
    SCATTER_ALLGATHER("scatter-allgather");

    private final String wireName;

    Broadcast(String wireName) {
      this.wireName = wireName;
    }

    public String wireName() {
      return wireName;
    }
  }

  /** Allreduce algorithms. */
  public enum Allreduce {
    /** Bidirectional exchange for small tables, regroup-allgather for large ones (16 KiB crossover, {@code harp.allreduce.crossover.bytes}, growing with the worker count above 8): bidirectional exchange while every worker's table is below it, regroup-allgather as soon as any worker's is not; the workers agree on this, so tables may differ in size. */
    AUTO("auto"),
    /** Recursive doubling. */
    BIDIRECTIONAL_EXCHANGE("bidirectional-exchange"),
    /** Reduce-scatter of segments plus allgather. */
    REGROUP_ALLGATHER("regroup-allgather");

    private final String wireName;

    Allreduce(String wireName) {
      this.wireName = wireName;
    }

    public String wireName() {
      return wireName;
    }
  }

  /** Reduce algorithms. */
  public enum Reduce {
    /**
     * Without a network model (harp.net.model, harp.net.measure) BINARY; with one, the workers
     * agree on the largest table (a few small messages) and run the algorithm of least predicted
     * cost. The default.
     */
    AUTO("auto"),
    /** Binomial tree toward the root. */
    BINOMIAL("binomial"),
    /**
     * Binary tree toward the root, pipelined in chunks: every worker receives at most two
     * streams, so back-to-back reduces of small tables go faster than binomial (one call takes
     * about one message longer), and large tables take about two table transfers, not log2 p.
     */
    BINARY("binary"),
    /** Segment reduce-scatter (ring), then every owner sends its segments to the root. */
    SCATTER_GATHER("scatter-gather"),
    /** Network model: group leaders reduce level by level along the hierarchy (else BINOMIAL). */
    NET_HIERARCHY("net-hierarchy"),
    /** Network model: scatter-gather around the ring whose slowest link is fastest. */
    NET_RING("net-ring"),
    /**
     * Pipelined along the broadcast chain (rack order from the root): about one table transfer
     * for a large table, p - 1 message latencies for a small one.
     */
    CHAIN("chain"),
    /** Network model: pipelined along the chain whose slowest link is fastest (else CHAIN). */
    NET_CHAIN("net-chain");

    private final String wireName;

    Reduce(String wireName) {
      this.wireName = wireName;
    }

    public String wireName() {
      return wireName;
    }
  }
}
