package harp;

/**
 * Checkpoints of a user job's named tables, and the iteration a restarted job resumes from
 * (docs/checkpoints.md). Made once per run, before the first iteration, by
 * {@link CollectiveMapper#checkpoints}; the job's configuration decides what it does:
 * {@code harp.checkpoint.every} (save every N iterations and after the last; 0: never),
 * {@code harp.checkpoint.dir} (a directory every worker can write: HDFS on a cluster) and
 * {@code harp.resume} (continue from the newest complete checkpoint; the YARN master sets it for
 * the workers of its attempt 2 and later when the job has a checkpoint directory).
 *
 * <pre>{@code
 * Checkpoints ck = checkpoints(context, "model");
 * int start = ck.resumeIteration();   // 0: a fresh run
 * if (start > 0) {
 *   ck.restore("model", model);       // this worker's partitions of the checkpoint
 * }
 * for (int it = start + 1; it <= iterations; it++) {
 *   ...                                // compute, collectives
 *   ck.afterIteration(it, iterations, model);
 * }
 * }</pre>
 *
 * A checkpoint holds every worker's tables (one part per worker, written in parallel) and a
 * manifest the master writes once every part is written: a job that dies while writing one
 * leaves it torn, and a resume takes the previous complete one. A resume needs the same number
 * of workers and the same table names (anything else fails every worker naming what differs).
 * Natives in {@code rust/harp-jni/src/checkpoint.rs}.
 */
public final class Checkpoints implements AutoCloseable {
  static {
    Native.ensureLoaded();
  }

  /** Save a checkpoint every this many iterations (and after the last); 0: never. */
  public static final String EVERY = "harp.checkpoint.every";
  /** The checkpoint directory (needed with {@link #EVERY} or {@link #RESUME}). */
  public static final String DIR = "harp.checkpoint.dir";
  /** Continue from the newest complete checkpoint in {@link #DIR}. */
  public static final String RESUME = "harp.resume";

  private final CollectiveMapper<?, ?, ?, ?> mapper;
  private final String[] names;
  private long handle;
  private final int resumed;

  /** Collective: opens the checkpoints of {@code names} and, when resuming, reads this worker's part. */
  Checkpoints(CollectiveMapper<?, ?, ?, ?> mapper, int every, String dir, boolean resume, String job, String[] names) {
    if (every < 0) {
      throw new IllegalArgumentException(EVERY + " must be >= 0, got " + every);
    }
    if (names == null || names.length == 0) {
      throw new IllegalArgumentException("name at least one table to checkpoint");
    }
    for (String n : names) {
      if (n == null || n.isEmpty()) {
        throw new IllegalArgumentException("a table name is null or empty");
      }
    }
    this.mapper = mapper;
    this.names = names.clone();
    long[] h = new long[1];
    String d = dir == null ? "" : dir;
    mapper.collective(w -> h[0] = open(w.handle(), every, d, resume, job == null ? "" : job, this.names));
    this.handle = h[0];
    this.resumed = iteration(handle);
  }

  private long h() {
    if (handle == 0) {
      throw new HarpException(HarpException.Kind.CLOSED, "checkpoints are closed");
    }
    return handle;
  }

  /**
   * The iterations the checkpoint this run resumed from had done (the next iteration to run is
   * this plus one); 0 for a fresh start (no {@code harp.resume}, or no complete checkpoint yet).
   */
  public int resumeIteration() {
    return resumed;
  }

  /**
   * Replaces the partitions of {@code into} by those table {@code name} held on this worker in
   * the checkpoint resumed from (their bytes and layouts; {@code into} keeps its combiner). Each
   * name is restored once; nothing to restore (a fresh start) is an {@link IllegalStateException}.
   */
  public void restore(String name, Table into) {
    if (resumed == 0) {
      throw new IllegalStateException("nothing to restore: this run starts afresh");
    }
    restore(h(), name, into.changing());
  }

  /**
   * Collective, at the end of every iteration {@code iteration} (1-based) of {@code last}: with a
   * network model, measures it anew when the collectives drift more than 20% from it
   * ({@code harp.net.recalibrate}); saves {@code tables} (in the order of the names given to
   * {@link CollectiveMapper#checkpoints}) every {@code harp.checkpoint.every} iterations and after
   * the last. On return from a save, the checkpoint is complete.
   */
  public void afterIteration(int iteration, int last, Table... tables) {
    if (tables == null || tables.length != names.length) {
      throw new IllegalArgumentException("expected " + names.length + " tables (" + String.join(", ", names)
          + "), got " + (tables == null ? 0 : tables.length));
    }
    if (iteration < 1 || last < iteration) {
      throw new IllegalArgumentException("iteration " + iteration + " of " + last);
    }
    long[] ts = new long[tables.length];
    for (int i = 0; i < tables.length; i++) {
      ts[i] = tables[i].handle();
    }
    long h = h();
    mapper.collective(w -> afterIteration(w.handle(), h, iteration, last, ts));
  }

  /** Frees the native state (idempotent); {@link CollectiveMapper} closes it at the end of its run. */
  @Override
  public void close() {
    if (handle != 0) {
      long h = handle;
      handle = 0;
      close(h);
    }
  }

  private static native long open(long worker, int every, String dir, boolean resume, String job, String[] names);

  private static native int iteration(long checkpoints);

  private static native void restore(long checkpoints, String name, long table);

  private static native void afterIteration(long worker, long checkpoints, int iteration, int last, long[] tables);

  private static native void close(long checkpoints);
}
