package harp;

import java.nio.ByteBuffer;
import java.util.function.DoubleBinaryOperator;
import java.util.function.LongBinaryOperator;

/**
 * A combiner of dense partitions written in Java: what a {@link Table} does when two partitions
 * with the same id meet (in {@link Table#merge}, or in a collective that combines: allreduce,
 * reduce, regroup, reduce-scatter, push). The engine calls {@link #combine} with direct buffers
 * over the two partitions' native memory (no copy, native byte order, position 0, the same
 * length, the same {@link DType}): fold {@code from} into {@code into}. {@code from} is
 * read-only; neither buffer may be kept after the call returns.
 *
 * <p>It may run on any thread, several at once, while a collective runs: it must be thread-safe
 * and must not use the table. An exception fails the operation on every worker with its class
 * and message; on the worker whose combiner threw it, the {@link HarpException} the caller gets
 * has that exception, unchanged, as its {@link Throwable#getCause() cause}. Every worker of a
 * collective must combine its table with a Java combiner (a worker using a built-in one is an
 * operation mismatch).
 *
 * <p>Each combination is one JNI crossing and no copy: slower than a built-in {@link Combiner}
 * (a call instead of a vectorised loop), but not per element.
 */
public interface DenseCombiner {
  /** The name in errors and logs. */
  default String name() {
    return getClass().getName();
  }

  /**
   * True when element i of the result depends only on element i of both partitions (sum, max,
   * …): the engine may then cut large partitions into ranges and combine range by range (and so
   * call {@link #combine} on ranges). False (the default): always whole partitions.
   */
  default boolean elementwise() {
    return false;
  }

  /** Folds {@code from} into {@code into}: both of element type {@code type} and equal length. */
  void combine(ByteBuffer into, ByteBuffer from, DType type);

  /** An element-wise combiner of f64 partitions: {@code into[i] = f(into[i], from[i])}. */
  static DenseCombiner ofDoubles(String name, DoubleBinaryOperator f) {
    return new ElementwiseCombiner(name, DType.F64,
        (into, from, at) -> into.putDouble(at, f.applyAsDouble(into.getDouble(at), from.getDouble(at))));
  }

  /** An element-wise combiner of i64 partitions: {@code into[i] = f(into[i], from[i])}. */
  static DenseCombiner ofLongs(String name, LongBinaryOperator f) {
    return new ElementwiseCombiner(name, DType.I64,
        (into, from, at) -> into.putLong(at, f.applyAsLong(into.getLong(at), from.getLong(at))));
  }
}
