package harp.mapred;

import java.io.IOException;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.net.InetSocketAddress;
import java.util.ServiceLoader;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.LocalJobRunner;
import org.apache.hadoop.mapreduce.protocol.ClientProtocol;
import org.apache.hadoop.mapreduce.protocol.ClientProtocolProvider;

/**
 * Selected by {@code mapreduce.framework.name=map-collective}. With a ResourceManager configured
 * (a site file or the job sets {@code yarn.resourcemanager.address} or {@code .hostname}) the job
 * goes to YARN through the {@link ClusterSubmitter} named {@value #YARN} (found by
 * {@link ServiceLoader}; yarn-appmaster/ provides it) and our application master; if no such
 * submitter is on the classpath, the submission fails saying so. Without one
 * (or with {@code harp.local=true}) the job runs in Hadoop's own LocalJobRunner with every map task of the job
 * running at once in this JVM (each an engine worker on loopback). A job that needs more
 * concurrent map tasks than {@code mapreduce.local.map.tasks.maximum} allows fails at
 * submission with a clear message. In local mode the client looks at the job's status every
 * {@value #LOCAL_POLL_MS} ms ({@link #PROGRESS_POLL} and {@link #COMPLETION_POLL}, unless the
 * job or a site file sets them): the job runs in this JVM, a look costs microseconds, and
 * Hadoop's defaults (1 and 5 s, made for a remote cluster) would add up to a second to every
 * job's end. Gives every job a fresh secret, carried in the job's credentials only
 * ({@link JobSecret}).
 */
public class MapCollectiveClientProtocolProvider extends ClientProtocolProvider {
  public static final String FRAMEWORK = "map-collective";
  /** Number of workers a job wants (sets the local runner's concurrency when given). */
  public static final String WORKERS = "harp.workers";
  static final String LOCAL_MAX_MAPS = "mapreduce.local.map.tasks.maximum";
  /** Runs the job in local mode even when a ResourceManager is configured. */
  public static final String LOCAL = "harp.local";
  /** The {@link ClusterSubmitter#name} of the YARN submitter. */
  public static final String YARN = "yarn";
  /** Most workers of a local job (the local runner's threads in this JVM; `harp --workers` has the same bound). */
  public static final int LOCAL_MAX_WORKERS = 256;
  /** How often {@code Job.waitForCompletion(true)} looks at the job's status (Hadoop: 1000 ms). */
  static final String PROGRESS_POLL = "mapreduce.client.progressmonitor.pollinterval";
  /** How often {@code Job.waitForCompletion(false)} looks at the job's status (Hadoop: 5000 ms). */
  static final String COMPLETION_POLL = "mapreduce.client.completion.pollinterval";
  /** Both intervals of a local job unless set: its end is seen within this many ms. */
  static final int LOCAL_POLL_MS = 20;

