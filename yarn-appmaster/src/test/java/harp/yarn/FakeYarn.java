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
  /** Requests for this node are recorded but never granted. */
  static volatile String withheld = "";
  /** When set, the container of this rank exits with status 3 before doing anything. */
  static volatile int failRank = -1;

  final List<ApplicationSubmissionContext> submitted = new ArrayList<>();
  final List<String> requests = new ArrayList<>();
  final Map<String, Process> running = new ConcurrentHashMap<>();
  private final Map<String, Integer> rankOf = new ConcurrentHashMap<>();
  private final AtomicInteger ids = new AtomicInteger();
  private volatile AppMaster.Events events;
  private volatile YarnApplicationState state = YarnApplicationState.NEW;
  private volatile FinalApplicationStatus finalStatus = FinalApplicationStatus.UNDEFINED;
  private volatile String diagnostics = "";
  private volatile Thread master;
  volatile Throwable masterError;

  public static FakeYarn create(Configuration conf) {
    last = new FakeYarn();
    return last;
  }

  // ---- the client's view (YarnSubmitter.Rm)

  @Override
  public ApplicationId newApplication() {
    return ApplicationId.newInstance(1700000000000L, 42);
  }

  @Override
  public List<String> runningNodes() {
    return nodes;
  }

  @Override
  public synchronized void submit(ApplicationSubmissionContext ctx) {
    submitted.add(ctx);
    state = YarnApplicationState.ACCEPTED;
    String jobDir = ctx.getAMContainerSpec().getEnvironment().get(LaunchSpec.ENV_JOB_DIR);
    master = new Thread(() -> {
      try {
        // What the master's container sees: job.xml localized from the job directory.
        Path dir = Files.createDirectories(root.resolve("am"));
        link(ctx.getAMContainerSpec().getLocalResources(), dir);
        JobConf conf = new JobConf(new org.apache.hadoop.fs.Path(dir.resolve(LaunchSpec.JOB_XML).toUri()));
        state = YarnApplicationState.RUNNING;
        boolean ok = AppMaster.run(conf, new org.apache.hadoop.fs.Path(jobDir), this,
            ctx.getAMContainerSpec().getTokens());
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
    if (events != null) {
      events.failed("killed by the user");
    }
    state = YarnApplicationState.KILLED;
    finalStatus = FinalApplicationStatus.KILLED;
  }

  // ---- the master's view (AppMaster.Port)

  @Override
  public void start(AppMaster.Events ev, String host, int port) {
    this.events = ev;
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
      StringBuilder script = new StringBuilder("#!/bin/bash\n");
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
      Thread w = new Thread(() -> {
        try {
          int rc = p.waitFor();
          String err = Files.exists(logs.resolve("stderr")) ? Files.readString(logs.resolve("stderr")) : "";
          err += Files.readString(logs.resolve("launcher.out"));
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
      p.destroyForcibly();
    }
  }

  @Override
  public synchronized void finish(boolean succeeded, String diag) {
    diagnostics = diag;
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
