package harp;

import java.nio.ByteBuffer;
import java.nio.DoubleBuffer;
import java.nio.FloatBuffer;
import java.nio.IntBuffer;
import java.nio.LongBuffer;
import java.nio.ShortBuffer;

/**
 * A view of one partition of a {@link Table}: its id, element type and native memory.
 *
 * <p>The buffers it hands out ({@link #bytes}, {@link #doubles}, …) are windows onto native
 * memory, not copies: use them only until the table changes (a collective on it, another
 * {@code create}, {@code remove}, {@code clear}) or is closed, and never keep them beyond that.
 * The partition's own methods check this and throw; a buffer kept from an earlier call cannot be
 * checked, and reading or writing it afterwards reads or overwrites memory that now belongs to
 * another table, or crashes the JVM once the pool has given it back. Copy what must outlive the
 * table ({@code doubles().get(array)}).
 */
public final class Partition {
  private final Table table;
  private final int id;
  private final DType type;
  private final ByteBuffer bytes;
  private final int generation;

  Partition(Table table, int id, DType type, ByteBuffer bytes) {
    this.table = table;
    this.id = id;
    this.type = type;
    this.bytes = bytes;
    this.generation = table.generation();
  }

  private void check() {
    if (table.changedSince(generation)) {
      throw new IllegalStateException("view of partition " + id
          + " is stale: its table changed (collective, create, remove, clear or close) since it was obtained");
    }
  }

  public int id() {
    return id;
  }

  public DType type() {
    return type;
  }

  /** Number of elements. */
  public int length() {
    return bytes.capacity() / type.size();
  }

  /** The raw bytes (native order); valid only until the table changes. */
  public ByteBuffer bytes() {
    check();
    return bytes.duplicate().order(bytes.order());
  }

  private void want(DType t) {
    want(t, t);
  }

  /** Checks that the partition holds {@code t} or {@code u} (a signed type and its unsigned twin). */
  private void want(DType t, DType u) {
    check();
    if (type != t && type != u) {
      throw new IllegalStateException("partition " + id + " holds " + type + ", not " + t
          + (t == u ? "" : " or " + u));
    }
  }

  public DoubleBuffer doubles() {
    want(DType.F64);
    return bytes().asDoubleBuffer();
  }

  public FloatBuffer floats() {
    want(DType.F32);
    return bytes().asFloatBuffer();
  }

  /** The values of an i64 or u64 partition (u64: the bits of each unsigned value). */
  public LongBuffer longs() {
    want(DType.I64, DType.U64);
    return bytes().asLongBuffer();
  }

  /** The values of an i32 or u32 partition (u32: the bits of each unsigned value). */
  public IntBuffer ints() {
    want(DType.I32, DType.U32);
    return bytes().asIntBuffer();
  }

  /** The values of an i16 or u16 partition (u16: the bits of each unsigned value). */
  public ShortBuffer shorts() {
    want(DType.I16, DType.U16);
    return bytes().asShortBuffer();
  }

  /** The values of an i8 or u8 partition (u8: the bits of each unsigned value). */
  public ByteBuffer bytesOf() {
    want(DType.I8, DType.U8);
    return bytes();
  }

  /** A copy of the values (F64 partitions). */
  public double[] toDoubleArray() {
    DoubleBuffer b = doubles();
    double[] out = new double[b.remaining()];
    b.get(out);
    return out;
  }

  public long[] toLongArray() {
    LongBuffer b = longs();
    long[] out = new long[b.remaining()];
    b.get(out);
    return out;
  }

  public int[] toIntArray() {
    IntBuffer b = ints();
    int[] out = new int[b.remaining()];
    b.get(out);
    return out;
  }

  public short[] toShortArray() {
    ShortBuffer b = shorts();
    short[] out = new short[b.remaining()];
    b.get(out);
    return out;
  }
}
