package harp;

import java.io.IOException;
import org.apache.hadoop.mapreduce.Mapper;

/** Reads this worker's input records (the splits Hadoop assigned to this map task). */
public final class KeyValReader<K, V> {
  private final Mapper<K, V, ?, ?>.Context context;

  KeyValReader(Mapper<K, V, ?, ?>.Context context) {
    this.context = context;
  }

  /** Advances to the next record; false at the end of the input. */
  public boolean nextKeyValue() throws IOException, InterruptedException {
    return context.nextKeyValue();
  }

  public K getCurrentKey() throws IOException, InterruptedException {
    return context.getCurrentKey();
  }

  public V getCurrentValue() throws IOException, InterruptedException {
    return context.getCurrentValue();
  }
}
