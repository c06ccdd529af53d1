package harp;

/**
 * The keys of a {@link KeyValueTable}: 64- or 32-bit integers, or byte strings ({@code str}; UTF-8
 * is not required, like Hadoop's {@code Text}). Strings given as {@link String} are stored as
 * their UTF-8 bytes.
 */
public enum KeyType {
  I64("i64"), I32("i32"), STR("str");

  private final String wireName;

  KeyType(String wireName) {
    this.wireName = wireName;
  }

  /** The engine's name of this key type. */
  public String wireName() {
    return wireName;
  }

  public static KeyType fromWireName(String name) {
    return Names.parse(values(), KeyType::wireName, name, "key type");
  }
}
