package harp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.function.DoubleBinaryOperator;
import java.util.function.LongBinaryOperator;

/**
 * A key-value combiner written in Java: what a {@link KeyValueTable} does when two entries with
 * the same key meet (in {@code add} or in a collective). The engine calls {@link #combine} with
 * the key's bytes (8 or 4 little-endian bytes for integer keys, the bytes of a string key) and
 * the two values' bytes (little-endian numbers, or the byte string), the value already in the
 * table first; the result must be a value of the table's type (for a scalar table: exactly one
 * number). It may run on any thread, several at once, while a collective runs: it must be
 * thread-safe and must not use the table. An exception fails the operation on every worker
 * with its class and message; on the worker whose combiner threw it, the {@link HarpException}
 * the caller gets has that exception, unchanged, as its {@link Throwable#getCause() cause}.
 *
 * <p>This is the slow path (two JNI crossings and three copies per combination): prefer the
 * built-in {@link Combiner}s where one fits.
 */
public interface KvCombiner {
  /** The name in errors and logs. */
  default String name() {
    return getClass().getName();
  }

  byte[] combine(byte[] key, byte[] acc, byte[] other);

  /** {@code f} under the name {@code name}. */
  static KvCombiner named(String name, KvCombiner f) {
    return new KvCombiner() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public byte[] combine(byte[] key, byte[] acc, byte[] other) {
        return f.combine(key, acc, other);
      }
    };
  }

  /** A combiner of f64 scalar values. */
  static KvCombiner ofDoubles(String name, DoubleBinaryOperator f) {
    return named(name, (key, acc, other) -> {
      double a = ByteBuffer.wrap(acc).order(ByteOrder.LITTLE_ENDIAN).getDouble(0);
      double b = ByteBuffer.wrap(other).order(ByteOrder.LITTLE_ENDIAN).getDouble(0);
      return ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putDouble(0, f.applyAsDouble(a, b)).array();
    });
  }

  /** A combiner of i64 scalar values. */
  static KvCombiner ofLongs(String name, LongBinaryOperator f) {
    return named(name, (key, acc, other) -> {
      long a = ByteBuffer.wrap(acc).order(ByteOrder.LITTLE_ENDIAN).getLong(0);
      long b = ByteBuffer.wrap(other).order(ByteOrder.LITTLE_ENDIAN).getLong(0);
      return ByteBuffer.allocate(8).order(ByteOrder.LITTLE_ENDIAN).putLong(0, f.applyAsLong(a, b)).array();
    });
  }
}
