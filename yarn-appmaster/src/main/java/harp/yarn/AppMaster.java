package harp.yarn;

import harp.mapred.JobSecret;
import java.io.IOException;
import java.net.InetAddress;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
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
    /**
     * Registers with the ResourceManager, naming {@code host}:{@code rpcPort} as the master's
     * client service (our {@link StatusServer}); events arrive on {@code events} from then on.
     */
    void start(Events events, String host, int rpcPort) throws Exception;

    /** One container for {@code worker} on {@code node} exactly. */
    void request(int worker, String node, int memoryMb, int vcores);

    void release(String containerId);

    void launch(String containerId, ContainerLaunchContext ctx);

    void stop(String containerId);

    void finish(boolean succeeded, String diagnostics);

    /** Unregisters as KILLED (a client killed the job through the master's status service). */
    void finishKilled(String diagnostics);

    /**
     * The NodeManagers that can run containers now, as the ResourceManager lists them (a host
     * listed twice counts once); null if the master cannot ask.
     */
    default List<YarnSubmitter.Node> runningNodes() throws Exception {
      return null;
    }

    @Override
    void close();
  }

  /** What the cluster tells the master. */
  public interface Events {
    void allocated(String containerId, String node);

    void completed(String containerId, int exitStatus, String diagnostics);

    /** The ResourceManager wants the master gone, or the connection to it broke. */
    void failed(String why);

    /** The NodeManager of {@code node} did not answer a container status request. */
    default void nodeUnreachable(String node) {}

    /** The NodeManager of {@code node} answered a container status request. */
    default void nodeReachable(String node) {}

    /** The ResourceManager reports {@code node} lost, unhealthy or decommissioned. */
    default void nodeUnusable(String node) {}

    float progress();
  }

  /** File next to the job directory where the master leaves the job's summed counters. */
  public static Path countersFile(Path jobDir) {
    return new Path(jobDir.getParent(), jobDir.getName() + ".harp-counters");
  }

  /**
   * After a client killed the job, the status service stays up until a client has been told so
   * (the killing client asks once a second), at most this long.
   */
  static final long KILLED_LINGER_MS = 3_000;

  /** Time for that answer to leave before the service stops. */
  static final long KILLED_REPLY_MS = 200;

  private AppMaster() {}

  public static void main(String[] args) {
    int rc;
    try {
      String dir = System.getenv(LaunchSpec.ENV_JOB_DIR);
      if (dir == null) {
        throw new IllegalStateException(LaunchSpec.ENV_JOB_DIR + " is not set: the master runs in a container "
            + "launched by the map-collective client");
      }
      JobConf conf = new JobConf(WorkerMain.localFile(LaunchSpec.JOB_XML));
      // Which attempt this is (YARN restarts a failed master up to harp.yarn.am.max.attempts
      // times); the workers of attempt 2 or later resume from the last complete checkpoint.
      String container = System.getenv("CONTAINER_ID");
      if (container != null) {
        conf.setInt(LaunchSpec.AM_ATTEMPT, org.apache.hadoop.yarn.api.records.ContainerId.fromString(container)
            .getApplicationAttemptId().getAttemptId());
      }
      Credentials creds = UserGroupInformation.getCurrentUser().getCredentials();
      try (YarnPort port = new YarnPort(conf)) {
        rc = run(conf, new Path(dir), port, serialize(creds)) ? 0 : 1;
      }
    } catch (Throwable t) {
      System.err.println("harp application master failed: " + t);
      t.printStackTrace();
      rc = 1;
    }
    System.exit(rc);
  }

  /** Credentials as YARN carries them (a container launch context's tokens), and back. */
  static Credentials deserialize(ByteBuffer tokens) throws IOException {
    Credentials creds = new Credentials();
    if (tokens != null) {
      ByteBuffer b = tokens.duplicate();
      byte[] raw = new byte[b.remaining()];
      b.get(raw);
      try (java.io.DataInputStream in = new java.io.DataInputStream(new java.io.ByteArrayInputStream(raw))) {
        creds.readTokenStorageStream(in);
      }
    }
    return creds;
  }

  static ByteBuffer serialize(Credentials creds) throws IOException {
    DataOutputBuffer buf = new DataOutputBuffer();
    creds.writeTokenStorageToStream(buf);
    return ByteBuffer.wrap(buf.getData(), 0, buf.getLength());
  }

  /**
   * The credentials the workers get: the master's (the job's tokens and secret) without the
   * AMRM token, which lets its holder act as the application master towards the ResourceManager
   * (MapReduce strips it the same way).
   */
  static Credentials forWorkers(Credentials master) {
    Credentials out = new Credentials();
    for (org.apache.hadoop.io.Text alias : master.getAllSecretKeys()) {
      out.addSecretKey(alias, master.getSecretKey(alias));
    }
    for (org.apache.hadoop.security.token.Token<?> t : master.getAllTokens()) {
      if (!AMRM_TOKEN_KIND.equals(t.getKind())) {
        out.addToken(t.getService(), t);
      }
    }
    return out;
  }

  /** Kind of the token that authenticates the application master to the ResourceManager. */
  static final org.apache.hadoop.io.Text AMRM_TOKEN_KIND = new org.apache.hadoop.io.Text("YARN_AM_RM_TOKEN");

  /**
   * Runs the job to its end; true if it succeeded. {@code tokens}: the master container's
   * credentials, serialized (the job's tokens, the job secret and the AMRM token).
   */
  public static boolean run(Configuration conf, Path jobDir, Port port, ByteBuffer tokens) throws Exception {
    Credentials creds = deserialize(tokens);
    byte[] secret = JobSecret.of(creds);
    if (secret == null) {
      throw new IOException("the master's credentials hold no job secret (" + JobSecret.KEY + "): submit "
          + "map-collective jobs with -Dmapreduce.framework.name=map-collective");
    }
    ByteBuffer workerTokens = serialize(forWorkers(creds));
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
    Map<String, String> racks = new java.util.LinkedHashMap<>();
    List<String> nodes = readNodes(fs, new Path(new Path(jobDir, LaunchSpec.HARP_DIR), LaunchSpec.NODES_FILE), racks);
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

      @Override
      public void finishKilled(String diagnostics) {
        port.finishKilled(diagnostics);
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
          // Counters for the client of a job that succeeded (removed when the client reads them).
          if (h.master != null && h.master.state() != GangMaster.State.FAILED) {
            sumCounters(fs, jobDir);
          }
          fs.delete(jobDir, true);
        } catch (IOException e) {
          System.err.println("harp master: cleaning up " + jobDir + " failed: " + e);
        }
      }
    };
    GangMaster.NodeManager nm = new GangMaster.NodeManager() {
      @Override
      public void launch(String containerId, String node, int rank) {
        try {
          List<Long> offs = new ArrayList<>();
          for (Split s : h.groups.get(rank).splits()) {
            offs.add(offsetOf.get(s.index()));
          }
          port.launch(containerId, LaunchSpec.worker(conf, resources, rank, offs, h.registryAddress,
              cfg.memoryMb, workerTokens));
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
    GangMaster master = new GangMaster(cfg, rm, nm, commit);
    h.master = master;
    // Killed (yarn application -kill: the NodeManager sends SIGTERM, then SIGKILL shortly after):
    // nothing is committed, the output's temporary files and the staging directory go.
    Thread onKill = new Thread(() -> {
      if (master.state() != GangMaster.State.SUCCEEDED && master.state() != GangMaster.State.FAILED) {
        System.err.println("harp master: killed; aborting the output and removing " + jobDir);
        commit.abort();
        commit.cleanupStaging();
      }
    }, "harp-master-killed");
    Runtime.getRuntime().addShutdownHook(onKill);
    StatusServer.Job view = new StatusServer.Job() {
      @Override
      public org.apache.hadoop.mapreduce.v2.api.records.JobState state() {
        switch (master.state()) {
          case SUCCEEDED:
            return org.apache.hadoop.mapreduce.v2.api.records.JobState.SUCCEEDED;
          case FAILED:
            return master.killed() ? org.apache.hadoop.mapreduce.v2.api.records.JobState.KILLED
                : org.apache.hadoop.mapreduce.v2.api.records.JobState.FAILED;
          default:
            return org.apache.hadoop.mapreduce.v2.api.records.JobState.RUNNING;
        }
      }

      @Override
      public float progress() {
        return master.progress();
      }

      @Override
      public String diagnostics() {
        return master.diagnostics();
      }

      @Override
      public void kill(String why) {
        async.execute(() -> master.kill(why));
      }
    };
    String user = UserGroupInformation.getCurrentUser().getShortUserName();
    try (Registry reg = new Registry(master, secret, InetAddress.getByName(host));
        StatusServer status = new StatusServer(conf, "0.0.0.0", jobId, user, conf.get("mapreduce.job.name", "job"),
            new Path(jobDir, LaunchSpec.JOB_XML).toString(), view)) {
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
        public void nodeUnreachable(String node) {
          master.onNodeUnreachable(node, System.currentTimeMillis());
        }

        @Override
        public void nodeReachable(String node) {
          master.onNodeReachable(node);
        }

        @Override
        public void nodeUnusable(String node) {
          master.onNodeUnusable(node);
        }

        @Override
        public float progress() {
          return master.progress();
        }
      }, host, status.port());
      if (workers > splits.size()) {
        master.abort(AmConfig.WORKERS + "=" + workers + " but the input has only " + splits.size()
            + " splits (every worker needs at least one)");
      } else {
        h.groups = SplitGrouper.group(splits, workers);
        List<String> now = currentNodes(port, racks);
        master.start(System.currentTimeMillis(), now == null ? nodes : now, racks, h.groups);
      }
      while (master.state() != GangMaster.State.SUCCEEDED && master.state() != GangMaster.State.FAILED) {
        Thread.sleep(200);
        master.onTick(System.currentTimeMillis());
      }
      if (master.state() == GangMaster.State.FAILED) {
        System.err.println("harp master: job " + (master.killed() ? "killed: " : "failed: ") + master.diagnostics());
        reg.failAll(master.diagnostics());
        if (master.killed()) {
          // The killing client asks once more, and must hear KILLED: stop as soon as it has.
          if (status.awaitKilledReported(KILLED_LINGER_MS)) {
            Thread.sleep(KILLED_REPLY_MS);
          }
        }
      }
    } finally {
      async.shutdownNow();
      try {
        Runtime.getRuntime().removeShutdownHook(onKill);
      } catch (IllegalStateException shuttingDown) {
        // the hook runs
      }
    }
    return master.state() == GangMaster.State.SUCCEEDED;
  }

  /** Late-bound state shared by the adapters above. */
  private static final class Holder {
    volatile GangMaster master;
    volatile List<SplitGrouper.Group> groups;
    volatile String registryAddress;
  }

  /**
   * The usable nodes as the ResourceManager lists them now, their racks into {@code racks}: a
   * restarted master (attempt 2 or later) may run long after the submission, when nodes have
   * died or joined. Null, and a warning, if the ResourceManager cannot be asked (then the list
   * the client wrote at submission is used).
   */
  static List<String> currentNodes(Port port, Map<String, String> racks) {
    try {
      List<YarnSubmitter.Node> listed = port.runningNodes();
      if (listed == null) {
        return null;
      }
      List<String> nodes = new ArrayList<>();
      for (YarnSubmitter.Node node : listed) {
        if (node.host() != null && !node.host().isEmpty() && !nodes.contains(node.host())) {
          nodes.add(node.host());
          if (node.rack() != null && !node.rack().isEmpty()) {
            racks.put(node.host(), node.rack());
          }
        }
      }
      return nodes;
    } catch (Exception e) {
      System.err.println("harp master: cannot ask the ResourceManager for its nodes (" + e
          + "); using the " + LaunchSpec.NODES_FILE + " the client wrote at submission");
      return null;
    }
  }

  /** The usable nodes the client wrote ("host rack" lines), their racks into {@code racks}. */
  static List<String> readNodes(FileSystem fs, Path p, Map<String, String> racks) throws IOException {
    List<String> nodes = new ArrayList<>();
    try (FSDataInputStream in = fs.open(p)) {
      for (String l : new String(org.apache.hadoop.io.IOUtils.readFullyToByteArray(in), StandardCharsets.UTF_8).split("\n")) {
        String[] f = l.trim().split("\\s+");
        if (!f[0].isEmpty() && !nodes.contains(f[0])) {
          nodes.add(f[0]);
          if (f.length > 1) {
            racks.put(f[0], f[1]);
          }
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

}
