package harp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.Objects;

/**
 * A key-value table: entries {@code key → value} spread over partitions by the engine's stable
 * key hash, stored in native memory as key-value partitions (keys sorted, see
 * docs/wire-protocol.md, "Key-value partitions"). Entries with equal keys are combined by the
 * table's combiner applied to their values: {@link Combiner#SUM}, {@code MIN}, {@code MAX}
 * (numbers; arrays element by element), {@link Combiner#APPEND} (arrays, byte strings),
 * {@code KEEP_FIRST}, {@code REJECT}, or a {@link KvCombiner} written in Java.
 *
 * <p>{@code add} writes entries into a local batch (a direct buffer, no object per entry) that
 * goes to the engine when it is full, on {@link #flush}, and before any read or collective; the
 * engine combines equal keys there before anything is sent (local aggregation). Read entries
 * with a {@link Cursor} (no object per entry); move them with the collectives of
 * {@link CollectiveMapper} ({@code regroup}, {@code allgather}, {@code allreduce}, …), which take
 * a key-value table like any {@link Table}. Not thread-safe: use one table per thread and merge
 * them with {@link #addAll}, or add from one thread.
 */
public final class KeyValueTable implements AutoCloseable {
  /** Bytes batched before {@code add} hands entries to the engine. */
  static final int BATCH_BYTES = 1 << 20;

  private final Table table;
  private final KeyType keyType;
  private final ValueType valueType;
  private final int partitions;
  private ByteBuffer batch = ByteBuffer.allocateDirect(BATCH_BYTES).order(ByteOrder.LITTLE_ENDIAN);

  KeyValueTable(Table table, KeyType keyType, ValueType valueType, int partitions) {
    if (partitions < 1) {
      table.close();
      throw new IllegalArgumentException("a key-value table needs at least one partition, got " + partitions);
    }
    this.table = table;
    this.keyType = Objects.requireNonNull(keyType, "keyType");
    this.valueType = Objects.requireNonNull(valueType, "valueType");
    this.partitions = partitions;
  }

  public KeyType keyType() {
    return keyType;
  }

  public ValueType valueType() {
    return valueType;
  }

  /** How many partition ids keys are spread over (partition = hash(key) mod partitions). */
  public int partitions() {
    return partitions;
  }

  /** The table of key-value partitions, with every added entry in it (for the collectives). */
  public Table table() {
    flush();
    return table;
  }

  /**
   * Local aggregation ({@link Table#merge}): moves every entry of {@code others} (one table per
   * map thread, say) into this table, equal keys combined with this table's combiner, in one
   * native call; {@code others} are left empty. They must have this table's key type, value type
   * and number of partitions.
   */
  public void merge(KeyValueTable... others) {
    Table[] tables = new Table[others.length];
    for (int i = 0; i < others.length; i++) {
      KeyValueTable o = others[i];
      if (o.keyType != keyType || !o.valueType.equals(valueType) || o.partitions != partitions) {
        throw new IllegalArgumentException("table " + i + " holds " + o.keyType + " -> " + o.valueType + " over "
            + o.partitions + " partitions, this one " + keyType + " -> " + valueType + " over " + partitions);
      }
      tables[i] = o.table();
    }
    table().merge(tables);
  }

  // ---- adding ---------------------------------------------------------------------------------

  public void add(long key, long value) {
    int vs = scalarSize(true);
    checkFits(value);
    begin(keySize(keyLong(key)), vs);
    putKeyLong(key);
    putLong(value);
  }

  public void add(long key, double value) {
    begin(keySize(keyLong(key)), scalarSize(false));
    putKeyLong(key);
    putDouble(value);
  }

  public void add(String key, long value) {
    add(utf8(key), value);
  }

  public void add(String key, double value) {
    add(utf8(key), value);
  }

  public void add(byte[] key, long value) {
    int vs = scalarSize(true);
    checkFits(value);
    begin(keySize(keyBytes(key)), vs);
    putKeyBytes(key);
    putLong(value);
  }

