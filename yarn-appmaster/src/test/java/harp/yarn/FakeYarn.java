package harp.yarn;

import java.io.File;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.apache.hadoop.yarn.api.records.YarnApplicationState;

/**
 * A stand-in for a YARN cluster (none can run here) that still runs the real code paths: the
 * client's submission goes through Hadoop's job submitter into {@link YarnSubmitter}; the
 * application master runs {@link AppMaster#run} in this JVM with this class as its {@link
 * AppMaster.Port}; a container "launch" does what a NodeManager does: it links the local
 * resources into a container directory (a PATTERN resource as a directory holding the file),
 * writes a launch script exporting the environment with YARN's expansion markers replaced, and
 * runs the command as a real process. Containers are granted at once on the node asked for.
 */
public final class FakeYarn implements YarnSubmitter.Rm, AppMaster.Port {
  /** The cluster's nodes (all this machine). */
  static volatile List<String> nodes = List.of("n0", "n1", "n2");
  /** Where container directories go. */
  static volatile Path root;
  /** The last instance created (tests inspect it). */
  static volatile FakeYarn last;
  /** When set, the cluster's nodes become these once a job is submitted (before its master starts). */
  static volatile List<String> nodesAfterSubmit;
  /** Requests for this node are recorded but never granted. */
  static volatile String withheld = "";
  /** When set, the container of this rank exits with status 3 before doing anything. */
  static volatile int failRank = -1;
  /**
   * When set, the container of this rank is killed with SIGKILL {@link #killAfterMs} after every
   * worker has registered, and its ending is reported only after every other container's (as a ResourceManager
   * may batch them), so a master that blames the first ending it hears of blames a survivor.
   */
  static volatile int killRank = -1;
  static volatile long killAfterMs = 2_000;
  /** Racks of the nodes (node to rack); nodes not listed have none. */
  static volatile Map<String, String> racks = Map.of();
  /** The kind of token a ResourceManager adds to the master's credentials. */
  static final org.apache.hadoop.io.Text AMRM_KIND = new org.apache.hadoop.io.Text("YARN_AM_RM_TOKEN");

  final List<ApplicationSubmissionContext> submitted = new ArrayList<>();
  final List<String> requests = new ArrayList<>();
  final Map<String, Process> running = new ConcurrentHashMap<>();
  /** The launch contexts of the workers' containers, by rank. */
  final Map<Integer, ContainerLaunchContext> launched = new ConcurrentHashMap<>();
  /** Containers the master stopped (their endings are reported as KILLED_BY_APPMASTER, -105). */
  private final java.util.Set<String> stoppedByMaster = ConcurrentHashMap.newKeySet();
  private final java.util.Set<String> ended = ConcurrentHashMap.newKeySet();
  private final Map<String, Integer> rankOf = new ConcurrentHashMap<>();
  private final AtomicInteger ids = new AtomicInteger();
  private volatile AppMaster.Events events;
  private volatile YarnApplicationState state = YarnApplicationState.NEW;
  private volatile FinalApplicationStatus finalStatus = FinalApplicationStatus.UNDEFINED;
  private volatile String diagnostics = "";
  private volatile Thread master;
  volatile Throwable masterError;
  /**
   * Killed by a client: as with a ResourceManager, the application then stays KILLED whatever its
   * master does or reports afterwards (a master that had not started yet is told at once).
   */
  private volatile boolean killedByClient;

  /** When set, the next client gets the last instance (a second client of the same cluster). */
  static volatile boolean reuse;
  /** job.xml as the client staged it (read when the application is submitted). */
  volatile String stagedJobXml = "";

  public static FakeYarn create(Configuration conf) {
    if (reuse && last != null) {
      return last;
    }
    last = new FakeYarn();
    return last;
  }

  // ---- the client's view (YarnSubmitter.Rm)

  @Override
  public ApplicationId newApplication() {
    return ApplicationId.newInstance(1700000000000L, 42);
  }

  @Override
  public List<YarnSubmitter.Node> runningNodes() {
    List<YarnSubmitter.Node> out = new ArrayList<>();
    for (String n : nodes) {
      out.add(new YarnSubmitter.Node(n, racks.get(n)));
    }
    return out;
  }

  @Override
  public List<YarnSubmitter.App> applications() {
    List<YarnSubmitter.App> out = new ArrayList<>();
    if (!submitted.isEmpty()) {
      ApplicationSubmissionContext c = submitted.get(0);
      out.add(new YarnSubmitter.App(c.getApplicationId(), c.getApplicationName(), System.getProperty("user.name"),
          c.getQueue(), report(c.getApplicationId())));
    }
    return out;
  }

