package harp;

import harp.mapred.EngineOptions;
import harp.mapred.JobSecret;
import harp.rendezvous.RegistryClient;
import harp.rendezvous.RegistryRendezvous;
import harp.rendezvous.Rendezvous;
import harp.rendezvous.RendezvousException;
import harp.rendezvous.StagingDirRendezvous;
import java.io.IOException;
import java.util.Map;
import java.util.TreeMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.TaskAttemptContext;

/**
 * Joins the job's workers: binds an ephemeral port, meets the other workers through the job's
 * {@link Rendezvous} (the YARN master's registry when {@code harp.am.address} is set, else the
 * job's staging directory, {@code mapreduce.job.dir/_harp/worker-RANK}), then connects,
 * authenticates with the job secret and runs the start-up handshake. The rank is the map task's
 * index; the number of workers is the number of map tasks.
 */
final class Session {
  /** Configuration keys of the Java layer (documented in docs/java-guide.md). */
  static final String LOG_LEVEL = "harp.log.level";
  static final String HOST = "harp.worker.host";
  static final String RENDEZVOUS_DIR = "harp.rendezvous.dir";
  /** Set by the YARN master: register there instead of meeting in the staging directory. */
  static final String AM_ADDRESS = "harp.am.address";
  static final String RANK = "harp.worker.rank";
  /** Prefix of the keys passed to the engine. */
  static final String PREFIX = "harp.";

  /**
   * The engine options of this job: every {@code harp.*} entry of the job's configuration as a
   * {@code key=value} line. The engine takes the keys of its option table (Java job keys, e.g.
   * {@code harp.collective.timeout.ms}), ignores those of the Java and YARN layers and warns
   * about others; its defaults apply to what the job does not set.
   */
  static String options(Configuration conf) {
    Map<String, String> harp = new TreeMap<>();
    for (Map.Entry<String, String> e : conf) {
      String k = e.getKey();
      if (k.startsWith(PREFIX)) {
        if (k.indexOf('=') >= 0 || k.indexOf('\n') >= 0) {
          throw new IllegalArgumentException("bad configuration key " + k);
        }
        // One line per entry: a line break inside a value becomes a space (the engine checks
        // its own values; the other layers' values are not its business).
        String v = conf.getTrimmed(k);
        harp.put(k, v == null ? "" : v.replace('\r', ' ').replace('\n', ' '));
      }
    }
    StringBuilder o = new StringBuilder();
    harp.forEach((k, v) -> o.append(k).append('=').append(v).append('\n'));
    return o.toString();
  }

  private Session() {}

  /** This task's worker rank (known before the worker has started). */
  static int rankOf(TaskAttemptContext ctx) {
    return ConfNumbers.getInt(ctx.getConfiguration(), RANK, ctx.getTaskAttemptID().getTaskID().getId());
  }

  static long join(TaskAttemptContext ctx) throws IOException, InterruptedException {
    Configuration conf = ctx.getConfiguration();
    int rank = rankOf(ctx);
    byte[] secret = secret(ctx, rank);
    Rendezvous rendezvous = rendezvous(ctx, conf, rank, secret);
    String host = conf.get(HOST);
    if (host == null) {
      host = rendezvous.defaultHost();
    }
    String options = options(conf);
    long listener = Native.listen(host, options);
    int port = Native.listenerPort(listener);
    String hosts;
    try {
      hosts = rendezvous.meet(rank, host + ":" + port);
    } catch (RendezvousException e) {
      throw new HarpException(HarpException.Kind.STARTUP, rank, "start-up", e.getMessage());
    }
    String job = ctx.getJobID().toString();
    String tag = job + " task " + ctx.getTaskAttemptID() + " rank " + rank;
    String log = conf.get(LOG_LEVEL, "warn") + "|" + tag;
    return Native.start(listener, hosts, rank, job, secret, options, log);
  }

  /**
   * YARN mode ({@code harp.am.address} set by the master): the master's registry, to which
   * the worker signs its registration with the job secret; nothing secret crosses the
   * connection. Local mode: the job's staging directory.
   */
  private static Rendezvous rendezvous(TaskAttemptContext ctx, Configuration conf, int rank, byte[] secret)
      throws IOException {
    long connectTimeout = EngineOptions.millis(conf, "connect_timeout_ms");
    String am = conf.get(AM_ADDRESS);
    if (am != null) {
      return new RegistryRendezvous(
          new RegistryClient(am, secret, (int) Math.min(Integer.MAX_VALUE, connectTimeout)));
    }
    String base = conf.get(RENDEZVOUS_DIR, conf.get("mapreduce.job.dir"));
    if (base == null) {
      throw new HarpException(HarpException.Kind.STARTUP, rank, "start-up",
          "no staging directory to meet in (mapreduce.job.dir)");
    }
    Path dir = new Path(base, "_harp");
    return new StagingDirRendezvous(dir.getFileSystem(conf), dir, ConfNumbers.getInt(conf, "mapreduce.job.maps", 1),
        connectTimeout, ctx::progress);
  }

  /** The job secret, from the job's credentials (never from job.xml; see harp.mapred.JobSecret). */
  static byte[] secret(TaskAttemptContext ctx, int rank) {
    byte[] secret = JobSecret.of(ctx.getCredentials(), ctx.getJobID().toString());
    if (secret == null) {
      throw new HarpException(HarpException.Kind.STARTUP, rank, "start-up",
          "no job secret in the job's credentials (" + JobSecret.KEY + "): submit "
          + "map-collective jobs with -Dmapreduce.framework.name=map-collective, which adds one");
    }
    return secret;
  }
}
