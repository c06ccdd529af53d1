package harp;

/** Element types of a partition's array (values are stored in native byte order). */
public enum DType {
  F64("f64", 8), F32("f32", 4), I64("i64", 8), I32("i32", 4), U8("u8", 1);

  private final String wireName;
  private final int size;

  DType(String wireName, int size) {
    this.wireName = wireName;
    this.size = size;
  }

  /** Bytes per element. */
  public int size() {
    return size;
  }

  /** The engine's name of this type ({@code f64}, …). */
  public String wireName() {
    return wireName;
  }

  /** The type the engine calls {@code name}. */
  public static DType fromWireName(String name) {
    return Names.parse(values(), DType::wireName, name, "element type");
  }
}