  @Override
  public synchronized void submit(ApplicationSubmissionContext ctx) {
    submitted.add(ctx);
    state = YarnApplicationState.ACCEPTED;
    if (nodesAfterSubmit != null) {
      nodes = nodesAfterSubmit;
    }
    String jobDir = ctx.getAMContainerSpec().getEnvironment().get(LaunchSpec.ENV_JOB_DIR);
    try {
      stagedJobXml = Files.readString(Path.of(ctx.getAMContainerSpec().getLocalResources().get(LaunchSpec.JOB_XML)
          .getResource().getFile()));
    } catch (IOException e) {
      stagedJobXml = "unreadable: " + e;
    }
    master = new Thread(() -> {
      try {
        // What the master's container sees: job.xml localized from the job directory.
        Path dir = Files.createDirectories(root.resolve("am"));
        link(ctx.getAMContainerSpec().getLocalResources(), dir);
        JobConf conf = new JobConf(new org.apache.hadoop.fs.Path(dir.resolve(LaunchSpec.JOB_XML).toUri()));
        synchronized (FakeYarn.this) {
          if (!killedByClient) {
            state = YarnApplicationState.RUNNING;
          }
        }
        boolean ok = AppMaster.run(conf, new org.apache.hadoop.fs.Path(jobDir), this,
            withAmrmToken(ctx.getAMContainerSpec().getTokens()));
        if (!ok && finalStatus == FinalApplicationStatus.UNDEFINED) {
          finish(false, "master returned failure");
        }
      } catch (Throwable t) {
        masterError = t;
        finish(false, "master crashed: " + t);
      }
    }, "fake-am");
    master.setDaemon(true);
    master.start();
  }

  @Override
  public YarnSubmitter.AppState report(ApplicationId id) {
    float p = events == null ? 0f : events.progress();
    return new YarnSubmitter.AppState(state, finalStatus, p, diagnostics, "http://fake-rm/app", 1L, 2L);
  }

  @Override
  public void kill(ApplicationId id) {
    synchronized (this) {
      killedByClient = true;
      state = YarnApplicationState.KILLED;
      finalStatus = FinalApplicationStatus.KILLED;
    }
    AppMaster.Events ev = events;
    if (ev != null) {
      ev.failed("killed by the user");
    }
  }

  /** Waits (at most 60 s) until the master of the last application has returned. */
  static void awaitMaster() throws InterruptedException {
    FakeYarn y = last;
    Thread t = y == null ? null : y.master;
    if (t != null) {
      t.join(60_000);
    }
  }

  /** The master's credentials as a ResourceManager makes them: the client's plus an AMRM token. */
  static java.nio.ByteBuffer withAmrmToken(java.nio.ByteBuffer tokens) throws IOException {
    org.apache.hadoop.security.Credentials c = AppMaster.deserialize(tokens);
    c.addToken(new org.apache.hadoop.io.Text("fake-rm:8030"), new org.apache.hadoop.security.token.Token<>(
        new byte[] {1, 2, 3}, new byte[] {4, 5, 6}, AMRM_KIND, new org.apache.hadoop.io.Text("fake-rm:8030")));
    return AppMaster.serialize(c);
  }

  // ---- the master's view (AppMaster.Port)

  /** The master's client service as it registered it. */
  volatile String amHost;
  volatile int amRpcPort;

  @Override
  public void start(AppMaster.Events ev, String host, int rpcPort) {
    this.events = ev;
    this.amHost = host;
    this.amRpcPort = rpcPort;
    if (killedByClient) {
      ev.failed("killed by the user");
    }
  }

  @Override
  public synchronized void finishKilled(String diag) {
    diagnostics = diag;
    if (killedByClient) {
      return;
    }
    finalStatus = FinalApplicationStatus.KILLED;
    state = YarnApplicationState.FINISHED;
  }

  @Override
  public synchronized void request(int worker, String node, int memoryMb, int vcores) {
    requests.add(worker + "@" + node);
    String id = "container_1700000000000_0042_01_" + String.format("%06d", ids.incrementAndGet() + 1);
    rankOf.put(id, worker);
    if (node.equals(withheld)) {
      return;
    }
    Thread t = new Thread(() -> events.allocated(id, node));
    t.setDaemon(true);
    t.start();
  }

  @Override
  public void release(String containerId) {}

