package harp;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Function;
import org.apache.hadoop.mapreduce.Mapper;

/**
 * A Hadoop map task that stays alive with all the other map tasks of its job and exchanges
 * {@link Table}s with them through collectives. Override {@link #mapCollective}.
 *
 * <p>{@link #run} joins the job's workers (rendezvous, authentication, handshake), then calls
 * {@link #setup}, {@link #mapCollective} and {@link #cleanup}, and always releases the native
 * worker and every table of this mapper still open (a closed table is forgotten at once). Every
 * worker must call the same collectives in the same order; the label of a call only appears in
 * logs and errors. Collectives throw {@link HarpException} on failure (never a silent false).
 * While a worker waits inside a collective it keeps reporting progress to Hadoop, so the task
 * timeout does not kill it.
 */
public abstract class CollectiveMapper<KEYIN, VALUEIN, KEYOUT, VALUEOUT>
    extends Mapper<KEYIN, VALUEIN, KEYOUT, VALUEOUT> implements Collectives {
  private Worker worker;
  private int rank = -1;
  private int workers;
  private final AtomicInteger inCollective = new AtomicInteger();
  /** Whether {@link #runUntilQuiet} is running (its handler may send events, not call collectives). */
  private boolean inHandler;
  /** The checkpoints opened by {@link #checkpoints}, closed at the end of {@link #run}. */
  private final List<Checkpoints> checkpoints = new ArrayList<>();

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
      worker = new Worker(Session.join(context));
      rank = worker.rank();
      workers = worker.size();
      keeper = progressKeeper(context);
      long[] io = threadIo();
      setup(context);
      mapCollective(new KeyValReader<>(context), context);
      cleanup(context);
      countIo(context, io);
    } catch (Throwable t) {
      failure = t;
      // The task's stderr (the console in local mode, the container log on YARN).
      System.err.println("harp: worker " + Session.rankOf(context) + " of " + context.getJobID() + " failed: " + t);
      throw t;
    } finally {
      if (keeper != null) {
        keeper.interrupt();
      }
      checkpoints.forEach(Checkpoints::close);
      checkpoints.clear();
      if (worker != null) {
        // Frees the tables still open, then leaves (or aborts) the job.
        Worker w = worker;
        worker = null;
        if (failure == null) {
          w.close();
        } else {
          w.abort("user code failed: " + failure);
        }
      }
    }
  }

  /**
   * Bytes this thread has read and written through Hadoop's file systems so far (the mapper's
   * input records and the files it writes itself; the engine's own reads and writes are not seen).
   */
  @SuppressWarnings("deprecation")
  static long[] threadIo() {
    long read = 0;
    long written = 0;
    for (org.apache.hadoop.fs.FileSystem.Statistics s : org.apache.hadoop.fs.FileSystem.getAllStatistics()) {
      org.apache.hadoop.fs.FileSystem.Statistics.StatisticsData d = s.getThreadStatistics();
      read += d.getBytesRead();
      written += d.getBytesWritten();
    }
    return new long[] {read, written};
  }

  /**
   * Adds what this worker read and wrote since {@code before} ({@link #threadIo}) to the job's
   * "Bytes Read" and "Bytes Written" counters: Hadoop's map task counts neither, since the
   * worker's split is not a FileSplit and it writes its output itself.
   */
  private void countIo(Context context, long[] before) {
    long[] now = threadIo();
    if (now[0] > before[0]) {
      context.getCounter(org.apache.hadoop.mapreduce.lib.input.FileInputFormatCounter.BYTES_READ)
          .increment(now[0] - before[0]);
    }
    if (now[1] > before[1]) {
      context.getCounter(org.apache.hadoop.mapreduce.lib.output.FileOutputFormatCounter.BYTES_WRITTEN)
          .increment(now[1] - before[1]);
    }
  }

  private Thread progressKeeper(Context context) {
    long every = Math.max(100, ConfNumbers.getLong(context.getConfiguration(), "harp.progress.interval.ms", 5_000));
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

  private Worker w() {
    if (worker == null) {
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

  /** This worker's rank: {@link #getSelfID()} ({@link Collectives}). */
  @Override
  public int rank() {
    return getSelfID();
  }

  /** The number of workers: {@link #getNumWorkers()} ({@link Collectives}). */
  @Override
  public int size() {
    return getNumWorkers();
  }

  public int getMasterID() {
    return 0;
  }

  public boolean isMaster() {
    return rank == 0;
  }

  /** Allocation counter of this worker's native memory pool (flat in a steady state). */
  public long poolAllocations() {
    return poolStats().allocations();
  }

  /** The counters of this worker's native memory pool. */
  public PoolStats poolStats() {
    return w().poolStats();
  }

  /**
   * Gives the buffers kept in this worker's native memory pool back to the system. The pool keeps
   * the buffers of closed tables for the next table of the same size (up to 4 GiB); call this
   * after closing large tables whose sizes will not come again (a job's input once it is loaded),
   * so that they do not count against the container's memory limit. It also asks the C allocator
   * to return the process's free heap memory to the system.
   */
  public void trimPool() {
    w().trimPool();
  }

  /** How many tables of this mapper are open (closed ones are not remembered). */
  int openTables() {
    return w().openTables();
  }

  /**
   * Runs a long native computation (made of collectives) on this worker, reporting progress to
   * Hadoop meanwhile as inside any collective.
   */
  <T> T runNative(Function<Worker, T> body) {
    inCollective.incrementAndGet();
    try {
      return body.apply(w());
    } finally {
      inCollective.decrementAndGet();
    }
  }

  /**
   * A new empty table; closed automatically at the end of {@link #run} if still open. Close a
   * table as soon as it is no longer needed: its memory goes back to the pool.
   */
  public Table newTable(Combiner combiner) {
    return w().newTable(combiner);
  }

  /** A new empty table whose dense partitions are combined by Java code (see {@link DenseCombiner}). */
  public Table newTable(DenseCombiner combiner) {
    return w().newTable(combiner);
  }

  /**
   * A new empty key-value table of {@code keys → values} spread over {@code partitions} partition
   * ids (a few per worker is typical), combined with {@code combiner}; closed automatically at the
   * end of {@link #run} if still open. Collectives take it like a {@link Table}.
   */
  public KeyValueTable newKeyValueTable(KeyType keys, ValueType values, Combiner combiner, int partitions) {
    return w().newKeyValueTable(keys, values, combiner, partitions);
  }

  /** A new empty key-value table whose equal keys are combined by Java code (the slow path). */
  public KeyValueTable newKeyValueTable(KeyType keys, ValueType values, KvCombiner combiner, int partitions) {
    return w().newKeyValueTable(keys, values, combiner, partitions);
  }

  /** A new empty edge table ({@code weighted}: each edge carries an f64 weight). */
  public EdgeTable newEdgeTable(boolean weighted) {
    return w().newEdgeTable(weighted);
  }

  /**
   * A handle for collectives over the workers {@code members} (world ranks, in group-rank
   * order); only members call it, all with the same list. An empty list, a rank listed twice or
   * not a worker, and this worker not being listed are {@link HarpException}s. No message is
   * exchanged.
   */
  public Group group(int... members) {
    int[] m = members == null ? null : members.clone();
    return new Group(this, m, w().groupRank(m));
  }

  /** Runs one collective, reporting progress to Hadoop while it waits. */
  void collective(java.util.function.Consumer<Worker> op) {
    if (inHandler) {
      throw new IllegalStateException("collectives cannot be called from an event handler (the other workers are "
          + "not calling them)");
    }
    runNative(w -> {
      op.accept(w);
      return null;
    });
  }

  public void barrier(String label) {
    collective(w -> w.barrier(label));
  }

  /** Every worker's table becomes a copy of the root's. */
  public void broadcast(String label, Table t, Options o) {
    collective(w -> w.broadcast(null, label, t, o));
  }

  /** The root's table becomes the combination of all tables; the others are emptied. */
  public void reduce(String label, Table t, Options o) {
    collective(w -> w.reduce(null, label, t, o));
  }

  /** The root's table becomes the union of all tables; the others are unchanged. */
  public void gather(String label, Table t, Options o) {
    collective(w -> w.gather(null, label, t, o));
  }

  /** The root's partitions go to their owners; every table becomes what its worker owns. */
  public void scatter(String label, Table t, Partitioner p, Options o) {
    collective(w -> w.scatter(null, label, t, p, o));
  }

  /**
   * Every table becomes the union of all tables (equal ids combined); pipelined per partition
   * when the options give the total number of partitions.
   */
  public void allgather(String label, Table t, Options o) {
    collective(w -> w.allgather(null, label, t, o));
  }

  /** Every table becomes the combination of all tables (bit-identical on every worker). */
  public void allreduce(String label, Table t, Options o) {
    collective(w -> w.allreduce(null, label, t, o));
  }

  /** Each worker ends with the combined partitions it owns under {@code p} (null: modulo). */
  public void reduceScatter(String label, Table t, Partitioner p) {
    collective(w -> w.reduceScatter(label, t, p));
  }

  /** Partitions move to their owners under {@code p} and are combined there. */
  public void regroup(String label, Table t, Partitioner p) {
    collective(w -> w.regroup(label, t, p));
  }

  /**
   * Regroup edges: every edge goes to the worker holding the vertex partition of its source
   * ({@code bySource}) or destination, among {@code partitions} vertex partitions (partition
   * {@code hash(v) mod partitions}, held by worker {@code partition mod workers}).
   */
  public void regroupEdges(String label, EdgeTable edges, boolean bySource, int partitions) {
    collective(w -> w.regroupEdges(null, label, edges, bySource, partitions));
  }

  /** Every edge goes to the worker that holds its source's (or destination's) partition in {@code vertices}. */
  public void sendEdgesToVertices(String label, EdgeTable edges, boolean bySource, KeyValueTable vertices,
      int partitions) {
    collective(w -> w.sendEdgesToVertices(null, label, edges, bySource, vertices, partitions));
  }

  /**
   * Send messages to vertices: a message table (i64 vertex keys, made with the vertices' number of
   * partitions) moves to the workers holding the vertices and is combined there.
   */
  public void sendMessages(String label, KeyValueTable messages) {
    collective(w -> w.sendMessages(null, label, messages));
  }

  /** Regroup whose owners the master decides from the actual distribution of the partitions. */
  public void regroupPlanned(String label, Table t) {
    collective(w -> w.regroupPlanned(null, label, t));
  }

  /** Local partitions are combined into their owners' global tables. */
  public void push(String label, Table local, Table global, Partitioner p) {
    collective(w -> w.push(label, local, global, p));
  }

  /** Local partitions are replaced by their owners' global copies. */
  public void pull(String label, Table local, Table global, Partitioner p) {
    collective(w -> w.pull(label, local, global, p));
  }

  /** Tables move to the next worker ({@code map} null) or along the permutation {@code map}. */
  public void rotate(String label, Table t, int[] map) {
    collective(w -> w.rotate(label, t, map));
  }

  // ---- Started without blocking (docs/java-guide.md "Non-blocking collectives") ----

  /** Starts one operation ({@code op} returns its native handle) and wraps it. */
  private <T> Pending<T> started(java.util.function.ToLongFunction<Worker> op, T value, Table... tables) {
    long[] h = new long[1];
    collective(w -> h[0] = op.applyAsLong(w));
    return new Pending<>(h[0], value, tables);
  }

  /** {@link #barrier}, started without blocking. */
  public Pending<Void> barrierStart(String label) {
    return started(w -> w.startBarrier(null, label), null);
  }

  /** {@link #broadcast}, started without blocking; {@code get()} returns {@code t}. */
  public Pending<Table> broadcastStart(String label, Table t, Options o) {
    return started(w -> w.startBroadcast(null, label, t, o), t, t);
  }

  public Pending<Table> broadcastStart(String label, Table t) {
    return broadcastStart(label, t, Options.defaults());
  }

  /** {@link #allgather}, started without blocking; {@code get()} returns {@code t}. */
  public Pending<Table> allgatherStart(String label, Table t, Options o) {
    return started(w -> w.startAllgather(null, label, t, o), t, t);
  }

  public Pending<Table> allgatherStart(String label, Table t) {
    return allgatherStart(label, t, Options.defaults());
  }

  /** {@link #allreduce}, started without blocking; {@code get()} returns {@code t}. */
  public Pending<Table> allreduceStart(String label, Table t, Options o) {
    return started(w -> w.startAllreduce(null, label, t, o), t, t);
  }

  public Pending<Table> allreduceStart(String label, Table t) {
    return allreduceStart(label, t, Options.defaults());
  }

  /** {@link #push}, started without blocking; {@code get()} returns {@code global}. */
  public Pending<Table> pushStart(String label, Table local, Table global, Partitioner p) {
    return started(w -> w.startPushPull(null, label, true, local, global, p), global, local, global);
  }

  /** {@link #pull}, started without blocking; {@code get()} returns {@code local}. */
  public Pending<Table> pullStart(String label, Table local, Table global, Partitioner p) {
    return started(w -> w.startPushPull(null, label, false, local, global, p), local, local, global);
  }

  /** {@link #rotate}, started without blocking; {@code get()} returns {@code t}. */
  public Pending<Table> rotateStart(String label, Table t, int[] map) {
    return started(w -> w.startRotate(null, label, t, map), t, t);
  }

  public Pending<Table> rotateStart(String label, Table t) {
    return rotateStart(label, t, null);
  }

  /**
   * Collective, once before the first iteration: the job's checkpoints of the tables named
   * {@code names} ({@code harp.checkpoint.every}, {@code harp.checkpoint.dir},
   * {@code harp.resume} from the job's configuration; docs/checkpoints.md), and, when resuming,
   * the iteration to resume from ({@link Checkpoints#resumeIteration}) and this worker's tables
   * ({@link Checkpoints#restore}). Call {@link Checkpoints#afterIteration} at the end of every
   * iteration.
   */
  public Checkpoints checkpoints(Context context, String... names) {
    org.apache.hadoop.conf.Configuration conf = context.getConfiguration();
    Checkpoints c = new Checkpoints(this, ConfNumbers.getInt(conf, Checkpoints.EVERY, 0), conf.get(Checkpoints.DIR),
        conf.getBoolean(Checkpoints.RESUME, false), context.getJobID().toString(), names);
    checkpoints.add(c);
    return c;
  }

  // ---- Events (docs/java-guide.md "Events", docs/events.md) ----

  /**
   * Sends {@code payload} as an event to worker {@code dst} (this worker included). Events from
   * one sender to one receiver are received in the order they were sent. The array is copied
   * once; send a direct {@link ByteBuffer} to avoid even that.
   */
  public void sendEvent(int dst, byte[] payload) {
    Events.send(w().handle(), Events.TO_ONE, dst, null, 0, payload, 0, payload.length);
  }

  /** Sends the buffer's remaining bytes (a direct buffer from its own memory, no copy). */
  public void sendEvent(int dst, ByteBuffer payload) {
    Events.send(w().handle(), Events.TO_ONE, dst, null, 0, payload);
  }

  /** Sends {@code payload} as an event to every worker, this one included. */
  public void sendEventToAll(byte[] payload) {
    Events.send(w().handle(), Events.TO_ALL, 0, null, 0, payload, 0, payload.length);
  }

  /** Sends the buffer's remaining bytes to every worker, this one included. */
  public void sendEventToAll(ByteBuffer payload) {
    Events.send(w().handle(), Events.TO_ALL, 0, null, 0, payload);
  }

  /**
   * Sends {@code payload} labeled {@code label} (at most 4096 UTF-8 bytes) to the {@code copies}
   * workers the label's hash picks ({@link #labelReceivers}: the same label always reaches the
   * same workers); returns them. {@code copies} must be 1 … the number of workers.
   */
  public int[] sendLabeled(String label, int copies, byte[] payload) {
    return Events.send(w().handle(), Events.LABELED, 0, label, copies, payload, 0, payload.length);
  }

  /** {@link #sendLabeled(String, int, byte[])} with the buffer's remaining bytes. */
  public int[] sendLabeled(String label, int copies, ByteBuffer payload) {
    return Events.send(w().handle(), Events.LABELED, 0, label, copies, payload);
  }

  /**
   * The receivers of an event labeled {@code label} sent as {@code copies} copies among
   * {@code workers} (the engine's hash: worker {@code FNV-1a-64(label) mod workers} and the next
   * {@code copies - 1} after it, wrapping around). {@code workers} must be 1 … 2^24 and
   * {@code copies} 1 … {@code workers}, as for {@link #sendLabeled}; else {@link HarpException}
   * of kind {@code config}.
   */
  public static int[] labelReceivers(String label, int copies, int workers) {
    return Events.labelReceivers(label, copies, workers);
  }

  /** Bytes of events queued at this worker now, not yet taken (flow control bounds them). */
  public long eventsQueuedBytes() {
    return Events.stats(w().handle())[0];
  }

  /**
   * The most bytes of events ever queued at this worker from one sender: at most the senders'
   * {@code harp.events.window.bytes} (one larger event alone), events to oneself aside.
   */
  public long eventsPeakSenderBytes() {
    return Events.stats(w().handle())[1];
  }

  /**
   * The next event queued for this worker, without waiting (null: nothing queued). Throws
   * {@link HarpException} when nothing is queued and a peer has failed (naming it).
   */
  public Event getEvent() {
    return Events.take(w().handle(), -1);
  }

  /**
   * The next event, waiting at most {@code timeoutMs} milliseconds (null: nothing came). Throws
   * as {@link #getEvent} does, when every peer has left the job, and when a peer has been silent
   * for half the operation timeout.
   */
  public Event waitEvent(long timeoutMs) {
    if (timeoutMs < 0) {
      throw new IllegalArgumentException("timeout must be >= 0 ms, got " + timeoutMs);
    }
    return runNative(w -> Events.take(w.handle(), timeoutMs));
  }

  /**
   * Handles events with {@code handler} until the whole job is quiet: every worker is inside its
   * {@code runUntilQuiet} and idle (not running its handler's {@code onEvent} or {@code idle},
   * nothing queued) and no event is in flight. Returns on every worker with the same
   * {@link Quiet#events()} and {@link Quiet#waves()}. Every worker must call it (a phase); events
   * sent before the call belong to the phase; call a collective (e.g. a barrier) between two
   * phases. The handler runs on this thread; it may send events but not call collectives
   * ({@link IllegalStateException}). Anything it throws, a failed or silent peer, or a handler
   * that has not returned within the operation timeout fails the call here and on every worker
   * ({@link HarpException}; the handler's throwable is its cause).
   */
  public Quiet runUntilQuiet(EventHandler handler) {
    if (handler == null) {
      throw new NullPointerException("handler");
    }
    if (inHandler) {
      throw new IllegalStateException("runUntilQuiet cannot be called from an event handler");
    }
    return runNative(w -> {
      inHandler = true;
      try {
        return Events.runUntilQuiet(w.handle(), handler);
      } finally {
        inHandler = false;
      }
    });
  }

  /**
   * Runs {@code task} over {@code inputs} on {@code threads} threads and returns the results in
   * input order (the Harp paper's {@code doTasks}): a {@link DynamicScheduler} for the call. The
   * first failure is rethrown. For threads that live across iterations and keep state, use a
   * {@link DynamicScheduler} or {@link StaticScheduler} directly.
   */
  public static <I, O> List<O> doTasks(List<I> inputs, int threads, Function<I, O> task) {
    List<Task<I, O>> tasks = new ArrayList<>();
    for (int t = 0; t < Math.max(1, threads); t++) {
      tasks.add(task::apply);
    }
    try (DynamicScheduler<I, O> s = new DynamicScheduler<>(tasks)) {
      return s.runAll(inputs);
    }
  }
}
