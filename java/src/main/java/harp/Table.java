package harp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A table of partitions (id → typed array) whose arrays live in native memory owned by the
 * engine's memory pool. Views ({@link Partition}) are direct buffers over that memory: no copy
 * between Java and the engine. Obtain tables from {@link CollectiveMapper#newTable}; close them
 * when done (those still open are closed with their worker at the end of the mapper's run).
 *
 * <p>A view is valid until the table changes (a collective on it, {@code create}, {@code remove},
 * {@code clear}, {@code close}); using a stale {@link Partition} throws
 * {@link IllegalStateException}. Raw buffers obtained from a view must not be used after that.
 * A table is not thread-safe: use it from one thread at a time. The natives are in
 * {@code rust/harp-jni/src/table.rs}.
 */
public final class Table implements AutoCloseable {
  static {
    Native.ensureLoaded();
  }

  private final Worker worker;
  private long handle;
  private final Combiner combiner;
  private int generation;

  Table(Worker worker, Combiner combiner) {
    this.worker = worker;
    this.combiner = combiner;
    this.handle = open(worker.handle(), combiner.wireName());
  }

  /** A table whose key-value entries are combined by Java code (see {@link KvCombiner}). */
  Table(Worker worker, KvCombiner combiner) {
    this.worker = worker;
    this.combiner = null;
    this.handle = openWith(worker.handle(), combiner.name(), combiner);
  }

  /** A table whose dense partitions are combined by Java code (see {@link DenseCombiner}). */
  Table(Worker worker, DenseCombiner combiner) {
    this.worker = worker;
    this.combiner = null;
    this.handle = openDense(worker.handle(), combiner.name(), new DenseCombinerBridge(combiner),
        combiner.elementwise());
  }

  long handle() {
    if (handle == 0) {
      throw new HarpException(HarpException.Kind.CLOSED, "table is closed");
    }
    return handle;
  }

  /** Marks every existing view stale and returns the handle (a collective is about to run). */
  long changing() {
    long h = handle();
    changed();
    return h;
  }

  /** Marks every existing view stale. */
  void changed() {
    generation++;
  }

  int generation() {
    return generation;
  }

  /** The built-in combiner, or null for a table combined by a {@link KvCombiner} or {@link DenseCombiner}. */
  public Combiner combiner() {
    return combiner;
  }

  /** Creates (or replaces) partition {@code id} with {@code length} zeros of {@code type}. */
  public Partition create(int id, DType type, int length) {
    if (id < 0 || length < 0) {
      throw new IllegalArgumentException("partition id and length must be >= 0, got " + id + ", " + length);
    }
    long h = changing();
    ByteBuffer b = create(h, id, type.wireName(), length);
    return new Partition(this, id, type, b.order(ByteOrder.nativeOrder()));
  }

  /** Creates partition {@code id} holding a copy of {@code values}. */
  public Partition put(int id, double[] values) {
    Partition p = create(id, DType.F64, values.length);
    p.doubles().put(values);
    return p;
  }

  public Partition put(int id, long[] values) {
    Partition p = create(id, DType.I64, values.length);
    p.longs().put(values);
    return p;
  }

  public Partition put(int id, int[] values) {
    Partition p = create(id, DType.I32, values.length);
    p.ints().put(values);
    return p;
  }

  /** Creates an i16 partition holding a copy of {@code values}. */
  public Partition put(int id, short[] values) {
    Partition p = create(id, DType.I16, values.length);
    p.shorts().put(values);
    return p;
  }

  public Partition put(int id, float[] values) {
    Partition p = create(id, DType.F32, values.length);
    p.floats().put(values);
    return p;
  }

  /**
   * The dense partition with this id, or null when there is none. A key-value or edge partition
   * is not an array of elements: asking for one here throws {@link IllegalStateException} (read it
   * with {@link KeyValueTable#cursor()} or {@link EdgeTable}).
   */
  public Partition get(int id) {
    long h = handle();
    String t = layout(h, id);
    if (t == null) {
      return null;
    }
    if (t.startsWith("kv ") || t.startsWith("edges")) {
      throw new IllegalStateException("partition " + id + " holds " + t
          + ", not a dense array: read it through KeyValueTable or EdgeTable");
    }
    ByteBuffer b = get(h, id);
    return new Partition(this, id, DType.fromWireName(t), b.order(ByteOrder.nativeOrder()));
  }

  /**
   * Local aggregation: moves every partition of {@code others} into this table in one native
   * call, equal partition ids combined with this table's combiner, in parallel on the engine's
   * threads; {@code others} are left empty (still open). Fill one table per thread (a table is
   * not thread-safe, but different tables may be filled at once), then merge them here before a
   * collective: the collective sends each partition once, combined, instead of once per thread.
   * The order in which the tables are combined is unspecified (it matters only for
   * {@code KEEP_FIRST} and {@code APPEND}). The tables must belong to this table's worker, be
   * given once each, and combine with a combiner of the same kind. If the combiner fails, this
   * table and {@code others} are left empty.
   */
  public void merge(Table... others) {
    long[] handles = new long[others.length];
    for (int i = 0; i < others.length; i++) {
      if (others[i].worker != worker) {
        throw new IllegalArgumentException("table " + i + " belongs to another worker");
      }
      handles[i] = others[i].changing();
    }
    merge(changing(), handles);
  }

  /** The bytes of all partitions (what a collective that moves every partition sends of this table). */
  public long byteSize() {
    return bytes(handle());
  }

  /** Whether the table was closed or changed since {@code generation} (a view made then is stale). */
  boolean changedSince(int generation) {
    return !isOpen() || generation() != generation;
  }

  /**
   * A little-endian view of partition {@code pid}, whose layout must be {@code want} ({@code kv
   * str i64}, {@code edges}, …: see {@link #layout(long, int)}); the next partition of a cursor.
   */
  ByteBuffer view(int pid, String want) {
    String layout = layout(handle(), pid);
    if (!want.equals(layout)) {
      throw new IllegalStateException("partition " + pid + " holds " + layout + ", not " + want);
    }
    return get(handle(), pid).order(ByteOrder.LITTLE_ENDIAN);
  }

  /** Partition ids in ascending order. */
  public int[] ids() {
    return ids(handle());
  }

  public int size() {
    return ids().length;
  }

  public boolean remove(int id) {
    return remove(changing(), id);
  }

  public void clear() {
    clear(changing());
  }

  /**
   * Frees the native memory (back to the pool). Closing again does nothing; any other use of a
   * closed table is a {@link HarpException} of kind {@link HarpException.Kind#CLOSED}.
   */
  @Override
  public void close() {
    if (handle == 0) {
      return;
    }
    changed();
    long h = handle;
    handle = 0;
    worker.forget(this);
    free(h);
  }

  boolean isOpen() {
    return handle != 0;
  }

  static native long open(long worker, String combiner);

  static native long openWith(long worker, String name, KvCombiner combiner);

  static native long openDense(long worker, String name, DenseCombinerBridge bridge, boolean elementwise);

  /** Moves every partition of the tables {@code others} into {@code table}, combined. */
  static native void merge(long table, long[] others);

  static native long bytes(long table);

  /** Adds {@code len} bytes of key-value entries (any order, keys may repeat) from a direct buffer. */
  static native void addEntries(long table, String keyType, String valueType, int partitions, ByteBuffer batch,
      int len);

  /** Appends {@code len} bytes of edge records from a direct buffer to edge partition {@code pid}. */
  static native void addEdges(long table, boolean weighted, int pid, ByteBuffer batch, int len);

  /** The layout of a partition: its element type's name, {@code kv KEY VALUE}, or null when absent. */
  static native String layout(long table, int pid);

  static native ByteBuffer create(long table, int pid, String dtype, int length);

  static native ByteBuffer get(long table, int pid);

  static native int[] ids(long table);

  static native boolean remove(long table, int pid);

  static native void clear(long table);

  static native void free(long table);
}
