package harp;

import org.apache.hadoop.conf.Configuration;

/**
 * Whole-number job settings read with the key named in any error: Hadoop's own {@code getInt}
 * and {@code getLong} throw a bare {@link NumberFormatException} ("For input string: abc").
 */
public final class ConfNumbers {
  private ConfNumbers() {}

  /** {@code key} as a long, {@code fallback} when unset. */
  public static long getLong(Configuration conf, String key, long fallback) {
    try {
      return conf.getLong(key, fallback);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(
          key + " must be a whole number, not '" + conf.get(key) + "'", e);
    }
  }

  /** {@code key} as an int, {@code fallback} when unset. */
  public static int getInt(Configuration conf, String key, int fallback) {
    try {
      return conf.getInt(key, fallback);
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(
          key + " must be a whole number (at most " + Integer.MAX_VALUE + "), not '"
              + conf.get(key) + "'", e);
    }
  }
}
