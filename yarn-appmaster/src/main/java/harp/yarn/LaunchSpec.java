package harp.yarn;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.v2.util.MRApps;
import org.apache.hadoop.yarn.api.ApplicationConstants;
import org.apache.hadoop.yarn.api.ApplicationConstants.Environment;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.apache.hadoop.yarn.api.records.LocalResourceVisibility;
import org.apache.hadoop.yarn.api.records.URL;

/**
 * What the master's and the workers' containers get: the files YARN localizes for them (the job
 * jar, job.xml and split file from the job's staging directory; our jar, which the client put
 * there under {@code _harp/} and which carries the native library of every platform, and the
 * library the client named with {@code -Dharp.native.lib}, if it named one), their
 * environment (the cluster's own Hadoop
 * classpath through {@link MRApps#setClasspath}, never Hadoop classes of ours) and their command.
 * Nothing is copied onto nodes by hand.
 */
public final class LaunchSpec {
  /** Names the files get in a container's working directory. */
  public static final String JOB_JAR = "job.jar";
  public static final String JOB_XML = "job.xml";
  public static final String JOB_SPLIT = "job.split";
  public static final String HARP_JAR = "harp-rs.jar";
  public static final String NATIVE_LIB = harp.Native.LIBRARY_FILE;
  /** Where the client puts our jar, a library named by harp.native.lib and the usable node list. */
  public static final String HARP_DIR = "_harp";
  public static final String NODES_FILE = "nodes";
  /** Environment of the containers. */
  public static final String ENV_JOB_DIR = "HARP_JOB_DIR";
  public static final String ENV_AM_ADDRESS = "HARP_AM_ADDRESS";

  public static final String AM_MEMORY_MB = "harp.yarn.am.memory.mb";
  public static final String AM_VCORES = "harp.yarn.am.vcores";
  public static final String WORKER_JAVA_OPTS = "harp.yarn.worker.java.opts";
  /** Attempts of the application master (YARN's limit {@code yarn.resourcemanager.am.max-attempts} caps it). */
  public static final String AM_MAX_ATTEMPTS = "harp.yarn.am.max.attempts";
  /** The master's attempt number (1, 2, ...), set by the master, passed to the workers. */
  public static final String AM_ATTEMPT = "harp.yarn.am.attempt";
  /** Environment of a worker container: the attempt of the master that launched it. */
  public static final String ENV_AM_ATTEMPT = "HARP_AM_ATTEMPT";

  /** {@value #AM_MAX_ATTEMPTS}, default 2, at least 1. */
  public static int maxAttempts(Configuration conf) {
    int n = conf.getInt(AM_MAX_ATTEMPTS, 2);
    if (n < 1) {
      throw new IllegalArgumentException(AM_MAX_ATTEMPTS + " must be at least 1, got " + n);
    }
    return n;
  }

  /**
   * A worker launched by a master after its first attempt continues from the job's last complete
   * checkpoint: {@code harp.resume} is set when the job has a checkpoint directory ({@code
   * harp.checkpoint.dir}) and the attempt is 2 or later. Returns whether it was set.
   */
  public static boolean resumeOnRestart(Configuration conf, String attempt) {
    int a;
    try {
      a = attempt == null ? 1 : Integer.parseInt(attempt.trim());
    } catch (NumberFormatException e) {
      return false;
    }
    if (a > 1 && conf.get("harp.checkpoint.dir") != null) {
      conf.setBoolean("harp.resume", true);
      return true;
    }
    return false;
  }

  private LaunchSpec() {}

  /** The files of the job directory every container needs, as YARN local resources. */
  public static Map<String, LocalResource> resources(Configuration conf, Path jobDir) throws IOException {
    FileSystem fs = jobDir.getFileSystem(conf);
    Map<String, LocalResource> r = new HashMap<>();
    Path jar = new Path(jobDir, JOB_JAR);
    if (fs.exists(jar)) {
      // Like MapReduce: unpack classes/ and lib/ next to the jar itself.
      r.put(JOB_JAR, resource(fs, jar, LocalResourceType.PATTERN,
          conf.get("mapreduce.job.jar.unpack.pattern", "(?:classes/|lib/).*")));
    }
    r.put(JOB_XML, resource(fs, new Path(jobDir, JOB_XML), LocalResourceType.FILE, null));
    r.put(JOB_SPLIT, resource(fs, new Path(jobDir, JOB_SPLIT), LocalResourceType.FILE, null));
    r.put(HARP_JAR, resource(fs, new Path(new Path(jobDir, HARP_DIR), HARP_JAR), LocalResourceType.FILE, null));
    // Only when the client named a library (harp.native.lib); otherwise our jar's own copy for the
    // container's platform is loaded.
    Path lib = new Path(new Path(jobDir, HARP_DIR), NATIVE_LIB);
    if (fs.exists(lib)) {
      r.put(NATIVE_LIB, resource(fs, lib, LocalResourceType.FILE, null));
    }
    return r;
  }