  public void add(byte[] key, double value) {
    begin(keySize(keyBytes(key)), scalarSize(false));
    putKeyBytes(key);
    putDouble(value);
  }

  public void add(long key, double[] values) {
    begin(keySize(keyLong(key)), arraySize(values.length, false));
    putKeyLong(key);
    putDoubles(values);
  }

  public void add(String key, double[] values) {
    byte[] k = utf8(key);
    begin(keySize(keyBytes(k)), arraySize(values.length, false));
    putKeyBytes(k);
    putDoubles(values);
  }

  public void add(long key, long[] values) {
    checkFits(values);
    begin(keySize(keyLong(key)), arraySize(values.length, true));
    putKeyLong(key);
    putLongs(values);
  }

  public void add(String key, long[] values) {
    byte[] k = utf8(key);
    checkFits(values);
    begin(keySize(keyBytes(k)), arraySize(values.length, true));
    putKeyBytes(k);
    putLongs(values);
  }

  /** Adds a byte-string value ({@link ValueType#BYTES} tables). */
  public void addBytes(long key, byte[] value) {
    begin(keySize(keyLong(key)), bytesSize(value));
    putKeyLong(key);
    batch.putInt(value.length).put(value);
  }

  public void addBytes(String key, byte[] value) {
    addBytes(utf8(key), value);
  }

  public void addBytes(byte[] key, byte[] value) {
    begin(keySize(keyBytes(key)), bytesSize(value));
    putKeyBytes(key);
    batch.putInt(value.length).put(value);
  }

  /** Adds every entry of {@code other} (same key and value types), then leaves it as it was. */
  public void addAll(KeyValueTable other) {
    if (other.keyType != keyType || !other.valueType.equals(valueType)) {
      throw new IllegalArgumentException("cannot add a table of " + other.keyType.wireName() + " → "
          + other.valueType + " entries to one of " + keyType.wireName() + " → " + valueType);
    }
    Cursor c = other.cursor();
    while (c.next()) {
      int n = c.entryLength();
      begin(n, 0);
      ByteBuffer raw = c.rawEntry();
      batch.put(raw);
    }
  }

  /** Hands the batched entries to the engine (done by reads and collectives too). */
  public void flush() {
    if (batch.position() == 0) {
      return;
    }
    int n = batch.position();
    try {
      Table.addEntries(table.changing(), keyType.wireName(), valueType.wireName(), partitions, batch, n);
    } finally {
      batch.clear();
      if (batch.capacity() > BATCH_BYTES) {
        batch = ByteBuffer.allocateDirect(BATCH_BYTES).order(ByteOrder.LITTLE_ENDIAN);
      }
    }
  }

  // Key checks return the encoded key size; value checks the encoded value size.

  private int keyLong(long key) {
    switch (keyType) {
      case I64:
        return 8;
      case I32:
        if (key != (int) key) {
          throw new IllegalArgumentException("key " + key + " does not fit the table's i32 keys");
        }
        return 4;
      default:
        throw new IllegalArgumentException("the table has str keys: give a String or byte[] key, not " + key);
    }
  }

  private int keyBytes(byte[] key) {
    if (keyType != KeyType.STR) {
      throw new IllegalArgumentException("the table has " + keyType.wireName() + " keys, not strings");
    }
    return 4 + key.length;
  }

  private static int keySize(int n) {
    return n;
  }

  private int scalarSize(boolean integer) {
    DType d = valueType.dtype();
    if (!valueType.isScalar() || integral(d) != integer) {
      throw new IllegalArgumentException("the table holds " + valueType + " values, not a single "
          + (integer ? "integer" : "floating-point number"));
    }
    return d.size();
  }

  private int arraySize(int n, boolean integer) {
    DType d = valueType.dtype();
    if (!valueType.isArray() || integral(d) != integer) {
      throw new IllegalArgumentException("the table holds " + valueType + " values, not "
          + (integer ? "an integer" : "a floating-point") + " array");
    }
    return 4 + n * d.size();
  }

