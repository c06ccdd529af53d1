package harp;

/**
 * What happens when two partitions with the same id meet in a table (in a collective or an
 * {@code add}). SUM, MIN and MAX work element by element for every element type.
 */
public enum Combiner {
  SUM(0), MIN(1), MAX(2),
  /** Keep the partition already in the table. */
  KEEP_FIRST(3),
  /** Meeting the same id twice is an error. */
  REJECT(4);

  final int code;

  Combiner(int code) {
    this.code = code;
  }
}
