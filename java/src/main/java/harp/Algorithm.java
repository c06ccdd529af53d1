package harp;

/**
 * Algorithm choices for the collectives that have several. Each constant's {@code wireName()}
 * is the engine's name for it (the engine parses it; no numeric codes cross the boundary).
 */
public final class Algorithm {
  private Algorithm() {}

  /** Broadcast algorithms. */
  public enum Broadcast {
    /** The default: binomial tree for small tables (latency), pipelined chain for large ones. */
    AUTO("auto"),
    /** Pipelined chain in rack order (≈ n/B whatever the number of workers). */
    CHAIN("chain"),
    /** Binomial tree. */
    BINOMIAL("binomial"),
    /** The root sends to each worker in turn (the papers' baseline). */
    ONE_BY_ONE("one-by-one");

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
    /** Bidirectional exchange for small tables, regroup-allgather for large ones (16 KiB crossover, {@code harp.allreduce.crossover.bytes}; tables of equal size on all workers). */
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
     * Without a network model (harp.net.model, harp.net.measure) binomial; with one, the workers
     * agree on the largest table (a few small messages) and run the algorithm of least predicted
     * cost. The default.
     */
    AUTO("auto"),
    /** Binomial tree toward the root. */
    BINOMIAL("binomial"),
    /**
     * Binary tree toward the root: every worker receives at most two tables, so back-to-back
     * reduces of small tables go faster; one call takes about one message longer than binomial.
     */
    BINARY("binary"),
    /** Segment reduce-scatter (ring), then every owner sends its segments to the root. */
    SCATTER_GATHER("scatter-gather");

    private final String wireName;

    Reduce(String wireName) {
      this.wireName = wireName;
    }

    public String wireName() {
      return wireName;
    }
  }
}