  private int bytesSize(byte[] v) {
    if (!valueType.isBytes()) {
      throw new IllegalArgumentException("the table holds " + valueType + " values, not bytes");
    }
    return 4 + v.length;
  }

  private static boolean integral(DType d) {
    return d.isInteger();
  }

  /** Makes room for one entry of {@code key + value} bytes. */
  private void begin(int key, int value) {
    long need = (long) key + value;
    if (batch.remaining() >= need) {
      return;
    }
    flush();
    if (batch.remaining() < need) {
      if (need > Integer.MAX_VALUE - 8) {
        throw new IllegalArgumentException("an entry of " + need + " bytes is too large");
      }
      batch = ByteBuffer.allocateDirect((int) need).order(ByteOrder.LITTLE_ENDIAN);
    }
  }

  private void putKeyLong(long key) {
    if (keyType == KeyType.I64) {
      batch.putLong(key);
    } else {
      batch.putInt((int) key);
    }
  }

  private void putKeyBytes(byte[] key) {
    batch.putInt(key.length).put(key);
  }

  private void putLong(long v) {
    valueType.dtype().putInteger(batch, v);
  }

  private void putDouble(double v) {
    if (valueType.dtype() == DType.F64) {
      batch.putDouble(v);
    } else {
      batch.putFloat((float) v);
    }
  }

  private void putDoubles(double[] v) {
    batch.putInt(v.length);
    for (double x : v) {
      putDouble(x);
    }
  }

  private void putLongs(long[] v) {
    batch.putInt(v.length);
    for (long x : v) {
      putLong(x);
    }
  }

  /** Range checks come before anything is written, so a bad value leaves the batch as it was. */
  private void checkFits(long[] v) {
    if (valueType.isArray()) {
      for (long x : v) {
        checkFits(x);
      }
    }
  }

  private void checkFits(long v) {
    DType d = valueType.dtype();
    if (!d.fits(v)) {
      throw new IllegalArgumentException("value " + v + " does not fit the table's " + d.wireName() + " values");
    }
  }

  private static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  // ---- reading --------------------------------------------------------------------------------

  /** A cursor over every entry, partitions in ascending id order, keys ascending in each. */
  public Cursor cursor() {
    flush();
    return new Cursor();
  }

  /** The number of entries (distinct keys). */
  public long count() {
    Cursor c = cursor();
    long n = 0;
    while (c.next()) {
      n++;
    }
    return n;
  }

  /** Frees the table's native memory; closing again does nothing. */
  @Override
  public void close() {
    batch.clear();
    table.close();
  }

  /**
   * Reads entries in place (one object for the whole walk): {@code while (c.next()) { c.keyLong();
   * c.doubleValue(); }}. Valid until the table changes (an {@code add} that flushes, a collective,
   * close); using it afterwards throws {@link IllegalStateException}.
   */
  public final class Cursor {
    private final int[] ids = table.ids();
    private final int generation = table.generation();
    private int index = -1;
    private ByteBuffer part;
    private int at;
    private int keyAt;
    private int keyLen;
    private int valueAt;
    private int valueLen;
    private int entryAt;

    private Cursor() {}

    /** Moves to the next entry; false after the last. */
    public boolean next() {
      check();
      while (part == null || at >= part.limit()) {
        if (++index >= ids.length) {
          part = null;
          return false;
        }
        part = table.view(ids[index], "kv " + keyType.wireName() + " " + valueType.wireName());
        at = 0;
      }
      entryAt = at;
      switch (keyType) {
        case I64:
          keyAt = at;
          keyLen = 8;
          break;
        case I32:
          keyAt = at;
          keyLen = 4;
          break;
        default:
          keyLen = part.getInt(at);
          keyAt = at + 4;
      }
      int p = keyAt + keyLen;
      if (valueType.isScalar()) {
        valueAt = p;
        valueLen = valueType.dtype().size();
      } else {
        int n = part.getInt(p);
        valueAt = p + 4;
        valueLen = valueType.isArray() ? n * valueType.dtype().size() : n;
      }
      at = valueAt + valueLen;
      return true;
    }

