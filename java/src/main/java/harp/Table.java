package harp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A table of partitions (id → typed array) whose arrays live in native memory owned by the
 * engine's memory pool. Views ({@link Partition}) are direct buffers over that memory: no copy
 * between Java and the engine. Obtain tables from {@link CollectiveMapper#newTable}; close them
 * (or let the mapper close them at the end of its run).
 *
 * <p>A view is valid until the table changes (a collective on it, {@code create}, {@code remove},
 * {@code clear}, {@code close}); using a stale {@link Partition} throws
 * {@link IllegalStateException}. Raw buffers obtained from a view must not be used after that.
 * A table is not thread-safe: use it from one thread at a time.
 */
public final class Table implements AutoCloseable {
  private long handle;
  private final Combiner combiner;
  private int generation;

  Table(long worker, Combiner combiner) {
    this.combiner = combiner;
    this.handle = Native.tableNew(worker, combiner.code);
  }

  long handle() {
    if (handle == 0) {
      throw new IllegalStateException("table is closed");
    }
    return handle;
  }

  /** Marks every existing view stale. */
  void changed() {
    generation++;
  }

  int generation() {
    return generation;
  }

  public Combiner combiner() {
    return combiner;
  }

  /** Creates (or replaces) partition {@code id} with {@code length} zeros of {@code type}. */
  public Partition create(int id, DType type, int length) {
    if (id < 0 || length < 0) {
      throw new IllegalArgumentException("partition id and length must be >= 0, got " + id + ", " + length);
    }
    long h = handle();
    changed();
    ByteBuffer b = Native.tableCreate(h, id, type.code, length);
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

  public Partition put(int id, float[] values) {
    Partition p = create(id, DType.F32, values.length);
    p.floats().put(values);
    return p;
  }

  /** The partition with this id, or null. */
  public Partition get(int id) {
    long h = handle();
    int t = Native.tableType(h, id);
    if (t < 0) {
      return null;
    }
    ByteBuffer b = Native.tableGet(h, id);
    return new Partition(this, id, DType.of(t), b.order(ByteOrder.nativeOrder()));
  }

  /** Partition ids in ascending order. */
  public int[] ids() {
    return Native.tableIds(handle());
  }

  public int size() {
    return ids().length;
  }

  public boolean remove(int id) {
    changed();
    return Native.tableRemove(handle(), id);
  }

  public void clear() {
    changed();
    Native.tableClear(handle());
  }

  /** Frees the native memory (back to the pool). Closing twice is an error. */
  @Override
  public void close() {
    if (handle == 0) {
      throw new IllegalStateException("table is already closed");
    }
    changed();
    long h = handle;
    handle = 0;
    Native.tableFree(h);
  }

  boolean isOpen() {
    return handle != 0;
  }
}
