package harp.yarn;

import java.io.DataInputStream;
import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.serializer.Deserializer;
import org.apache.hadoop.io.serializer.SerializationFactory;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapreduce.Counter;
import org.apache.hadoop.mapreduce.Counters;
import org.apache.hadoop.mapreduce.InputFormat;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.MapContext;
import org.apache.hadoop.mapreduce.Mapper;
import org.apache.hadoop.mapreduce.OutputCommitter;
import org.apache.hadoop.mapreduce.OutputFormat;
import org.apache.hadoop.mapreduce.RecordReader;
import org.apache.hadoop.mapreduce.RecordWriter;
import org.apache.hadoop.mapreduce.StatusReporter;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.lib.map.WrappedMapper;
import org.apache.hadoop.mapreduce.task.MapContextImpl;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.hadoop.util.ReflectionUtils;

/**
 * A worker container's entry point: runs the job's mapper (a {@code CollectiveMapper}) as worker
 * {@code rank} with a real {@code Mapper.Context} over its assigned split, the job's
 * InputFormat/RecordReader, OutputFormat/RecordWriter/OutputCommitter (task side) and counters.
 * The mapper registers with the master at {@code harp.am.address} to find its peers.
 *
 * <p>{@code WorkerMain <job.xml> <rank> <split-file>}; the split file holds the split's class
 * name (UTF) followed by the split serialized with Hadoop's serialization. Exit status 0 on
 * success, 1 on failure (the error on stderr), 2 on bad arguments.
 */
public final class WorkerMain {
  private WorkerMain() {}

  /** Counters kept in memory and printed at the end (the master collects container logs). */
  static final class Reporter extends StatusReporter {
    final Counters counters = new Counters();
    String status = "";

    @Override
    public Counter getCounter(Enum<?> name) {
      return counters.findCounter(name);
    }

    @Override
    public Counter getCounter(String group, String name) {
      return counters.findCounter(group, name);
    }

    @Override
    public void progress() {}

    @Override
    public float getProgress() {
      return 0;
    }

    @Override
    public void setStatus(String s) {
      status = s;
    }
  }

  public static void main(String[] args) {
    if (args.length != 3) {
      System.err.println("usage: WorkerMain <job.xml> <rank> <split-file>");
      System.exit(2);
    }
    try {
      run(new JobConf(new Path(args[0])), Integer.parseInt(args[1]), new Path(args[2]));
      System.exit(0);
    } catch (Throwable t) {
      System.err.println("harp worker " + args[1] + " failed: " + t);
      t.printStackTrace();
      System.exit(1);
    }
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  static Reporter run(Configuration conf, int rank, Path splitFile) throws Exception {
    conf.setInt("harp.worker.rank", rank);
    JobID job = JobID.forName(conf.get("mapreduce.job.id", "job_local_0001"));
    TaskAttemptID attempt = new TaskAttemptID(new TaskID(job, TaskType.MAP, rank), 0);
    conf.set("mapreduce.task.attempt.id", attempt.toString());
    conf.setInt("mapreduce.task.partition", rank);
    TaskAttemptContextImpl task = new TaskAttemptContextImpl(conf, attempt);
    InputSplit split = readSplit(conf, splitFile);
    InputFormat inputFormat = ReflectionUtils.newInstance(task.getInputFormatClass(), conf);
    RecordReader reader = inputFormat.createRecordReader(split, task);
    OutputFormat outputFormat = ReflectionUtils.newInstance(task.getOutputFormatClass(), conf);
    OutputCommitter committer = outputFormat.getOutputCommitter(task);
    committer.setupTask(task);
    RecordWriter writer = outputFormat.getRecordWriter(task);
    Reporter reporter = new Reporter();
    MapContext mapContext = new MapContextImpl(conf, attempt, reader, writer, committer, reporter, split);
    reader.initialize(split, mapContext);
    Mapper.Context context = new WrappedMapper().getMapContext(mapContext);
    Mapper mapper = ReflectionUtils.newInstance(task.getMapperClass(), conf);
    try {
      mapper.run(context);
    } catch (Throwable t) {
      committer.abortTask(task);
      throw t;
    } finally {
      reader.close();
    }
    writer.close(task);
    if (committer.needsTaskCommit(task)) {
      committer.commitTask(task);
    }
    System.err.println("harp worker " + rank + " done: " + reporter.counters);
    return reporter;
  }

  @SuppressWarnings("unchecked")
  static InputSplit readSplit(Configuration conf, Path file) throws IOException, ClassNotFoundException {
    try (FSDataInputStream in = file.getFileSystem(conf).open(file)) {
      String cls = new DataInputStream(in).readUTF();
      Class<InputSplit> c = (Class<InputSplit>) conf.getClassByName(cls);
      Deserializer<InputSplit> d = new SerializationFactory(conf).getDeserializer(c);
      d.open(in);
      return d.deserialize(null);
    }
  }
}
