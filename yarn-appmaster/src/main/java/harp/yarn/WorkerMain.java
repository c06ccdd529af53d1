package harp.yarn;

import harp.rendezvous.RegistryClient;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;
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
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.util.ReflectionUtils;

/**
 * A worker container's entry point: runs the job's mapper (a {@code CollectiveMapper}) as worker
 * {@code rank} with a real {@code Mapper.Context} over its assigned splits, the job's
 * InputFormat/RecordReader, OutputFormat/RecordWriter/OutputCommitter (task side) and counters.
 * The mapper registers with the master at {@code harp.am.address} (or the container environment's
 * {@code HARP_AM_ADDRESS}) to find its peers; the worker tells the master its progress while it
 * runs and, if it fails, the error (so the master can blame the right worker).
 *
 * <p>{@code WorkerMain <job.xml> <rank> <job.split> <offset>[,<offset>...]}: the splits are read
 * from Hadoop's split file (written by the job submitter) at the given offsets, each a class name
 * followed by the split in Hadoop's serialization; several splits are read one after the other.
 * The task's counters are written to {@code <mapreduce.job.dir>/_harp/counters-<rank>} for the
 * client. Exit status 0 on success, 1 on failure (the error on stderr), 2 on bad arguments.
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
    if (args.length != 4) {
      System.err.println("usage: WorkerMain <job.xml> <rank> <job.split> <offset>[,<offset>...]");
      System.exit(2);
    }
    JobConf conf = null;
    try {
      List<Long> offsets = new ArrayList<>();
      for (String o : args[3].split(",")) {
        offsets.add(Long.parseLong(o));
      }
      conf = new JobConf(localFile(args[0]));
      // The container's credentials (YARN hands them over in the tokens file): the job's tokens
      // and the job secret, which the mapper's context exposes as the job's credentials.
      conf.getCredentials().addAll(UserGroupInformation.getCurrentUser().getCredentials());
      String am = System.getenv(LaunchSpec.ENV_AM_ADDRESS);
      if (am != null && !am.isEmpty()) {
        conf.set("harp.am.address", am);
      }
      if (LaunchSpec.resumeOnRestart(conf, System.getenv(LaunchSpec.ENV_AM_ATTEMPT))) {
        System.err.println("harp worker " + args[1] + ": the master restarted (attempt "
            + System.getenv(LaunchSpec.ENV_AM_ATTEMPT) + "): resuming from the last complete checkpoint");
      }
      run(conf, Integer.parseInt(args[1]), localFile(args[2]), offsets);
      // The result is committed: the master counts this worker as done even if its container's
      // ending never reaches it (the NodeManager died while the container ran on).
      RegistryClient master = master(conf);
      if (master != null && !master.done(Integer.parseInt(args[1]))) {
        System.err.println("harp worker " + args[1] + ": could not tell the master it is done (its container's exit will)");
      }
      System.exit(0);
    } catch (Throwable t) {
      System.err.println("harp worker " + args[1] + " failed: " + t);
      t.printStackTrace();
      if (conf != null) {
        RegistryClient master = master(conf);
        if (master != null && args[1].matches("[0-9]{1,9}")) {
          master.failed(Integer.parseInt(args[1]), describe(t));
        }
      }
      System.exit(1);
    }
  }

  /** One line saying what failed: the engine's operation and message, or the exception. */
  static String describe(Throwable t) {
    String s;
    if (t instanceof harp.HarpException) {
      harp.HarpException h = (harp.HarpException) t;
      s = (h.getOperation().isEmpty() ? "" : "in " + h.getOperation() + ": ") + h.getMessage();
    } else {
      s = t.toString();
    }
    s = s.replace('\r', ' ').replace('\n', ' ');
    return s.length() > 2000 ? s.substring(0, 2000) + "..." : s;
  }

  /** The master's registry (for progress and failure reports), or null if there is no master to tell. */
  static RegistryClient master(Configuration conf) {
    String am = conf.get("harp.am.address");
    byte[] secret;
    try {
      secret = harp.mapred.JobSecret.of(conf instanceof JobConf ? ((JobConf) conf).getCredentials()
          : UserGroupInformation.getCurrentUser().getCredentials());
    } catch (IOException e) {
      return null;
    }
    try {
      return am == null || secret == null ? null : new RegistryClient(am, secret, 5_000);
    } catch (IllegalArgumentException e) {
      System.err.println("harp worker: cannot tell the master: " + e.getMessage());
      return null;
    }
  }

  /**
   * Sends the mapper's progress (counters {@code harp.progress/done} and {@code /total}, set by
   * {@code CollectiveMapper.setProgress}) to the master every second while it changes.
   */
  static Thread progressReporter(Configuration conf, int rank, Reporter reporter) {
    Thread t = new Thread(() -> {
      long[] last = {-1, -1};
      try {
        while (!Thread.currentThread().isInterrupted()) {
          Thread.sleep(1_000);
          long done = reporter.counters.findCounter(PROGRESS_GROUP, "done").getValue();
          long total = reporter.counters.findCounter(PROGRESS_GROUP, "total").getValue();
          RegistryClient master = total > 0 && (done != last[0] || total != last[1]) ? master(conf) : null;
          if (master != null && master.progress(rank, done, total)) {
            last[0] = done;
            last[1] = total;
          }
        }
      } catch (InterruptedException e) {
        // the task is over
      }
    }, "harp-progress-to-master");
    t.setDaemon(true);
    return t;
  }

  /**
   * The split the mapper's context reports: the worker's only split, or, when the master gave it
   * several file splits, all of them as one group (so code that reads the task's split, such as
   * {@code harp.KMeans.forTask}, sees every split, not just the first).
   */
  static InputSplit contextSplit(List<InputSplit> splits) {
    if (splits.size() == 1) {
      return splits.get(0);
    }
    List<org.apache.hadoop.mapreduce.lib.input.FileSplit> files = new ArrayList<>();
    for (InputSplit s : splits) {
      if (s instanceof harp.io.WorkerInputFormat.GroupSplit) {
        files.addAll(((harp.io.WorkerInputFormat.GroupSplit) s).fileSplits());
      } else if (s instanceof org.apache.hadoop.mapreduce.lib.input.FileSplit) {
        files.add((org.apache.hadoop.mapreduce.lib.input.FileSplit) s);
      } else {
        return splits.get(0); // not file splits: the reader still reads them all
      }
    }
    return harp.io.WorkerInputFormat.GroupSplit.of(files);
  }

  /** Counter group: workers per host (the NodeManager's host name). */
  static final String HOSTS_GROUP = "Harp-RS workers per host";

  /** The host the container runs on: the NodeManager's name for it, else the local host name. */
  static String nodeName() {
    String nm = System.getenv("NM_HOST");
    if (nm != null && !nm.isEmpty()) {
      return nm;
    }
    try {
      return java.net.InetAddress.getLocalHost().getHostName();
    } catch (IOException e) {
      return "unknown-host";
    }
  }

  /** The counter group of a worker's progress (see harp.CollectiveMapper#setProgress). */
  static final String PROGRESS_GROUP = harp.CollectiveMapper.PROGRESS_GROUP;

  /**
   * A file in the container's working directory (job.xml, job.split as YARN localized them). A
   * bare {@code new Path("job.split")} would resolve against the default file system: on a real
   * cluster that is HDFS ({@code hdfs:///user/<user>/job.split}), not the container's directory.
   */
  static Path localFile(String name) {
    return new Path(new java.io.File(name).getAbsoluteFile().toURI());
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  static Reporter run(Configuration conf, int rank, Path splitFile, List<Long> offsets) throws Exception {
    conf.setInt("harp.worker.rank", rank);
    JobID job = jobId(conf);
    TaskAttemptID attempt = new TaskAttemptID(new TaskID(job, TaskType.MAP, rank), 0);
    conf.set("mapreduce.task.attempt.id", attempt.toString());
    conf.setInt("mapreduce.task.partition", rank);
    TaskAttemptContextImpl task = new TaskAttemptContextImpl(conf, attempt);
    List<InputSplit> splits = new ArrayList<>();
    for (long off : offsets) {
      splits.add(readSplit(conf, splitFile, off));
    }
    InputSplit split = contextSplit(splits);
    InputFormat inputFormat = ReflectionUtils.newInstance(task.getInputFormatClass(), conf);
    RecordReader reader = splits.size() == 1 ? inputFormat.createRecordReader(split, task)
        : new MultiSplitReader(inputFormat, splits, task);
    OutputFormat outputFormat = ReflectionUtils.newInstance(task.getOutputFormatClass(), conf);
    OutputCommitter committer = outputFormat.getOutputCommitter(task);
    committer.setupTask(task);
    RecordWriter writer = outputFormat.getRecordWriter(task);
    Reporter reporter = new Reporter();
    // Where the workers ran, as counters the client sums: one per host means one worker per node.
    reporter.counters.findCounter(HOSTS_GROUP, nodeName()).increment(1);
    MapContext mapContext = new MapContextImpl(conf, attempt, reader, writer, committer, reporter, split);
    reader.initialize(split, mapContext);
    Mapper.Context context = new WrappedMapper().getMapContext(mapContext);
    Mapper mapper = ReflectionUtils.newInstance(task.getMapperClass(), conf);
    Thread progress = progressReporter(conf, rank, reporter);
    progress.start();
    try {
      mapper.run(context);
    } catch (Throwable t) {
      committer.abortTask(task);
      throw t;
    } finally {
      progress.interrupt();
      reader.close();
    }
    writer.close(task);
    if (committer.needsTaskCommit(task)) {
      committer.commitTask(task);
    }
    System.err.println("harp worker " + rank + " done: " + reporter.counters);
    writeCounters(conf, rank, reporter.counters);
    return reporter;
  }

  /**
   * The job's id: {@code mapreduce.job.id} when set, else the name of the job directory
   * ({@code mapreduce.job.dir}), which the job submitter names after the job.
   */
  static JobID jobId(Configuration conf) {
    String dir = conf.get("mapreduce.job.dir");
    return JobID.forName(conf.get("mapreduce.job.id", dir == null ? "job_local_0001" : new Path(dir).getName()));
  }

  /**
   * Leaves the task's counters in the job directory, where the client sums them (without the
   * progress group, which is not a count).
   */
  static void writeCounters(Configuration conf, int rank, Counters all) throws IOException {
    String dir = conf.get("mapreduce.job.dir");
    if (dir == null) {
      return;
    }
    Counters counters = new Counters();
    for (org.apache.hadoop.mapreduce.CounterGroup g : all) {
      if (!g.getName().equals(PROGRESS_GROUP)) {
        for (Counter c : g) {
          counters.findCounter(g.getName(), c.getName()).setValue(c.getValue());
        }
      }
    }
    Path p = new Path(new Path(dir, "_harp"), "counters-" + rank);
    FileSystem fs = p.getFileSystem(conf);
    try (FSDataOutputStream out = fs.create(p, true)) {
      counters.write(out);
    }
  }

  @SuppressWarnings("unchecked")
  static InputSplit readSplit(Configuration conf, Path file, long offset) throws IOException, ClassNotFoundException {
    try (FSDataInputStream in = file.getFileSystem(conf).open(file)) {
      in.seek(offset);
      String cls = Text.readString(in);
      Class<InputSplit> c = (Class<InputSplit>) conf.getClassByName(cls);
      Deserializer<InputSplit> d = new SerializationFactory(conf).getDeserializer(c);
      d.open(in);
      return d.deserialize(null);
    }
  }
}
