package harp.yarn;

import java.io.IOException;
import java.util.List;
import org.apache.hadoop.mapreduce.InputFormat;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.hadoop.mapreduce.RecordReader;
import org.apache.hadoop.mapreduce.TaskAttemptContext;

/**
 * Reads several input splits one after the other with the job's InputFormat, for a worker that
 * was given more than one split. Each split's reader is created and initialized when the
 * previous one is exhausted, and closed then.
 */
final class MultiSplitReader<K, V> extends RecordReader<K, V> {
  private final InputFormat<K, V> format;
  private final List<InputSplit> splits;
  private final TaskAttemptContext task;
  private int next;
  private RecordReader<K, V> current;
  private long total;
  private long done;

  MultiSplitReader(InputFormat<K, V> format, List<InputSplit> splits, TaskAttemptContext task)
      throws IOException, InterruptedException {
    this.format = format;
    this.splits = splits;
    this.task = task;
    for (InputSplit s : splits) {
      total += s.getLength();
    }
  }

  @Override
  public void initialize(InputSplit ignored, TaskAttemptContext context) throws IOException, InterruptedException {
    advance();
  }

  private boolean advance() throws IOException, InterruptedException {
    if (current != null) {
      done += splits.get(next - 1).getLength();
      current.close();
      current = null;
    }
    if (next >= splits.size()) {
      return false;
    }
    InputSplit s = splits.get(next++);
    current = format.createRecordReader(s, task);
    current.initialize(s, task);
    return true;
  }

  @Override
  public boolean nextKeyValue() throws IOException, InterruptedException {
    while (current != null) {
      if (current.nextKeyValue()) {
        return true;
      }
      if (!advance()) {
        return false;
      }
    }
    return false;
  }

  @Override
  public K getCurrentKey() throws IOException, InterruptedException {
    return current.getCurrentKey();
  }

  @Override
  public V getCurrentValue() throws IOException, InterruptedException {
    return current.getCurrentValue();
  }

  @Override
  public float getProgress() throws IOException, InterruptedException {
    if (total == 0 || current == null) {
      return next >= splits.size() && current == null ? 1f : 0f;
    }
    long inCurrent = (long) (current.getProgress() * splits.get(next - 1).getLength());
    return Math.min(1f, (float) (done + inCurrent) / total);
  }

  @Override
  public void close() throws IOException {
    if (current != null) {
      current.close();
      current = null;
    }
  }
}
