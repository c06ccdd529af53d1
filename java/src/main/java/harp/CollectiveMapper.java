package harp;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import org.apache.hadoop.mapreduce.Mapper;

/**
 * A Hadoop map task that stays alive with all the other map tasks of its job and exchanges
 * {@link Table}s with them through collectives. Override {@link #mapCollective}.
 *
 * <p>{@link #run} joins the job's workers (rendezvous, authentication, handshake), then calls
 * {@link #setup}, {@link #mapCollective} and {@link #cleanup}, and always releases the native
 * worker and every table this mapper created. Every worker must call the same collectives in the
 * same order; the label of a call only appears in logs and errors. Collectives throw
 * {@link HarpException} on failure (never a silent false). While a worker waits inside a
 * collective it keeps reporting progress to Hadoop, so the task timeout does not kill it.
 */
public abstract class CollectiveMapper<KEYIN, VALUEIN, KEYOUT, VALUEOUT>
    extends Mapper<KEYIN, VALUEIN, KEYOUT, VALUEOUT> {
  private long worker;
  private int rank = -1;
  private int workers;
  private final List<Table> tables = new ArrayList<>();
  private final AtomicInteger inCollective = new AtomicInteger();

  /** Counter group through which {@link #setProgress} reaches the YARN master (not summed). */
  public static final String PROGRESS_GROUP = "harp.progress";

  /**
   * Tells how far this worker is ({@code done} of {@code total} iterations or steps): the task's
   * status shows it, and on YARN the master averages every worker's fraction into the job's
   * progress (which the client prints as the map progress).
   */
  protected void setProgress(Context context, long done, long total) {
    context.getCounter(PROGRESS_GROUP, "done").setValue(done);
    context.getCounter(PROGRESS_GROUP, "total").setValue(total);
    context.setStatus("iteration " + done + " of " + total);
    context.progress();
  }

  /** The user's job: read input with {@code reader}, compute, call collectives. */
  protected abstract void mapCollective(KeyValReader<KEYIN, VALUEIN> reader, Context context)
      throws IOException, InterruptedException;

  @Override
  public void run(Context context) throws IOException, InterruptedException {
    Thread keeper = null;
    Throwable failure = null;
    try {
      worker = Session.join(context);
      rank = Native.rank(worker);
      workers = Native.size(worker);
      keeper = progressKeeper(context);
      setup(context);
      mapCollective(new KeyValReader<>(context), context);
      cleanup(context);
    } catch (Throwable t) {
      failure = t;
      // The task's stderr (the console in local mode, the container log on YARN).
      System.err.println("harp: worker " + Session.rankOf(context) + " of " + context.getJobID() + " failed: " + t);
      throw t;
    } finally {
      if (keeper != null) {
        keeper.interrupt();
      }
      for (Table t : tables) {
        if (t.isOpen()) {
          t.close();
        }
      }
      tables.clear();
      if (worker != 0) {
        long w = worker;
        worker = 0;
        if (failure == null) {
          Native.close(w);
        } else {
          Native.abort(w, "user code failed: " + failure);
        }
      }
    }
  }

  private Thread progressKeeper(Context context) {
    long every = Math.max(100, context.getConfiguration().getLong("harp.progress.interval.ms", 5_000));
    Thread t = new Thread(() -> {
      try {
        while (!Thread.currentThread().isInterrupted()) {
          Thread.sleep(every);
          if (inCollective.get() > 0) {
            context.progress();
          }
        }
      } catch (InterruptedException done) {
        // run() is over
      }
    }, "harp-progress-" + rank);
    t.setDaemon(true);
    t.start();
    return t;
  }

  private long w() {
    if (worker == 0) {
      throw new IllegalStateException("collectives are only available inside mapCollective");
    }
    return worker;
  }

  /** This worker's id (0 … workers−1). */
  public int getSelfID() {
    return rank;
  }

  public int getNumWorkers() {
    return workers;
  }

  public int getMasterID() {
    return 0;
  }

  public boolean isMaster() {
    return rank == 0;
  }

  /** Allocation counter of this worker's native memory pool (flat in a steady state). */
  public long poolAllocations() {
    return Native.poolStats(w());
  }

  /**
   * Runs a long native computation (made of collectives) on this worker, reporting progress to
   * Hadoop meanwhile as inside any collective.
   */
  <T> T runNative(java.util.function.LongFunction<T> body) {
    inCollective.incrementAndGet();
    try {
      return body.apply(w());
    } finally {
      inCollective.decrementAndGet();
    }
  }

  /** A new empty table; closed automatically at the end of {@link #run} if still open. */
  public Table newTable(Combiner combiner) {
    Table t = new Table(w(), combiner);
    tables.add(t);
    return t;
  }

  private void run(int op, String label, Table t, Table t2, int root, int algo, int total, int[] ids, int[] owners) {
    inCollective.incrementAndGet();
    try {
      if (t != null) {
        t.changed();
      }
      if (t2 != null) {
        t2.changed();
      }
      Native.collective(w(), op, label, t == null ? 0 : t.handle(), t2 == null ? 0 : t2.handle(), root, algo,
          total, ids, owners);
    } finally {
      inCollective.decrementAndGet();
    }
  }

  /** The table's own ids mapped by {@code p} (null partitioner: modulo). */
  private int[][] map(Table t, Partitioner p) {
    if (p == null) {
      return new int[][] {null, null};
    }
    int[] ids = t.ids();
    int[] owners = new int[ids.length];
    for (int i = 0; i < ids.length; i++) {
      owners[i] = p.owner(ids[i], workers);
    }
    return new int[][] {ids, owners};
  }

  public void barrier(String label) {
    run(Native.OP_BARRIER, label, null, null, 0, 0, 0, null, null);
  }

  /** Every worker's table becomes a copy of {@code root}'s. */
  public void broadcast(String label, Table t, int root, Algorithm.Broadcast algorithm) {
    run(Native.OP_BROADCAST, label, t, null, root, algorithm.code, 0, null, null);
  }

  public void broadcast(String label, Table t, int root) {
    broadcast(label, t, root, Algorithm.Broadcast.AUTO);
  }

  /** {@code root}'s table becomes the combination of all tables; the others are emptied. */
  public void reduce(String label, Table t, int root, Algorithm.Reduce algorithm) {
    run(Native.OP_REDUCE, label, t, null, root, algorithm.code, 0, null, null);
  }

  public void reduce(String label, Table t, int root) {
    reduce(label, t, root, Algorithm.Reduce.BINOMIAL);
  }

  /** {@code root}'s table becomes the union of all tables; the others are unchanged. */
  public void gather(String label, Table t, int root) {
    run(Native.OP_GATHER, label, t, null, root, 0, 0, null, null);
  }

  /** {@code root}'s partitions go to their owners; every table becomes what its worker owns. */
  public void scatter(String label, Table t, int root, Partitioner p) {
    int[][] m = map(t, p); // only the root's mapping is used
    run(Native.OP_SCATTER, label, t, null, root, 0, 0, m[0], m[1]);
  }

  /** Every table becomes the union of all tables (equal ids combined). */
  public void allgather(String label, Table t) {
    run(Native.OP_ALLGATHER, label, t, null, 0, 0, 0, null, null);
  }

  /** Allgather pipelined per partition when the total number of partitions is known. */
  public void allgather(String label, Table t, int totalPartitions) {
    if (totalPartitions <= 0) {
      throw new IllegalArgumentException("total partitions must be positive");
    }
    run(Native.OP_ALLGATHER, label, t, null, 0, 0, totalPartitions, null, null);
  }

  /** Every table becomes the combination of all tables (bit-identical on every worker). */
  public void allreduce(String label, Table t, Algorithm.Allreduce algorithm) {
    run(Native.OP_ALLREDUCE, label, t, null, 0, algorithm.code, 0, null, null);
  }

  public void allreduce(String label, Table t) {
    allreduce(label, t, Algorithm.Allreduce.AUTO);
  }

  /** Each worker ends with the combined partitions it owns under {@code p} (null: modulo). */
  public void reduceScatter(String label, Table t, Partitioner p) {
    int[][] m = map(t, p);
    run(Native.OP_REDUCE_SCATTER, label, t, null, 0, 0, 0, m[0], m[1]);
  }

  /** Partitions move to their owners under {@code p} and are combined there. */
  public void regroup(String label, Table t, Partitioner p) {
    int[][] m = map(t, p);
    run(Native.OP_REGROUP, label, t, null, 0, 0, 0, m[0], m[1]);
  }

  /** Regroup whose owners the master decides from the actual distribution of the partitions. */
  public void regroupPlanned(String label, Table t) {
    run(Native.OP_REGROUP, label, t, null, 0, 1, 0, null, null);
  }

  /** Local partitions are combined into their owners' global tables. */
  public void push(String label, Table local, Table global, Partitioner p) {
    int[][] m = map(local, p);
    run(Native.OP_PUSH, label, local, global, 0, 0, 0, m[0], m[1]);
  }

  /** Local partitions are replaced by their owners' global copies. */
  public void pull(String label, Table local, Table global, Partitioner p) {
    int[][] m = map(local, p);
    run(Native.OP_PULL, label, local, global, 0, 0, 0, m[0], m[1]);
  }

  /** Tables move to the next worker ({@code map} null) or along the permutation {@code map}. */
  public void rotate(String label, Table t, int[] map) {
    run(Native.OP_ROTATE, label, t, null, 0, 0, 0, null, map == null ? null : Arrays.copyOf(map, map.length));
  }

  /**
   * Runs {@code task} over {@code inputs} on {@code threads} threads and returns the results in
   * input order (the Harp paper's {@code doTasks}). The first failure is rethrown.
   */
  public static <I, O> List<O> doTasks(List<I> inputs, int threads, Function<I, O> task) {
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, threads));
    try {
      List<Future<O>> futures = new ArrayList<>(inputs.size());
      for (I in : inputs) {
        futures.add(pool.submit(() -> task.apply(in)));
      }
      List<O> out = new ArrayList<>(inputs.size());
      for (Future<O> f : futures) {
        out.add(f.get());
      }
      return out;
    } catch (ExecutionException e) {
      Throwable c = e.getCause();
      if (c instanceof RuntimeException) {
        throw (RuntimeException) c;
      }
      throw new RuntimeException(c);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RuntimeException(e);
    } finally {
      pool.shutdownNow();
    }
  }
}