  @Override
  public ClientProtocol create(Configuration conf) throws IOException {
    if (!FRAMEWORK.equals(conf.get("mapreduce.framework.name"))) {
      return null;
    }
    ClusterSubmitter cluster = select(conf,
        ServiceLoader.load(ClusterSubmitter.class, MapCollectiveClientProtocolProvider.class.getClassLoader()));
    if (cluster != null) {
      return cluster.create(conf);
    }
    int workers = harp.ConfNumbers.getInt(conf, WORKERS, 0);
    if (workers > LOCAL_MAX_WORKERS) {
      throw new IOException(WORKERS + " = " + workers + ": a local map-collective job runs every worker as a "
          + "thread of this JVM, at most " + LOCAL_MAX_WORKERS + " (as `harp --workers`); run it on a YARN cluster");
    }
    if (workers > 0 && conf.get(LOCAL_MAX_MAPS) == null) {
      conf.setInt(LOCAL_MAX_MAPS, workers);
    }
    for (String poll : new String[] {PROGRESS_POLL, COMPLETION_POLL}) {
      if (onlyDefault(conf, poll)) {
        conf.setInt(poll, LOCAL_POLL_MS);
      }
    }
    LocalJobRunner local = new LocalJobRunner(conf);
    // Check the job's number of maps against the runner's concurrency before it starts.
    InvocationHandler h = (proxy, method, args) -> {
      if (method.getName().equals("submitJob") && args != null && args.length >= 3 && args[1] instanceof String) {
        // The secret reaches the map tasks through the job's credentials, not job.xml (and, as
        // the runner attaches the credentials only after it started the job, through this JVM).
        JobSecret.registerLocal(args[0].toString(), JobSecret.ensure((org.apache.hadoop.security.Credentials) args[2]));
        JobConf job = new JobConf(new Path((String) args[1], "job.xml"));
        int maps = job.getNumMapTasks();
        int max = harp.ConfNumbers.getInt(job, LOCAL_MAX_MAPS, 1);
        if (maps > LOCAL_MAX_WORKERS) {
          throw new IOException("this map-collective job has " + maps + " map tasks; a local job runs every worker as a "
              + "thread of this JVM, at most " + LOCAL_MAX_WORKERS + "; run it on a YARN cluster");
        }
        if (maps > max) {
          throw new IOException("this map-collective job has " + maps + " map tasks, which must all run at once, "
              + "but the local runner allows " + max + " (" + LOCAL_MAX_MAPS + "); set it to at least " + maps);
        }
      }
      try {
        Object out = method.invoke(local, args);
        if (method.getName().equals("getJobStatus") && out instanceof org.apache.hadoop.mapreduce.JobStatus) {
          org.apache.hadoop.mapreduce.JobStatus st = (org.apache.hadoop.mapreduce.JobStatus) out;
          if (st.isJobComplete()) {
            JobSecret.forgetLocal(st.getJobID().toString());
          }
        }
        return out;
      } catch (InvocationTargetException e) {
        throw e.getCause();
      }
    };
    return (ClientProtocol) Proxy.newProxyInstance(ClientProtocol.class.getClassLoader(),
        new Class<?>[] {ClientProtocol.class}, h);
  }

  /**
   * The submitter for {@code conf} among {@code found}: the {@value #YARN} one when a
   * ResourceManager is configured (and {@value #LOCAL} is not set), else null (local mode).
   *
   * @throws IOException when the job needs a submitter that is not on the classpath
   */
  static ClusterSubmitter select(Configuration conf, Iterable<ClusterSubmitter> found) throws IOException {
    if (!resourceManagerConfigured(conf) || conf.getBoolean(LOCAL, false)) {
      return null;
    }
    for (ClusterSubmitter s : found) {
      if (YARN.equals(s.name())) {
        return s;
      }
    }
    throw new IOException("a ResourceManager is configured (yarn.resourcemanager.address or .hostname), but no "
        + "YARN submitter is on the classpath: the job jar lacks yarn-appmaster's classes (harp.yarn.*) and their "
        + "META-INF/services/" + ClusterSubmitter.class.getName() + " entry; submit with harp-rs.jar or "
        + "harp-rs-examples.jar as java/build.sh makes them, or set " + LOCAL + "=true to run in local mode");
  }

  /** True when {@code key} is unset or comes from Hadoop's defaults (a *-default.xml) only. */
  static boolean onlyDefault(Configuration conf, String key) {
    String[] sources = conf.getPropertySources(key);
    if (conf.get(key) == null || sources == null) {
      return true;
    }
    for (String s : sources) {
      if (!s.endsWith("-default.xml")) {
        return false;
      }
    }
    return true;
  }

  /** True when a ResourceManager address comes from a site file or the job, not the defaults. */
  static boolean resourceManagerConfigured(Configuration conf) {
    for (String key : new String[] {"yarn.resourcemanager.address", "yarn.resourcemanager.hostname"}) {
      String[] sources = conf.getPropertySources(key);
      if (conf.get(key) != null && sources != null && sources.length > 0
          && !"yarn-default.xml".equals(sources[sources.length - 1])) {
        return true;
      }
    }
    return false;
  }

  @Override
  public ClientProtocol create(InetSocketAddress addr, Configuration conf) throws IOException {
    return create(conf);
  }

  @Override
  public void close(ClientProtocol clientProtocol) throws IOException {
    if (clientProtocol instanceof java.io.Closeable) {
      ((java.io.Closeable) clientProtocol).close();
    }
  }
}
