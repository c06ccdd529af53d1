package harp;

import harp.mapred.JobSecret;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.TaskAttemptContext;

/**
 * Joins the job's workers: binds an ephemeral port, publishes {@code host:port} in the job's
 * staging directory ({@code mapreduce.job.dir/_harp/worker-RANK}), waits until every worker has
 * published, then connects, authenticates with the job secret and runs the start-up handshake.
 * The rank is the map task's index; the number of workers is the number of map tasks.
 */
final class Session {
  /** Configuration keys (documented in docs/java-guide.md). */
  static final String OP_TIMEOUT = "harp.collective.timeout.ms";
  static final String CONNECT_TIMEOUT = "harp.connect.timeout.ms";
  static final String LOG_LEVEL = "harp.log.level";
  static final String HOST = "harp.worker.host";
  static final String RENDEZVOUS_DIR = "harp.rendezvous.dir";
  /** Set by the YARN master: register there instead of meeting in the staging directory. */
  static final String AM_ADDRESS = "harp.am.address";
  static final String RANK = "harp.worker.rank";
  static final String SOCKET_BUFFER = "harp.socket.buffer.bytes";
  static final String TCP_CONGESTION = "harp.tcp.congestion";
  static final String CHUNK = "harp.broadcast.chunk.bytes";
  static final String BROADCAST_CROSSOVER = "harp.broadcast.crossover.bytes";
  static final String ALLREDUCE_CROSSOVER = "harp.allreduce.crossover.bytes";

  /**
   * The engine options of this job ({@code key=value} lines for the native side): timeouts
   * always, the other keys only when set (the engine's defaults otherwise).
   */
  static String options(Configuration conf) {
    StringBuilder o = new StringBuilder();
    o.append("op_timeout_ms=").append(conf.getLong(OP_TIMEOUT, 120_000)).append('\n');
    o.append("connect_timeout_ms=").append(conf.getLong(CONNECT_TIMEOUT, 60_000)).append('\n');
    String[][] optional = {
      {SOCKET_BUFFER, "socket_buffer"}, {TCP_CONGESTION, "tcp_congestion"}, {CHUNK, "chunk"},
      {BROADCAST_CROSSOVER, "broadcast_crossover"}, {ALLREDUCE_CROSSOVER, "allreduce_crossover"},
    };
    for (String[] kv : optional) {
      String v = conf.getTrimmed(kv[0]);
      if (v != null && !v.isEmpty()) {
        if (v.indexOf('\n') >= 0 || v.indexOf('=') >= 0) {
          throw new IllegalArgumentException(kv[0] + ": bad value " + v);
        }
        o.append(kv[1]).append('=').append(v).append('\n');
      }
    }
    return o.toString();
  }

  private Session() {}

  /** This task's worker rank (known before the worker has started). */
  static int rankOf(TaskAttemptContext ctx) {
    return ctx.getConfiguration().getInt(RANK, ctx.getTaskAttemptID().getTaskID().getId());
  }

  static long join(TaskAttemptContext ctx) throws IOException, InterruptedException {
    Configuration conf = ctx.getConfiguration();
    int rank = rankOf(ctx);
    if (conf.get(AM_ADDRESS) != null) {
      return joinThroughMaster(ctx, conf, rank);
    }
    int workers = conf.getInt("mapreduce.job.maps", 1);
    byte[] secret = secret(ctx, rank);
    long connectTimeout = conf.getLong(CONNECT_TIMEOUT, 60_000);
    String host = conf.get(HOST, "127.0.0.1");
    String base = conf.get(RENDEZVOUS_DIR, conf.get("mapreduce.job.dir"));
    if (base == null) {
      throw new HarpException("no staging directory to meet in (mapreduce.job.dir)", rank, "start-up");
    }
    Path dir = new Path(base, "_harp");
    FileSystem fs = dir.getFileSystem(conf);
    fs.mkdirs(dir);

    long listener = Native.listen(host, options(conf));
    int port = Native.listenerPort(listener);
    Path mine = new Path(dir, "worker-" + rank);
    Path tmp = new Path(dir, ".tmp-worker-" + rank);
    try (FSDataOutputStream out = fs.create(tmp, true)) {
      out.write((host + ":" + port + "\n").getBytes(StandardCharsets.UTF_8));
    }
    if (!fs.rename(tmp, mine)) {
      throw new IOException("cannot publish " + mine);
    }

    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(connectTimeout);
    StringBuilder hosts = new StringBuilder();
    for (int r = 0; r < workers; r++) {
      Path p = new Path(dir, "worker-" + r);
      while (!fs.exists(p)) {
        if (System.nanoTime() > deadline) {
          int seen = 0;
          for (int q = 0; q < workers; q++) {
            seen += fs.exists(new Path(dir, "worker-" + q)) ? 1 : 0;
          }
          throw new HarpException("only " + seen + " of " + workers + " workers started within "
              + connectTimeout / 1000 + " s; a map-collective job needs all its map tasks running at once",
              rank, "start-up");
        }
        ctx.progress();
        Thread.sleep(20);
      }
      try (FSDataInputStream in = fs.open(p)) {
        hosts.append(new String(in.readAllBytes(), StandardCharsets.UTF_8).trim()).append('\n');
      }
    }
    return start(ctx, conf, listener, hosts.toString(), rank, secret);
  }

