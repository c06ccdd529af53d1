package harp;

import java.nio.ByteBuffer;

/**
 * Element types of a partition's array (values are stored in native byte order), in the engine's
 * wire-code order. Java has no unsigned integers: a {@code u16}, {@code u32} or {@code u64} value
 * is read and written through {@code short}, {@code int} or {@code long} holding the same bits
 * (convert with {@link Short#toUnsignedInt}, {@link Integer#toUnsignedLong},
 * {@link Long#toUnsignedString}); the engine compares and adds them as unsigned numbers.
 */
public enum DType {
  F64("f64", 8, false), F32("f32", 4, false), I64("i64", 8, true), I32("i32", 4, true), U8("u8", 1, false),
  I16("i16", 2, true), I8("i8", 1, true), U16("u16", 2, false), U32("u32", 4, false), U64("u64", 8, false);

  private final String wireName;
  private final int size;
  private final boolean signed;

  DType(String wireName, int size, boolean signed) {
    this.wireName = wireName;
    this.size = size;
    this.signed = signed;
  }

  /** Bytes per element. */
  public int size() {
    return size;
  }

  /** The engine's name of this type ({@code f64}, …). */
  public String wireName() {
    return wireName;
  }

  /** True for the integer types (signed or not). */
  public boolean isInteger() {
    return this != F64 && this != F32;
  }

  /** True for the signed integer types. */
  public boolean isSigned() {
    return signed;
  }

  /**
   * Whether the integer {@code v} is a value of this type ({@code u64}: any long, read as the
   * unsigned number with the same bits).
   */
  public boolean fits(long v) {
    if (size == 8) {
      return true;
    }
    int bits = 8 * size;
    return signed ? v >= -(1L << (bits - 1)) && v < (1L << (bits - 1)) : v >= 0 && v < (1L << bits);
  }

  /** Writes the integer {@code v} as one value of this type at the buffer's position. */
  void putInteger(ByteBuffer b, long v) {
    switch (size) {
      case 8:
        b.putLong(v);
        break;
      case 4:
        b.putInt((int) v);
        break;
      case 2:
        b.putShort((short) v);
        break;
      default:
        b.put((byte) v);
    }
  }

  /** The integer value of this type at byte {@code at} (unsigned types zero-extended; u64: its bits). */
  long getInteger(ByteBuffer b, int at) {
    switch (size) {
      case 8:
        return b.getLong(at);
      case 4:
        return signed ? b.getInt(at) : Integer.toUnsignedLong(b.getInt(at));
      case 2:
        return signed ? b.getShort(at) : Short.toUnsignedInt(b.getShort(at));
      default:
        return signed ? b.get(at) : Byte.toUnsignedInt(b.get(at));
    }
  }

  /** The type the engine calls {@code name}. */
  public static DType fromWireName(String name) {
    return Names.parse(values(), DType::wireName, name, "element type");
  }
}
