package harp.mapred;

import java.io.IOException;
import java.lang.reflect.InvocationHandler;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Proxy;
import java.net.InetSocketAddress;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapred.LocalJobRunner;
import org.apache.hadoop.mapreduce.protocol.ClientProtocol;
import org.apache.hadoop.mapreduce.protocol.ClientProtocolProvider;

/**
 * Selected by {@code mapreduce.framework.name=map-collective}. With a ResourceManager configured
 * (a site file or the job sets {@code yarn.resourcemanager.address} or {@code .hostname}) the job
 * goes to YARN through {@link harp.yarn.YarnSubmitter} and our application master. Without one
 * (or with {@code harp.local=true}) the job runs in Hadoop's own LocalJobRunner with every map task of the job
 * running at once in this JVM (each an engine worker on loopback). A job that needs more
 * concurrent map tasks than {@code mapreduce.local.map.tasks.maximum} allows fails at
 * submission with a clear message. Gives every job a fresh secret, carried in the job's
 * credentials only ({@link JobSecret}).
 */
public class MapCollectiveClientProtocolProvider extends ClientProtocolProvider {
  public static final String FRAMEWORK = "map-collective";
  /** Number of workers a job wants (sets the local runner's concurrency when given). */
  public static final String WORKERS = "harp.workers";
  static final String LOCAL_MAX_MAPS = "mapreduce.local.map.tasks.maximum";

  @Override
  public ClientProtocol create(Configuration conf) throws IOException {
    if (!FRAMEWORK.equals(conf.get("mapreduce.framework.name"))) {
      return null;
    }
    if (resourceManagerConfigured(conf) && !conf.getBoolean("harp.local", false)) {
      return harp.yarn.YarnSubmitter.create(conf);
    }
    int workers = conf.getInt(WORKERS, 0);
    if (workers > 0 && conf.get(LOCAL_MAX_MAPS) == null) {
      conf.setInt(LOCAL_MAX_MAPS, workers);
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
        int max = job.getInt(LOCAL_MAX_MAPS, 1);
        if (maps > max) {
          throw new IOException("this map-collective job has " + maps + " map tasks, which must all run at once, "
              + "but the local runner allows " + max + " (" + LOCAL_MAX_MAPS + "); set it to at least " + maps);
        }
      }
      try {
        Object out = method.invoke(local, args);
        if (method.getName().equals("getJobStatus") && out instanceof org.apache.hadoop.mapreduce.JobStatus st
            && st.isJobComplete()) {
          JobSecret.forgetLocal(st.getJobID().toString());
        }
        return out;
      } catch (InvocationTargetException e) {
        throw e.getCause();
      }
    };
    return (ClientProtocol) Proxy.newProxyInstance(ClientProtocol.class.getClassLoader(),
        new Class<?>[] {ClientProtocol.class}, h);
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
    if (clientProtocol instanceof java.io.Closeable c) {
      c.close();
    }
  }
}
