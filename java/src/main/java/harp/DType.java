package harp;

/** Element types of a partition's array (values are stored in native byte order). */
public enum DType {
  F64(0, 8), F32(1, 4), I64(2, 8), I32(3, 4), U8(4, 1);

  final int code;
  final int size;

  DType(int code, int size) {
    this.code = code;
    this.size = size;
  }

  /** Bytes per element. */
  public int size() {
    return size;
  }

  static DType of(int code) {
    for (DType t : values()) {
      if (t.code == code) {
        return t;
      }
    }
    throw new HarpException("unknown element type " + code, -1, "");
  }
}
