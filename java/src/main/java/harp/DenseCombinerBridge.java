package harp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * What the engine calls back for a table combined by a {@link DenseCombiner} (the native side is
 * {@code rust/harp-jni/src/dense_combiner.rs}): the buffers in native order, {@code from}
 * read-only, the element type by its engine name. An exception passes through unchanged.
 */
final class DenseCombinerBridge {
  private final DenseCombiner combiner;

  DenseCombinerBridge(DenseCombiner combiner) {
    if (combiner == null) {
      throw new IllegalArgumentException("the combiner is null");
    }
    this.combiner = combiner;
  }

  /** Called by the engine, on any thread. */
  void combine(ByteBuffer into, ByteBuffer from, String dtype) {
    combiner.combine(into.order(ByteOrder.nativeOrder()),
        from.asReadOnlyBuffer().order(ByteOrder.nativeOrder()), DType.fromWireName(dtype));
  }
}
