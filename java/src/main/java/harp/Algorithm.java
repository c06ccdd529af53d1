package harp;

/** Algorithm choices for the collectives that have several. */
public final class Algorithm {
  private Algorithm() {}

  /** Broadcast algorithms. */
  public enum Broadcast {
    /** The default: binomial tree for small tables (latency), pipelined chain for large ones. */
    AUTO(0),
    /** Pipelined chain in rack order (≈ n/B whatever the number of workers). */
    CHAIN(1),
    /** Binomial tree. */
    BINOMIAL(2),
    /** The root sends to each worker in turn (the papers' baseline). */
    ONE_BY_ONE(3);

    final int code;

    Broadcast(int code) {
      this.code = code;
    }
  }

  /** Allreduce algorithms. */
  public enum Allreduce {
    /** Bidirectional exchange for small tables, regroup-allgather for large ones (16 KiB crossover, {@code harp.allreduce.crossover.bytes}; tables of equal size on all workers). */
    AUTO(0),
    /** Recursive doubling. */
    BIDIRECTIONAL_EXCHANGE(1),
    /** Reduce-scatter of segments plus allgather. */
    REGROUP_ALLGATHER(2);

    final int code;

    Allreduce(int code) {
      this.code = code;
    }
  }

  /** Reduce algorithms. */
  public enum Reduce {
    BINOMIAL(1), SCATTER_GATHER(2);

    final int code;

    Reduce(int code) {
      this.code = code;
    }
  }
}
