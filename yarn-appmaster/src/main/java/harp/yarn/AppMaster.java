package harp.yarn;

import java.io.IOException;
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.DataOutputBuffer;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapreduce.Counters;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.JobStatus;
import org.apache.hadoop.mapreduce.OutputCommitter;
import org.apache.hadoop.mapreduce.OutputFormat;
import org.apache.hadoop.mapreduce.TaskAttemptID;
import org.apache.hadoop.mapreduce.TaskID;
import org.apache.hadoop.mapreduce.TaskType;
import org.apache.hadoop.mapreduce.split.JobSplit;
import org.apache.hadoop.mapreduce.split.SplitMetaInfoReader;
import org.apache.hadoop.mapreduce.task.JobContextImpl;
import org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.util.ReflectionUtils;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;

/**
 * The map-collective application master. It reads the job from its staging directory (job.xml,
 * the split files, the usable node list the client wrote), groups the splits per worker, and
 * lets {@link GangMaster} decide placement, gang start and failure handling; {@link Registry}
 * hands the workers their peers. YARN is reached only through {@link Port} ({@link YarnPort}
 * over AMRMClientAsync and NMClientAsync in a real container, a fake in tests).
 */
public final class AppMaster {
  /** Where the master's requests go. */
  public interface Port extends AutoCloseable {
    /** Registers with the ResourceManager; events arrive on {@code events} from then on. */
    void start(Events events, String host, int port) throws Exception;

    /** One container for {@code worker} on {@code node} exactly. */
    void request(int worker, String node, int memoryMb, int vcores);

    void release(String containerId);

    void launch(String containerId, ContainerLaunchContext ctx);

    void stop(String containerId);

    void finish(boolean succeeded, String diagnostics);

    @Override
    void close();
  }

  /** What the cluster tells the master. */
  public interface Events {
    void allocated(String containerId, String node);

    void completed(String containerId, int exitStatus, String diagnostics);

    /** The ResourceManager wants the master gone, or the connection to it broke. */
    void failed(String why);

    float progress();
  }

  /** File next to the job directory where the master leaves the job's summed counters. */
  public static Path countersFile(Path jobDir) {
    return new Path(jobDir.getParent(), jobDir.getName() + ".harp-counters");
  }

  private AppMaster() {}

  public static void main(String[] args) {
    int rc;
    try {
      String dir = System.getenv(LaunchSpec.ENV_JOB_DIR);
      if (dir == null) {
        throw new IllegalStateException(LaunchSpec.ENV_JOB_DIR + " is not set: the master runs in a container "
            + "launched by the map-collective client");
      }
      JobConf conf = new JobConf(new Path(LaunchSpec.JOB_XML));
      Credentials creds = UserGroupInformation.getCurrentUser().getCredentials();
      DataOutputBuffer buf = new DataOutputBuffer();
      creds.writeTokenStorageToStream(buf);
      ByteBuffer tokens = ByteBuffer.wrap(buf.getData(), 0, buf.getLength());
      try (YarnPort port = new YarnPort(conf)) {
        rc = run(conf, new Path(dir), port, tokens) ? 0 : 1;
      }
    } catch (Throwable t) {
      System.err.println("harp application master failed: " + t);
      t.printStackTrace();
      rc = 1;
    }
    System.exit(rc);
  }

