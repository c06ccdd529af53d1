package harp.yarn;

import java.util.Arrays;

/**
 * A value class, what a record is in newer Java (our classes are Java 8 bytecode): two values are
 * equal when they are of the same class with equal fields; {@code toString} is a record's,
 * {@code Name[a=1, b=x]}.
 */
abstract class Value {
  /** The fields, in declaration order. */
  abstract Object[] fields();

  /** The fields' names, in the same order. */
  abstract String[] names();

  @Override
  public final boolean equals(Object o) {
    return o != null && o.getClass() == getClass() && Arrays.equals(fields(), ((Value) o).fields());
  }

  @Override
  public final int hashCode() {
    return Arrays.hashCode(fields());
  }

  @Override
  public String toString() {
    Object[] f = fields();
    String[] n = names();
    StringBuilder s = new StringBuilder(getClass().getSimpleName()).append('[');
    for (int i = 0; i < f.length; i++) {
      s.append(i == 0 ? "" : ", ").append(n[i]).append('=').append(f[i]);
    }
    return s.append(']').toString();
  }
}
