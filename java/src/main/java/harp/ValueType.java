package harp;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * The values of a {@link KeyValueTable}: one number of a {@link DType} ({@code f64}), any number
 * of them per entry ({@code f64[]}), or a byte string ({@code bytes}).
 */
public final class ValueType {
  /** A byte string per entry. */
  public static final ValueType BYTES = new ValueType(null, false);

  private final DType dtype;
  private final boolean array;

  private ValueType(DType dtype, boolean array) {
    this.dtype = dtype;
    this.array = array;
  }

  /** One number of {@code d} per entry. */
  public static ValueType scalar(DType d) {
    return new ValueType(Objects.requireNonNull(d, "dtype"), false);
  }

  /** Any number of {@code d} elements per entry. */
  public static ValueType array(DType d) {
    return new ValueType(Objects.requireNonNull(d, "dtype"), true);
  }

  /** The element type, or null for {@link #BYTES}. */
  public DType dtype() {
    return dtype;
  }

  public boolean isScalar() {
    return dtype != null && !array;
  }

  public boolean isArray() {
    return array;
  }

  public boolean isBytes() {
    return dtype == null;
  }

  /** The engine's name: {@code f64}, {@code f64[]}, …, {@code bytes}. */
  public String wireName() {
    return dtype == null ? "bytes" : dtype.wireName() + (array ? "[]" : "");
  }

  /** Every value type, in the engine's order (scalars, arrays, bytes). */
  public static List<ValueType> values() {
    List<ValueType> all = new ArrayList<>();
    for (DType d : DType.values()) {
      all.add(scalar(d));
    }
    for (DType d : DType.values()) {
      all.add(array(d));
    }
    all.add(BYTES);
    return all;
  }

  public static ValueType fromWireName(String name) {
    for (ValueType v : values()) {
      if (v.wireName().equals(name)) {
        return v;
      }
    }
    throw new IllegalArgumentException("unknown value type '" + name + "' (f64, i64, …, f64[], …, bytes)");
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof ValueType && ((ValueType) o).dtype == dtype && ((ValueType) o).array == array;
  }

  @Override
  public int hashCode() {
    return Objects.hash(dtype, array);
  }

  @Override
  public String toString() {
    return wireName();
  }
}
