package harp.io;

import java.io.DataInput;
import java.io.DataOutput;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.io.Writable;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.RecordReader;
import org.apache.hadoop.mapreduce.TaskAttemptContext;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.input.FileSplit;
import org.apache.hadoop.mapreduce.lib.input.LineRecordReader;

/**
 * Text input grouped into exactly {@code harp.workers} splits, one per worker: the text splits
 * of the input are dealt out in byte-balanced groups (a worker may get none when the input is
 * small; every worker gets none when the job has no input path). Records are ({@link FilePosition}:
 * file and byte offset of the line, line text).
 */
public class WorkerInputFormat extends FileInputFormat<FilePosition, Text> {
  public static final String WORKERS = "harp.workers";

  @Override
  public List<InputSplit> getSplits(JobContext job) throws IOException {
    Configuration conf = job.getConfiguration();
    int workers = harp.ConfNumbers.getInt(conf, WORKERS, 0);
    if (workers <= 0) {
      throw new IOException(WORKERS + " must be set to the number of workers");
    }
    if (getInputPaths(job).length == 0) {
      // A job that reads no input (it generates its data): one empty split per worker.
      List<InputSplit> empty = new ArrayList<>();
      for (int i = 0; i < workers; i++) {
        empty.add(new GroupSplit());
      }
      return empty;
    }
    // Small enough splits that the groups balance.
    long total = 0;
    for (org.apache.hadoop.fs.FileStatus st : listStatus(job)) {
      if (st.isDirectory()) {
        // FileInputFormat lists a subdirectory as a file of no bytes; a worker would fail on it late.
        throw new IOException("input holds a subdirectory, " + st.getPath() + ": not a file (-D"
            + INPUT_DIR_RECURSIVE + "=true reads the files under it too)");
      }
      total += st.getLen();
    }
    conf.setLong("mapreduce.input.fileinputformat.split.maxsize", Math.max(1, total / (4L * workers) + 1));
    List<InputSplit> files = super.getSplits(job);
    List<GroupSplit> groups = new ArrayList<>();
    long[] load = new long[workers];
    for (int i = 0; i < workers; i++) {
      groups.add(new GroupSplit());
    }
    for (InputSplit s : files) {
      int best = 0;
      for (int i = 1; i < workers; i++) {
        if (load[i] < load[best]) {
          best = i;
        }
      }
      FileSplit f = (FileSplit) s;
      groups.get(best).splits.add(f);
      load[best] += f.getLength();
    }
    return new ArrayList<>(groups);
  }

  @Override
  public RecordReader<FilePosition, Text> createRecordReader(InputSplit split, TaskAttemptContext ctx) {
    return new GroupReader();
  }

  /** A worker's share: several file splits. */
  public static class GroupSplit extends InputSplit implements Writable {
    final List<FileSplit> splits = new ArrayList<>();

    /** A group of these file splits (a worker given several splits sees them as one). */
    public static GroupSplit of(List<FileSplit> fileSplits) {
      GroupSplit g = new GroupSplit();
      g.splits.addAll(fileSplits);
      return g;
    }

    /** The file splits of this group, in the order they are read. */
    public List<FileSplit> fileSplits() {
      return java.util.Collections.unmodifiableList(splits);
    }

    @Override
    public long getLength() {
      long n = 0;
      for (FileSplit f : splits) {
        n += f.getLength();
      }
      return n;
    }

    @Override
    public String[] getLocations() {
      return new String[0];
    }

    @Override
    public void write(DataOutput out) throws IOException {
      out.writeInt(splits.size());
      for (FileSplit f : splits) {
        f.write(out);
      }
    }

    @Override
    public void readFields(DataInput in) throws IOException {
      splits.clear();
      int n = in.readInt();
      for (int i = 0; i < n; i++) {
        FileSplit f = new FileSplit(new Path("/"), 0, 0, new String[0]);
        f.readFields(in);
        splits.add(f);
      }
    }
  }

  static class GroupReader extends RecordReader<FilePosition, Text> {
    private GroupSplit group;
    private TaskAttemptContext ctx;
    private int next;
    private LineRecordReader current;
    private Path file;
    private final FilePosition key = new FilePosition();

    @Override
    public void initialize(InputSplit split, TaskAttemptContext context) {
      group = (GroupSplit) split;
      ctx = context;
    }

    @Override
    public boolean nextKeyValue() throws IOException {
      while (true) {
        if (current != null && current.nextKeyValue()) {
          return true;
        }
        if (current != null) {
          current.close();
          current = null;
        }
        if (next >= group.splits.size()) {
          return false;
        }
        FileSplit f = group.splits.get(next++);
        file = f.getPath();
        current = new LineRecordReader();
        current.initialize(f, ctx);
      }
    }

    @Override
    public FilePosition getCurrentKey() {
      key.set(file.toString(), current.getCurrentKey().get());
      return key;
    }

    @Override
    public Text getCurrentValue() {
      return current.getCurrentValue();
    }

    @Override
    public float getProgress() throws IOException {
      return group.splits.isEmpty() ? 1f : (next - 1 + (current == null ? 1f : current.getProgress())) / group.splits.size();
    }

    @Override
    public void close() throws IOException {
      if (current != null) {
        current.close();
      }
    }
  }
}