  private static LocalResource resource(FileSystem fs, Path p, LocalResourceType type, String pattern)
      throws IOException {
    FileStatus st;
    try {
      st = fs.getFileStatus(p);
    } catch (java.io.FileNotFoundException e) {
      throw new IOException("the job directory lacks " + p + " (was the job submitted with "
          + "mapreduce.framework.name=map-collective?)", e);
    }
    Path q = fs.makeQualified(p);
    LocalResource lr = LocalResource.newInstance(URL.fromPath(q), type, LocalResourceVisibility.APPLICATION,
        st.getLen(), st.getModificationTime());
    if (pattern != null) {
      lr.setPattern(pattern);
    }
    return lr;
  }

  /** CLASSPATH and friends: our jar, the job jar, then the cluster's Hadoop and MapReduce jars. */
  static Map<String, String> environment(Configuration conf) throws IOException {
    Map<String, String> env = new HashMap<>();
    MRApps.setClasspath(env, conf);
    String sep = ApplicationConstants.CLASS_PATH_SEPARATOR;
    String ours = Environment.PWD.$$() + "/" + HARP_JAR;
    String cp = env.get(Environment.CLASSPATH.name());
    env.put(Environment.CLASSPATH.name(), cp == null || cp.isEmpty() ? ours : ours + sep + cp);
    return env;
  }

  private static String heap(int containerMb) {
    return "-Xmx" + Math.max(64, (int) (containerMb * 0.8)) + "m";
  }

  private static List<String> command(String javaOpts, String mainClass, List<String> args) {
    StringBuilder c = new StringBuilder(Environment.JAVA_HOME.$$()).append("/bin/java ").append(javaOpts)
        .append(" -Djava.library.path=").append(Environment.PWD.$$()).append(' ').append(mainClass);
    for (String a : args) {
      c.append(' ').append(a);
    }
    c.append(" 1>").append(ApplicationConstants.LOG_DIR_EXPANSION_VAR).append("/stdout")
        .append(" 2>").append(ApplicationConstants.LOG_DIR_EXPANSION_VAR).append("/stderr");
    return java.util.Collections.singletonList(c.toString());
  }

  /** The application master's container (tokens: the job's credentials, serialized). */
  public static ContainerLaunchContext master(Configuration conf, Path jobDir, ByteBuffer tokens) throws IOException {
    Map<String, String> env = environment(conf);
    env.put(ENV_JOB_DIR, jobDir.toString());
    int mb = conf.getInt(AM_MEMORY_MB, 1024);
    return ContainerLaunchContext.newInstance(resources(conf, jobDir), env,
        command(heap(mb), AppMaster.class.getName(), java.util.Collections.<String>emptyList()), null, tokens, null);
  }

  /**
   * Worker {@code rank}'s container: WorkerMain over the splits at {@code offsets} of job.split;
   * {@code tokens}: the workers' credentials (the job's, with the job secret, without the AMRM
   * token: see {@link AppMaster#forWorkers}).
   */
  public static ContainerLaunchContext worker(Configuration conf, Map<String, LocalResource> resources, int rank,
      List<Long> offsets, String amAddress, int memoryMb, ByteBuffer tokens) throws IOException {
    if (offsets.isEmpty()) {
      throw new IllegalArgumentException("worker " + rank + " has no input split");
    }
    Map<String, String> env = environment(conf);
    env.put(ENV_AM_ADDRESS, amAddress);
    env.put(ENV_AM_ATTEMPT, Integer.toString(conf.getInt(AM_ATTEMPT, 1)));
    List<String> offs = new ArrayList<>();
    for (long o : offsets) {
      offs.add(Long.toString(o));
    }
    String opts = conf.get(WORKER_JAVA_OPTS, heap(memoryMb));
    return ContainerLaunchContext.newInstance(new HashMap<>(resources), env,
        command(opts, WorkerMain.class.getName(), java.util.Arrays.asList(JOB_XML, Integer.toString(rank), JOB_SPLIT,
            String.join(",", offs))), null, tokens == null ? null : tokens.duplicate(), null);
  }
}