  @Override
  public void launch(String containerId, ContainerLaunchContext ctx) {
    try {
      Path dir = Files.createDirectories(root.resolve(containerId));
      Path logs = Files.createDirectories(dir.resolve("logs"));
      link(ctx.getLocalResources(), dir);
      int rank = rankOf.getOrDefault(containerId, -1);
      launched.put(rank, ctx);
      // Like a NodeManager: the container's credentials in a token file named by the environment.
      Path tokenFile = dir.resolve("container_tokens");
      try (java.io.DataOutputStream o = new java.io.DataOutputStream(Files.newOutputStream(tokenFile))) {
        AppMaster.deserialize(ctx.getTokens()).writeTokenStorageToStream(o);
      }
      StringBuilder script = new StringBuilder("#!/bin/bash\n");
      script.append("export HADOOP_TOKEN_FILE_LOCATION='").append(tokenFile).append("'\n");
      script.append("export JAVA_HOME='").append(System.getProperty("java.home")).append("'\n");
      script.append("export PWD='").append(dir).append("'\ncd \"$PWD\"\n");
      for (Map.Entry<String, String> e : ctx.getEnvironment().entrySet()) {
        script.append("export ").append(e.getKey()).append("=\"").append(expand(e.getValue(), logs)).append("\"\n");
      }
      if (rankOf.getOrDefault(containerId, -1) == failRank) {
        script.append("echo 'deliberate container failure' >&2; exit 3\n");
      }
      script.append("exec ").append(expand(String.join(" ", ctx.getCommands()), logs)).append('\n');
      Path sh = dir.resolve("launch_container.sh");
      Files.writeString(sh, script.toString());
      Process p = new ProcessBuilder("bash", sh.toString()).directory(dir.toFile())
          .redirectErrorStream(true).redirectOutput(logs.resolve("launcher.out").toFile()).start();
      running.put(containerId, p);
      if (rank == killRank) {
        Thread k = new Thread(() -> {
          try {
            // Once every worker has registered (the master's progress reaches 10 %), then a bit.
            while (events.progress() < 0.1f) {
              Thread.sleep(20);
            }
            Thread.sleep(killAfterMs);
            p.toHandle().destroyForcibly(); // SIGKILL
          } catch (InterruptedException e) {
            // test over
          }
        });
        k.setDaemon(true);
        k.start();
      }
      Thread w = new Thread(() -> {
        try {
          int rc = p.waitFor();
          if (rank == killRank) {
            // Reported last, after every other container's ending (within 20 s).
            long until = System.currentTimeMillis() + 20_000;
            while (ended.size() < running.size() - 1 && System.currentTimeMillis() < until) {
              Thread.sleep(20);
            }
          }
          String err = Files.exists(logs.resolve("stderr")) ? Files.readString(logs.resolve("stderr")) : "";
          err += Files.readString(logs.resolve("launcher.out"));
          if (stoppedByMaster.contains(containerId)) {
            rc = -105; // ContainerExitStatus.KILLED_BY_APPMASTER
          }
          ended.add(containerId);
          events.completed(containerId, rc, rc == 0 ? "" : tail(err));
        } catch (Exception e) {
          events.completed(containerId, -1, e.toString());
        }
      });
      w.setDaemon(true);
      w.start();
    } catch (IOException e) {
      events.completed(containerId, -1, "fake NodeManager: " + e);
    }
  }

  @Override
  public void stop(String containerId) {
    Process p = running.get(containerId);
    if (p != null) {
      stoppedByMaster.add(containerId);
      p.destroyForcibly();
    }
  }

  @Override
  public synchronized void finish(boolean succeeded, String diag) {
    diagnostics = diag;
    if (killedByClient) {
      return;
    }
    finalStatus = succeeded ? FinalApplicationStatus.SUCCEEDED : FinalApplicationStatus.FAILED;
    state = YarnApplicationState.FINISHED;
  }

  @Override
  public void close() {}

  // ---- NodeManager chores

  static String expand(String s, Path logs) {
    return s.replace("{{", "${").replace("}}", "}").replace("<CPS>", File.pathSeparator)
        .replace("<LOG_DIR>", logs.toString());
  }

  static String tail(String s) {
    return s.length() > 4000 ? s.substring(s.length() - 4000) : s;
  }

  static void link(Map<String, LocalResource> resources, Path dir) throws IOException {
    for (Map.Entry<String, LocalResource> e : resources.entrySet()) {
      Path src = Path.of(e.getValue().getResource().getFile());
      if (!Files.isRegularFile(src) || Files.size(src) != e.getValue().getSize()) {
        throw new IOException("resource " + e.getKey() + " at " + src + " is missing or has the wrong size");
      }
      if (e.getValue().getType() == LocalResourceType.PATTERN) {
        Path d = Files.createDirectories(dir.resolve(e.getKey()));
        Files.createSymbolicLink(d.resolve(e.getKey()), src);
      } else {
        Files.createSymbolicLink(dir.resolve(e.getKey()), src);
      }
    }
  }
}
