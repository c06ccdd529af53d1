package harp;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A started native worker (one per map task): its rank, the job's size, its memory pool, the
 * collectives, and the tables it made. {@link CollectiveMapper} owns one; the natives are in
 * {@code rust/harp-jni/src/worker.rs}.
 *
 * <p>{@link #close} (orderly) and {@link #abort} (failure) free the tables still open and end
 * the worker; either is idempotent, and any use afterwards is a {@link HarpException} of kind
 * {@link HarpException.Kind#CLOSED}. The worker remembers only its open tables: a table closed
 * by its user is forgotten at once.
 */
final class Worker implements AutoCloseable {
  static {
    Native.ensureLoaded();
  }

  private volatile long handle;
  private final int rank;
  private final int size;
  private final Set<Table> open = Collections.newSetFromMap(new ConcurrentHashMap<>());

  /** Takes ownership of a worker handle from {@link Native#start}. */
  Worker(long handle) {
    this.handle = handle;
    this.rank = rank(handle);
    this.size = size(handle);
  }

  long handle() {
    long h = handle;
    if (h == 0) {
      throw new HarpException(HarpException.Kind.CLOSED, "worker " + rank + " is closed");
    }
    return h;
  }

  boolean isOpen() {
    return handle != 0;
  }

  int rank() {
    return rank;
  }

  int size() {
    return size;
  }

  PoolStats poolStats() {
    return new PoolStats(poolStats(handle()));
  }

  void trimPool() {
    trimPool(handle());
  }

  /** A new empty table whose buffers come from this worker's pool. */
  Table newTable(Combiner combiner) {
    Table t = new Table(this, combiner);
    open.add(t);
    return t;
  }

  /** A new empty table whose dense partitions are combined by Java code. */
  Table newTable(DenseCombiner combiner) {
    Table t = new Table(this, combiner);
    open.add(t);
    return t;
  }

  /** A new empty key-value table. */
  KeyValueTable newKeyValueTable(KeyType k, ValueType v, Combiner c, int partitions) {
    return new KeyValueTable(newTable(c), k, v, partitions);
  }

  /** A new empty key-value table whose equal keys are combined by Java code. */
  KeyValueTable newKeyValueTable(KeyType k, ValueType v, KvCombiner c, int partitions) {
    Table t = new Table(this, c);
    open.add(t);
    return new KeyValueTable(t, k, v, partitions);
  }

  /** A new empty edge table; its edges are added to partition {@code rank} until regrouped. */
  EdgeTable newEdgeTable(boolean weighted) {
    return new EdgeTable(newTable(Combiner.APPEND), weighted, rank);
  }

  /** Called by {@link Table#close}. */
  void forget(Table t) {
    open.remove(t);
  }

  /** How many tables of this worker are open. */
  int openTables() {
    return open.size();
  }

  private void closeTables() {
    List<Table> tables = new ArrayList<>(open);
    for (Table t : tables) {
      t.close();
    }
  }

  /**
   * Orderly end: the peers are told this worker leaves, then its tables are closed. A second call
   * does nothing. While a collective runs on another thread it throws and changes nothing.
   */
  @Override
  public void close() {
    long h = handle;
    if (h == 0) {
      return;
    }
    close(h);
    handle = 0;
    closeTables();
  }

  /**
   * Failure end: every peer's collectives fail quoting {@code reason}. Does nothing once closed.
   * While a collective runs on another thread, the worker aborts when that collective returns.
   */
  void abort(String reason) {
    long h = handle;
    if (h == 0) {
      return;
    }
    handle = 0;
    closeTables();
    abort(h, reason);
  }

  /**
   * The table's own ids mapped by {@code p} over {@code n} workers (null partitioner: modulo).
   */
  private static int[][] map(Table t, Partitioner p, int n) {
    if (p == null) {
      return new int[][] {null, null};
    }
    int[] ids = t.ids();
    int[] owners = new int[ids.length];
    for (int i = 0; i < ids.length; i++) {
      owners[i] = p.owner(ids[i], n);
    }
    return new int[][] {ids, owners};
  }

  /** {@link #map(Table, Partitioner, int)} for the group {@code g} (null: every worker). */
  private int[][] map(Table t, Partitioner p, int[] g) {
    return map(t, p, g == null ? size : g.length);
  }

  /** This worker's rank in the group of world ranks {@code members} (checked by the engine). */
  int groupRank(int[] members) {
    return groupRank(handle(), members);
  }

  void barrier(String label) {
    barrier(null, label);
  }

  void reduceScatter(String label, Table t, Partitioner p) {
    reduceScatter(null, label, t, p);
  }

  void regroup(String label, Table t, Partitioner p) {
    regroup(null, label, t, p);
  }

  void rotate(String label, Table t, int[] map) {
    rotate(null, label, t, map);
  }

  // The collectives below run in the whole job when {@code g} is null, otherwise in the group of
  // the world ranks {@code g} (roots, owners and maps in group ranks).

  void barrier(int[] g, String label) {
    barrier(handle(), g, label);
  }

  // Each reads its own options: the root, its algorithm, allgather's total partitions (0:
  // unknown).

  void broadcast(int[] g, String label, Table t, Options o) {
    broadcast(handle(), g, label, t.changing(), o.root, o.broadcast.wireName());
  }

  void reduce(int[] g, String label, Table t, Options o) {
    reduce(handle(), g, label, t.changing(), o.root, o.reduce.wireName());
  }

  void gather(int[] g, String label, Table t, Options o) {
    gather(handle(), g, label, t.changing(), o.root);
  }

  void scatter(int[] g, String label, Table t, Partitioner p, Options o) {
    int[][] m = map(t, p, g); // only the root's mapping is used
    scatter(handle(), g, label, t.changing(), o.root, m[0], m[1]);
  }

  void allgather(int[] g, String label, Table t, Options o) {
    allgather(handle(), g, label, t.changing(), o.totalPartitions);
  }

  void allreduce(int[] g, String label, Table t, Options o) {
    allreduce(handle(), g, label, t.changing(), o.allreduce.wireName());
  }

  void reduceScatter(int[] g, String label, Table t, Partitioner p) {
    int[][] m = map(t, p, g);
    reduceScatter(handle(), g, label, t.changing(), m[0], m[1]);
  }

  void regroup(int[] g, String label, Table t, Partitioner p) {
    int[][] m = map(t, p, g);
    regroup(handle(), g, label, t.changing(), false, m[0], m[1]);
  }

  void regroupEdges(int[] g, String label, EdgeTable e, boolean bySource, int partitions) {
    Table t = e.table();
    regroupEdges(handle(), g, label, t.changing(), bySource, partitions);
  }

  void sendEdgesToVertices(int[] g, String label, EdgeTable e, boolean bySource, KeyValueTable vertices,
      int partitions) {
    Table t = e.table();
    Table v = vertices.table();
    sendEdgesToVertices(handle(), g, label, t.changing(), bySource, v.handle(), partitions);
  }

  void sendMessages(int[] g, String label, KeyValueTable messages) {
    sendMessages(handle(), g, label, messages.table().changing(), messages.partitions());
  }

  void regroupPlanned(int[] g, String label, Table t) {
    regroup(handle(), g, label, t.changing(), true, null, null);
  }

  void push(String label, Table local, Table global, Partitioner p) {
    push(null, label, local, global, p);
  }

  void pull(String label, Table local, Table global, Partitioner p) {
    pull(null, label, local, global, p);
  }

  /** {@code g}: the group's world ranks (null: every worker); owners are group ranks. */
  void push(int[] g, String label, Table local, Table global, Partitioner p) {
    int[][] m = map(local, p, g);
    push(handle(), g, label, local.changing(), global.changing(), m[0], m[1]);
  }

  void pull(int[] g, String label, Table local, Table global, Partitioner p) {
    int[][] m = map(local, p, g);
    pull(handle(), g, label, local.changing(), global.changing(), m[0], m[1]);
  }

  void rotate(int[] g, String label, Table t, int[] map) {
    rotate(handle(), g, label, t.changing(), map == null ? null : Arrays.copyOf(map, map.length));
  }

  // Started without blocking (docs/java-guide.md, "Non-blocking collectives"): each returns the
  // handle of a harp.Pending; the natives are in rust/harp-jni/src/pending.rs.

  long startBarrier(int[] g, String label) {
    return start(handle(), g, label, "barrier", 0, 0, 0, null, 0, null, null, null);
  }

  long startBroadcast(int[] g, String label, Table t, Options o) {
    return start(handle(), g, label, "broadcast", t.changing(), 0, o.root, o.broadcast.wireName(), 0, null, null,
        null);
  }

  long startAllgather(int[] g, String label, Table t, Options o) {
    return start(handle(), g, label, "allgather", t.changing(), 0, 0, null, o.totalPartitions, null, null, null);
  }

  long startAllreduce(int[] g, String label, Table t, Options o) {
    return start(handle(), g, label, "allreduce", t.changing(), 0, 0, o.allreduce.wireName(), 0, null, null, null);
  }

  long startPushPull(int[] g, String label, boolean push, Table local, Table global, Partitioner p) {
    int[][] m = map(local, p, g);
    return start(handle(), g, label, push ? "push" : "pull", local.changing(), global.changing(), 0, null, 0, m[0],
        m[1], null);
  }

  long startRotate(int[] g, String label, Table t, int[] map) {
    int[] m = map == null ? null : Arrays.copyOf(map, map.length);
    return start(handle(), g, label, "rotate", t.changing(), 0, 0, null, 0, null, null, m);
  }

  /** One export for every started collective: {@code op} names it; it reads the arguments it takes. */
  static native long start(long worker, int[] group, String label, String op, long table, long global, int root,
      String algorithm, int total, int[] ids, int[] owners, int[] map);

  static native int rank(long worker);

  static native int size(long worker);

  /** {@code [allocations, reuses, releases kept, releases freed, bytes held, bytes in use]}. */
  static native long[] poolStats(long worker);

  static native void trimPool(long worker);

  static native void close(long worker);

  static native void abort(long worker, String reason);

  static native int groupRank(long worker, int[] members);

  static native void barrier(long worker, int[] group, String label);

  static native void broadcast(long worker, int[] group, String label, long table, int root, String algorithm);

  static native void reduce(long worker, int[] group, String label, long table, int root, String algorithm);

  static native void gather(long worker, int[] group, String label, long table, int root);

  static native void scatter(long worker, int[] group, String label, long table, int root, int[] ids,
      int[] owners);

  static native void allgather(long worker, int[] group, String label, long table, int totalPartitions);

  static native void allreduce(long worker, int[] group, String label, long table, String algorithm);

  static native void reduceScatter(long worker, int[] group, String label, long table, int[] ids, int[] owners);

  static native void regroup(long worker, int[] group, String label, long table, boolean planned, int[] ids,
      int[] owners);

  static native void push(long worker, int[] group, String label, long local, long global, int[] ids,
      int[] owners);

  static native void pull(long worker, int[] group, String label, long local, long global, int[] ids,
      int[] owners);

  static native void regroupEdges(long worker, int[] group, String label, long table, boolean bySource,
      int partitions);

  static native void sendEdgesToVertices(long worker, int[] group, String label, long edges, boolean bySource,
      long vertices, int partitions);

  static native void sendMessages(long worker, int[] group, String label, long table, int partitions);

  static native void rotate(long worker, int[] group, String label, long table, int[] map);
}
