package harp;

/**
 * What happens when two partitions with the same id meet in a table (in a collective or an
 * {@code add}). SUM, MIN and MAX work element by element for every element type.
 */
public enum Combiner {
  SUM("sum"), MIN("min"), MAX("max"),
  /** Keep the partition already in the table. */
  KEEP_FIRST("keep-first"),
  /** Meeting the same id twice is an error. */
  REJECT("reject"),
  /**
   * Key-value tables: values of equal keys are concatenated (arrays, byte strings). Dense
   * partitions cannot be appended (combining them with it is an error).
   */
  APPEND("append");

  private final String wireName;

  Combiner(String wireName) {
    this.wireName = wireName;
  }

  /** The engine's name of this combiner ({@code sum}, …). */
  public String wireName() {
    return wireName;
  }
}