  /** Runs the job to its end; true if it succeeded. */
  public static boolean run(Configuration conf, Path jobDir, Port port, ByteBuffer tokens) throws Exception {
    FileSystem fs = jobDir.getFileSystem(conf);
    JobID jobId = WorkerMain.jobId(conf);
    conf.set("mapreduce.job.id", jobId.toString());
    AmConfig cfg = AmConfig.from(k -> conf.getLong(k[0], Long.parseLong(k[1])));
    List<Split> splits = new ArrayList<>();
    Map<Integer, Long> offsetOf = new HashMap<>();
    JobSplit.TaskSplitMetaInfo[] metas = SplitMetaInfoReader.readSplitMetaInfo(jobId, fs, conf, jobDir);
    for (int i = 0; i < metas.length; i++) {
      splits.add(new Split(i, metas[i].getInputDataLength(), Arrays.asList(metas[i].getLocations())));
      offsetOf.put(i, metas[i].getStartOffset());
    }
    int workers = cfg.workers == 0 ? splits.size() : cfg.workers;
    List<String> nodes = readNodes(fs, new Path(new Path(jobDir, LaunchSpec.HARP_DIR), LaunchSpec.NODES_FILE));

    String secret = conf.get("harp.job.secret");
    if (secret == null || secret.isEmpty()) {
      secret = randomHex(24);
    }
    String token = randomHex(24);
    String host = conf.get("harp.am.host", System.getenv().getOrDefault("NM_HOST",
        InetAddress.getLocalHost().getCanonicalHostName()));
    Map<String, org.apache.hadoop.yarn.api.records.LocalResource> resources = LaunchSpec.resources(conf, jobDir);

    JobContext jc = new JobContextImpl(conf, jobId);
    TaskAttemptContextImpl setupTask = new TaskAttemptContextImpl(conf,
        new TaskAttemptID(new TaskID(jobId, TaskType.JOB_SETUP, 0), 0));
    OutputFormat<?, ?> of = ReflectionUtils.newInstance(jc.getOutputFormatClass(), conf);
    OutputCommitter committer = of.getOutputCommitter(setupTask);
    committer.setupJob(jc);

    ExecutorService async = Executors.newSingleThreadExecutor(r -> {
      Thread t = new Thread(r, "harp-am-async");
      t.setDaemon(true);
      return t;
    });
    Holder h = new Holder();
    GangMaster.ResourceManager rm = new GangMaster.ResourceManager() {
      @Override
      public void request(int worker, String node, int memoryMb, int vcores) {
        port.request(worker, node, memoryMb, vcores);
      }

      @Override
      public void release(String containerId) {
        port.release(containerId);
      }

      @Override
      public void finish(boolean succeeded, String diagnostics) {
        port.finish(succeeded, diagnostics);
      }
    };
    GangMaster.Committer commit = new GangMaster.Committer() {
      @Override
      public void commit() throws Exception {
        committer.commitJob(jc);
      }

      @Override
      public void abort() {
        try {
          committer.abortJob(jc, JobStatus.State.FAILED);
        } catch (IOException e) {
          System.err.println("harp master: aborting the output failed: " + e);
        }
      }

      @Override
      public void cleanupStaging() {
        try {
          sumCounters(fs, jobDir);
          fs.delete(jobDir, true);
        } catch (IOException e) {
          System.err.println("harp master: cleaning up " + jobDir + " failed: " + e);
        }
      }
    };
    String finalSecret = secret;
    GangMaster.NodeManager nm = new GangMaster.NodeManager() {
      @Override
      public void launch(String containerId, String node, int rank) {
        try {
          List<Long> offs = new ArrayList<>();
          for (Split s : h.groups.get(rank).splits()) {
            offs.add(offsetOf.get(s.index()));
          }
          port.launch(containerId, LaunchSpec.worker(conf, resources, rank, offs, h.registryAddress, token,
              cfg.memoryMb, tokens));
        } catch (IOException | RuntimeException e) {
          String why = "cannot launch worker " + rank + ": " + e;
          async.execute(() -> h.master.onCompleted(containerId, -1, why));
        }
      }

      @Override
      public void stop(String containerId) {
        port.stop(containerId);
      }
    };
    GangMaster master = new GangMaster(cfg, rm, nm, commit, finalSecret);
    h.master = master;
    try (Registry reg = new Registry(master, token, InetAddress.getByName(host))) {
      h.registryAddress = host + ":" + reg.port();
      port.start(new Events() {
        @Override
        public void allocated(String containerId, String node) {
          master.onAllocated(new GangMaster.Container(containerId, node));
        }

        @Override
        public void completed(String containerId, int exitStatus, String diagnostics) {
          master.onCompleted(containerId, exitStatus, diagnostics);
        }

        @Override
        public void failed(String why) {
          master.abort(why);
        }

        @Override
        public float progress() {
          return master.progress();
        }
      }, host, reg.port());
      if (workers > splits.size()) {
        master.abort(AmConfig.WORKERS + "=" + workers + " but the input has only " + splits.size()
            + " splits (every worker needs at least one)");
      } else {
        h.groups = SplitGrouper.group(splits, workers);
        master.start(System.currentTimeMillis(), nodes, h.groups);
      }
      while (master.state() != GangMaster.State.SUCCEEDED && master.state() != GangMaster.State.FAILED) {
        Thread.sleep(200);
        master.onTick(System.currentTimeMillis());
      }
      if (master.state() == GangMaster.State.FAILED) {
        System.err.println("harp master: job failed: " + master.diagnostics());
        reg.failAll(master.diagnostics());
      }
    } finally {
      async.shutdownNow();
    }
    return master.state() == GangMaster.State.SUCCEEDED;
  }

  /** Late-bound state shared by the adapters above. */
  private static final class Holder {
    volatile GangMaster master;
    volatile List<SplitGrouper.Group> groups;
    volatile String registryAddress;
  }

  static List<String> readNodes(FileSystem fs, Path p) throws IOException {
    List<String> nodes = new ArrayList<>();
    try (FSDataInputStream in = fs.open(p)) {
      for (String l : new String(in.readAllBytes(), StandardCharsets.UTF_8).split("\n")) {
        if (!l.isBlank()) {
          nodes.add(l.trim());
        }
      }
    }
    return nodes;
  }

  /** Sums the workers' counter files into {@link #countersFile} for the client. */
  static void sumCounters(FileSystem fs, Path jobDir) throws IOException {
    Path dir = new Path(jobDir, LaunchSpec.HARP_DIR);
    Counters total = new Counters();
    if (!fs.exists(dir)) {
      return;
    }
    for (FileStatus st : fs.listStatus(dir)) {
      if (st.getPath().getName().startsWith("counters-")) {
        Counters c = new Counters();
        try (FSDataInputStream in = fs.open(st.getPath())) {
          c.readFields(in);
        }
        total.incrAllCounters(c);
      }
    }
    try (FSDataOutputStream out = fs.create(countersFile(jobDir), true)) {
      total.write(out);
    }
  }

  /** {@code bytes} random bytes from SecureRandom, in hex (job secrets, registration tokens). */
  public static String randomHex(int bytes) {
    byte[] b = new byte[bytes];
    new SecureRandom().nextBytes(b);
    StringBuilder sb = new StringBuilder();
    for (byte x : b) {
      sb.append(String.format("%02x", x));
    }
    return sb.toString();
  }
}
