package harp.yarn;

import java.io.IOException;
import java.lang.reflect.Method;
import java.lang.reflect.Proxy;
import java.net.InetSocketAddress;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.ipc.Server;
import org.apache.hadoop.mapreduce.JobID;
import org.apache.hadoop.mapreduce.TypeConverter;
import org.apache.hadoop.mapreduce.v2.api.MRClientProtocol;
import org.apache.hadoop.mapreduce.v2.api.protocolrecords.GetJobReportResponse;
import org.apache.hadoop.mapreduce.v2.api.records.JobReport;
import org.apache.hadoop.mapreduce.v2.api.records.JobState;
import org.apache.hadoop.yarn.factory.providers.RecordFactoryProvider;
import org.apache.hadoop.yarn.factories.RecordFactory;
import org.apache.hadoop.yarn.ipc.YarnRPC;

/**
 * The job-status RPC service a job's master offers stock MapReduce clients ({@code mapred job
 * -status/-kill} with framework "yarn" ask the master named in the application report): the
 * job's state, progress and diagnostics, and kill. Everything about tasks is empty (a
 * map-collective job has no task attempts to report). Without it those clients either retry RPC
 * against a port that is not one, or wait out their hard-kill timeout (10 s) before asking the
 * ResourceManager. Unsecured clusters only: with Kerberos the clients' client-to-AM tokens are not
 * checked here (docs/yarn.md).
 */
final class StatusServer implements AutoCloseable {
  /** What the service reports and does. */
  interface Job {
    JobState state();

    float progress();

    String diagnostics();

    /** A client asked to kill the job. */
    void kill(String why);
  }

  private final Server server;
  private final JobID id;
  private final String user;
  private final String name;
  private final String jobFile;
  private final long start;
  private final Job job;
  private final RecordFactory records = RecordFactoryProvider.getRecordFactory(null);
  /** Counted down once a client has been answered that the job was killed. */
  private final CountDownLatch killedReported = new CountDownLatch(1);

  StatusServer(Configuration conf, String bindHost, JobID id, String user, String name, String jobFile, Job job)
      throws IOException {
    this.id = id;
    this.user = user;
    this.name = name;
    this.jobFile = jobFile;
    this.job = job;
    this.start = System.currentTimeMillis();
    MRClientProtocol impl = (MRClientProtocol) Proxy.newProxyInstance(MRClientProtocol.class.getClassLoader(),
        new Class<?>[] {MRClientProtocol.class}, (p, m, a) -> answer(m, a));
    server = YarnRPC.create(conf).getServer(MRClientProtocol.class, impl, new InetSocketAddress(bindHost, 0), conf,
        null, 2);
    server.start();
  }

  int port() {
    return server.getListenerAddress().getPort();
  }

  /**
   * Waits until a client has been answered that the job was killed (the stock client that killed
   * it asks once a second until it hears so), at most {@code ms}; true if one was.
   */
  boolean awaitKilledReported(long ms) throws InterruptedException {
    return killedReported.await(ms, TimeUnit.MILLISECONDS);
  }

  private Object answer(Method m, Object[] args) throws IOException {
    switch (m.getName()) {
      case "getConnectAddress":
        return server.getListenerAddress();
      case "getJobReport": {
        JobReport r = records.newRecordInstance(JobReport.class);
        r.setJobId(TypeConverter.toYarn(id));
        r.setJobName(name);
        r.setUser(user);
        JobState st = job.state();
        r.setJobState(st);
        float p = job.progress();
        boolean done = st == JobState.SUCCEEDED;
        r.setSetupProgress(1f);
        r.setMapProgress(done ? 1f : p);
        r.setReduceProgress(0f);
        r.setCleanupProgress(done ? 1f : 0f);
        r.setSubmitTime(start);
        r.setStartTime(start);
        r.setFinishTime(st == JobState.RUNNING ? 0 : System.currentTimeMillis());
        r.setJobFile(jobFile);
        r.setDiagnostics(job.diagnostics());
        r.setIsUber(false);
        r.setAMInfos(java.util.Collections.emptyList());
        GetJobReportResponse resp = records.newRecordInstance(GetJobReportResponse.class);
        resp.setJobReport(r);
        if (st == JobState.KILLED) {
          killedReported.countDown();
        }
        return resp;
      }
      case "killJob":
        job.kill("killed by a client (mapred job -kill)");
        return records.newRecordInstance(m.getReturnType());
      case "getCounters": {
        org.apache.hadoop.mapreduce.v2.api.protocolrecords.GetCountersResponse resp =
            records.newRecordInstance(org.apache.hadoop.mapreduce.v2.api.protocolrecords.GetCountersResponse.class);
        resp.setCounters(records.newRecordInstance(org.apache.hadoop.mapreduce.v2.api.records.Counters.class));
        return resp;
      }
      case "getTaskReports":
      case "getTaskAttemptCompletionEvents":
      case "getDiagnostics":
        return records.newRecordInstance(m.getReturnType());
      case "toString":
        return "map-collective job status service";
      case "hashCode":
        return System.identityHashCode(this);
      case "equals":
        return args != null && args.length == 1 && args[0] == this;
      default:
        throw new IOException(m.getName() + " is not supported for map-collective jobs (they have no task attempts)");
    }
  }

  @Override
  public void close() {
    server.stop();
  }
}