  /** The job secret, from the job's credentials (never from job.xml; see harp.mapred.JobSecret). */
  static byte[] secret(TaskAttemptContext ctx, int rank) {
    byte[] secret = JobSecret.of(ctx.getCredentials(), ctx.getJobID().toString());
    if (secret == null) {
      throw new HarpException("no job secret in the job's credentials (" + JobSecret.KEY + "): submit "
          + "map-collective jobs with -Dmapreduce.framework.name=map-collective, which adds one", rank, "start-up");
    }
    return secret;
  }

  private static long start(TaskAttemptContext ctx, Configuration conf, long listener, String hosts, int rank,
      byte[] secret) {
    String job = ctx.getJobID().toString();
    String tag = job + " task " + ctx.getTaskAttemptID() + " rank " + rank;
    String log = conf.get(LOG_LEVEL, "warn") + "|" + tag;
    return Native.start(listener, hosts, rank, job, secret, options(conf), log);
  }

  /**
   * YARN mode: register {@code host:port} with the master's registry and receive every worker's
   * address (and rack) in rank order. The registration is signed with the job secret, which the
   * worker has from its container's credentials; nothing secret crosses the connection (see
   * harp.yarn.Registry for the protocol).
   */
  private static long joinThroughMaster(TaskAttemptContext ctx, Configuration conf, int rank) throws IOException {
    String am = conf.get(AM_ADDRESS);
    byte[] secret = secret(ctx, rank);
    String host = conf.get(HOST, java.net.InetAddress.getLocalHost().getHostAddress());
    int colon = am.lastIndexOf(':');
    long listener = Native.listen(host, options(conf));
    int port = Native.listenerPort(listener);
    int timeout = (int) Math.min(Integer.MAX_VALUE, conf.getLong(CONNECT_TIMEOUT, 60_000));
    try (java.net.Socket s = new java.net.Socket()) {
      s.connect(new java.net.InetSocketAddress(am.substring(0, colon), Integer.parseInt(am.substring(colon + 1))),
          timeout);
      s.setSoTimeout(timeout);
      s.getOutputStream().write((JobSecret.sign(secret, "REGISTER " + rank + " " + host + ":" + port) + "\n")
          .getBytes(StandardCharsets.UTF_8));
      s.getOutputStream().flush();
      java.io.BufferedReader in = new java.io.BufferedReader(
          new java.io.InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
      String first = in.readLine();
      if (first == null || !first.equals("ROSTER")) {
        throw new HarpException("the master at " + am + " refused registration: " + first, rank, "start-up");
      }
      StringBuilder hosts = new StringBuilder();
      for (String l = in.readLine(); l != null && !l.equals("END"); l = in.readLine()) {
        hosts.append(l).append('\n');
      }
      return start(ctx, conf, listener, hosts.toString(), rank, secret);
    } catch (java.net.SocketTimeoutException e) {
      throw new HarpException("the master at " + am + " sent no worker list within the connect timeout", rank,
          "start-up");
    }
  }
}
