package harp;

/**
 * The options of one collective call (the engine's {@code harp::Opts}): the root of a rooted
 * collective (broadcast, reduce, gather, scatter), the algorithm and, for allgather, the known
 * total number of partitions. Every option has a default (root 0, the automatic algorithm), so
 * {@code allreduce(label, t)} needs none; a call that chooses one passes a value built from
 * {@link #defaults()}, e.g.
 * {@code allreduce("sums", t, Options.defaults().algorithm(Algorithm.Allreduce.REGROUP_ALLGATHER))}
 * or {@code broadcast("model", t, Options.defaults().root(2).algorithm(Algorithm.Broadcast.CHAIN))}.
 * Each collective reads only its own option (a broadcast reads its broadcast algorithm). Values
 * are immutable: each method returns a new one.
 */
public final class Options {
  private static final Options DEFAULTS =
      new Options(0, Algorithm.Broadcast.AUTO, Algorithm.Reduce.AUTO, Algorithm.Allreduce.AUTO, 0);

  /** The rank (of the job or the group) a rooted collective starts from or ends at. */
  final int root;
  final Algorithm.Broadcast broadcast;
  final Algorithm.Reduce reduce;
  final Algorithm.Allreduce allreduce;
  /** Allgather: the total number of partitions on all workers together; 0 when unknown. */
  final int totalPartitions;

  private Options(int root, Algorithm.Broadcast broadcast, Algorithm.Reduce reduce, Algorithm.Allreduce allreduce,
      int totalPartitions) {
    this.root = root;
    this.broadcast = broadcast;
    this.reduce = reduce;
    this.allreduce = allreduce;
    this.totalPartitions = totalPartitions;
  }

  /** Every option at its default: the automatic algorithm of every collective. */
  public static Options defaults() {
    return DEFAULTS;
  }

  /** A rooted collective starts from or ends at {@code root} (a rank of the job or the group). */
  public Options root(int root) {
    return new Options(root, broadcast, reduce, allreduce, totalPartitions);
  }

  /** A broadcast runs {@code a}. */
  public Options algorithm(Algorithm.Broadcast a) {
    return new Options(root, nonNull(a), reduce, allreduce, totalPartitions);
  }

  /** A reduce runs {@code a}. */
  public Options algorithm(Algorithm.Reduce a) {
    return new Options(root, broadcast, nonNull(a), allreduce, totalPartitions);
  }

  /** An allreduce runs {@code a}. */
  public Options algorithm(Algorithm.Allreduce a) {
    return new Options(root, broadcast, reduce, nonNull(a), totalPartitions);
  }

  /**
   * An allgather knows the total number of partitions on all workers together (positive) and
   * pipelines them one by one.
   */
  public Options totalPartitions(int n) {
    if (n <= 0) {
      throw new IllegalArgumentException("total partitions must be positive");
    }
    return new Options(root, broadcast, reduce, allreduce, n);
  }

  private static <T> T nonNull(T a) {
    if (a == null) {
      throw new IllegalArgumentException("the algorithm is null");
    }
    return a;
  }

  @Override
  public String toString() {
    return "Options[root " + root + ", broadcast " + broadcast.wireName() + ", reduce " + reduce.wireName() + ", allreduce "
        + allreduce.wireName() + ", total partitions " + totalPartitions + "]";
  }
}