    private void check() {
      if (table.changedSince(generation)) {
        throw new IllegalStateException("cursor is stale: its table changed since it was made");
      }
    }

    /** The id of the partition holding the current entry. */
    public int partition() {
      return ids[index];
    }

    public long keyLong() {
      check();
      return keyType == KeyType.I64 ? part.getLong(keyAt) : keyType == KeyType.I32 ? part.getInt(keyAt) : fail("str");
    }

    private long fail(String what) {
      throw new IllegalStateException("the table has " + keyType.wireName() + " keys, not " + what);
    }

    /** The key's bytes (str keys). */
    public byte[] keyBytes() {
      check();
      if (keyType != KeyType.STR) {
        fail("integer");
      }
      return copy(keyAt, keyLen);
    }

    /** The key as UTF-8 text (str keys). */
    public String keyString() {
      return new String(keyBytes(), StandardCharsets.UTF_8);
    }

    /** A scalar numeric value as a long (integer types). */
    public long longValue() {
      check();
      if (!valueType.isScalar() || !integral(valueType.dtype())) {
        throw new IllegalStateException("the table holds " + valueType + " values, not integers");
      }
      return valueType.dtype().getInteger(part, valueAt);
    }

    /** A scalar numeric value as a double (f64 and f32). */
    public double doubleValue() {
      check();
      if (valueType.equals(ValueType.scalar(DType.F64))) {
        return part.getDouble(valueAt);
      }
      if (valueType.equals(ValueType.scalar(DType.F32))) {
        return part.getFloat(valueAt);
      }
      throw new IllegalStateException("the table holds " + valueType + " values, not floating-point numbers");
    }

    /** Number of elements of an array value, or bytes of a byte-string value. */
    public int valueLength() {
      check();
      return valueType.isArray() ? valueLen / valueType.dtype().size() : valueLen;
    }

    /** An array value (f64[] or f32[]) as doubles. */
    public double[] doubles() {
      check();
      DType d = valueType.dtype();
      if (!valueType.isArray() || (d != DType.F64 && d != DType.F32)) {
        throw new IllegalStateException("the table holds " + valueType + " values, not floating-point arrays");
      }
      double[] out = new double[valueLength()];
      for (int i = 0; i < out.length; i++) {
        out[i] = d == DType.F64 ? part.getDouble(valueAt + 8 * i) : part.getFloat(valueAt + 4 * i);
      }
      return out;
    }

    /** An array value of an integer type (i64[], i32[], u8[], i16[], …) as longs. */
    public long[] longs() {
      check();
      DType d = valueType.dtype();
      if (!valueType.isArray() || !integral(d)) {
        throw new IllegalStateException("the table holds " + valueType + " values, not integer arrays");
      }
      long[] out = new long[valueLength()];
      for (int i = 0; i < out.length; i++) {
        out[i] = d.getInteger(part, valueAt + d.size() * i);
      }
      return out;
    }

    /** A byte-string value. */
    public byte[] bytes() {
      check();
      if (!valueType.isBytes()) {
        throw new IllegalStateException("the table holds " + valueType + " values, not bytes");
      }
      return copy(valueAt, valueLen);
    }

    /** {@code len} bytes of the partition from {@code at} (its position stays). */
    private byte[] copy(int at, int len) {
      byte[] b = new byte[len];
      ByteBuffer d = part.duplicate();
      d.position(at);
      d.get(b);
      return b;
    }

    int entryLength() {
      return at - entryAt;
    }

    /** The current entry's encoded bytes (a view). */
    ByteBuffer rawEntry() {
      check();
      ByteBuffer b = part.duplicate();
      b.limit(at).position(entryAt);
      return b;
    }
  }
}
