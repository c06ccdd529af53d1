package harp;

import java.nio.ByteBuffer;

/** A {@link DenseCombiner} of one element type that folds element by element (its factories). */
final class ElementwiseCombiner implements DenseCombiner {
  /** Folds the element at byte {@code at} of {@code from} into {@code into}. */
  interface Step {
    void apply(ByteBuffer into, ByteBuffer from, int at);
  }

  private final String name;
  private final DType type;
  private final Step step;

  ElementwiseCombiner(String name, DType type, Step step) {
    this.name = name;
    this.type = type;
    this.step = step;
  }

  @Override
  public String name() {
    return name;
  }

  @Override
  public boolean elementwise() {
    return true;
  }

  @Override
  public void combine(ByteBuffer into, ByteBuffer from, DType t) {
    if (t != type) {
      throw new IllegalArgumentException(name + " combines " + type.wireName() + " partitions, not " + t.wireName());
    }
    for (int at = 0; at < into.capacity(); at += type.size()) {
      step.apply(into, from, at);
    }
  }
}
