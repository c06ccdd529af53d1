package harp.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.CollectiveMapper;
import harp.KeyValReader;
import harp.io.FilePosition;
import harp.io.WorkerInputFormat;
import java.io.IOException;
import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;
import org.apache.hadoop.mapreduce.lib.output.TextOutputFormat;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.LocalResource;
import org.apache.hadoop.yarn.api.records.LocalResourceType;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A map-collective job submitted the way users do ({@code Job.waitForCompletion} with
 * {@code mapreduce.framework.name=map-collective} and a ResourceManager configured), through
 * Hadoop's job submitter, our client protocol, our application master and worker containers
 * launched as real processes from the launch contexts the master built ({@link FakeYarn} plays
 * the ResourceManager and NodeManagers).
 */
class YarnJobTest {
  static final int N = 3;

  @AfterEach
  void reset() throws InterruptedException {
    // The master may still be cleaning up after a kill: let it finish before the temp dir goes.
    FakeYarn.awaitMaster();
    FakeYarn.failRank = -1;
    FakeYarn.killRank = -1;
    FakeYarn.withheld = "";
    FakeYarn.reuse = false;
    FakeYarn.nodes = List.of("n0", "n1", "n2");
    FakeYarn.nodesAfterSubmit = null;
  }

  /**
   * Runs {@code harp.yarn.steps} barriers {@code harp.yarn.step.ms} apart, telling its progress
   * after each; writes (rank, steps done).
   */
  public static class StepsMapper extends CollectiveMapper<FilePosition, Text, Text, LongWritable> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
        throws IOException, InterruptedException {
      int steps = context.getConfiguration().getInt("harp.yarn.steps", 10);
      long pause = context.getConfiguration().getLong("harp.yarn.step.ms", 100);
      for (int i = 1; i <= steps; i++) {
        Thread.sleep(pause);
        barrier("step-" + i);
        setProgress(context, i, steps);
      }
      context.write(new Text("rank" + getSelfID()), new LongWritable(steps));
    }
  }

  static Job stepsJob(Path tmp, String name, int steps, long pauseMs) throws Exception {
    Job job = job(tmp, name);
    job.setMapperClass(StepsMapper.class);
    job.getConfiguration().setInt("harp.yarn.steps", steps);
    job.getConfiguration().setLong("harp.yarn.step.ms", pauseMs);
    return job;
  }

  static void assertNothingCommittedAndNoStagingLeft(Path tmp) throws java.io.IOException {
    assertFalse(Files.exists(tmp.resolve("out").resolve("_SUCCESS")), "output committed");
    assertEquals(List.of(), filesUnder(tmp.resolve("staging")), "the staging directory is removed");
  }

  static List<Path> filesUnder(Path dir) throws java.io.IOException {
    if (!Files.exists(dir)) {
      return List.of();
    }
    try (var w = Files.walk(dir)) {
      return w.filter(Files::isRegularFile).collect(java.util.stream.Collectors.toList());
    }
  }

  /** A client configuration for the fake cluster (staging and containers under {@code tmp}). */
  static Configuration yarnConf(Path tmp) throws Exception {
    FakeYarn.root = Files.createDirectories(tmp.resolve("containers"));
    Configuration conf = new Configuration();
    conf.set("mapreduce.framework.name", "map-collective");
    conf.set("yarn.resourcemanager.address", "fake-rm:8032");
    conf.set(YarnSubmitter.RM_FACTORY, FakeYarn.class.getName());
    // Like HDFS on a real cluster: the default file system is not the containers' local disk.
    ElsewhereFileSystem.install(conf);
    conf.set("yarn.app.mapreduce.am.staging-dir", tmp.resolve("staging").toString());
    conf.set("hadoop.tmp.dir", tmp.resolve("hadoop-tmp").toString());
    conf.set("mapreduce.client.completion.pollinterval", "100");
    // The "cluster's" Hadoop classpath: this JVM's (the Hadoop jars and the test classes).
    List<String> cp = new ArrayList<>();
    for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
      cp.add(new File(e).getAbsolutePath());
    }
    conf.setStrings("yarn.application.classpath", cp.toArray(new String[0]));
    conf.set("harp.am.host", "127.0.0.1");
    conf.set("harp.worker.host", "127.0.0.1");
    conf.setInt(WorkerInputFormat.WORKERS, N);
    conf.setLong("harp.connect.timeout.ms", 30_000);
    conf.setLong("harp.collective.timeout.ms", 30_000);
    conf.setLong(AmConfig.GANG_TIMEOUT_MS, 60_000);
    return conf;
  }

  static Job job(Path tmp, String name) throws Exception {
    Path in = Files.createDirectories(tmp.resolve("in"));
    StringBuilder a = new StringBuilder();
    for (int i = 1; i <= 300; i++) {
      a.append(i).append('\n');
    }
    Files.writeString(in.resolve("a.txt"), a.toString());
    Job job = Job.getInstance(yarnConf(tmp), name);
    job.setInputFormatClass(WorkerInputFormat.class);
    FileInputFormat.addInputPath(job, new org.apache.hadoop.fs.Path(in.toUri()));
    job.setMapperClass(WorkerProcessesTest.SumMapper.class);
    job.setNumReduceTasks(0);
    job.setOutputFormatClass(TextOutputFormat.class);
    job.setOutputKeyClass(Text.class);
    job.setOutputValueClass(LongWritable.class);
    FileOutputFormat.setOutputPath(job, new org.apache.hadoop.fs.Path(tmp.resolve("out").toUri()));
    return job;
  }

  static List<String> output(Path out) throws Exception {
    List<String> lines = new ArrayList<>();
    try (var files = Files.list(out)) {
      for (Path p : files.filter(p -> p.getFileName().toString().startsWith("part-m-")).sorted().collect(java.util.stream.Collectors.toList())) {
        lines.addAll(Files.readAllLines(p));
      }
    }
    return lines;
  }

  @Test
  @Timeout(180)
  void aJobRunsThroughTheMasterAndWorkerContainersAndCommitsItsOutput(@TempDir Path tmp) throws Exception {
    Job job = job(tmp, "sum on yarn");
    assertTrue(job.waitForCompletion(true), "job failed: " + job.getStatus().getFailureInfo());
    FakeYarn y = FakeYarn.last;
    assertNull(y.masterError);

    // One application, two master attempts, our master, with everything shipped as local resources.
    assertEquals(1, y.submitted.size());
    ApplicationSubmissionContext app = y.submitted.get(0);
    assertEquals(2, app.getMaxAppAttempts());
    assertEquals(YarnSubmitter.APPLICATION_TYPE, app.getApplicationType());
    assertTrue(app.getAMContainerSpec().getCommands().get(0).contains(AppMaster.class.getName()));
    Map<String, LocalResource> res = app.getAMContainerSpec().getLocalResources();
    for (String f : List.of(LaunchSpec.JOB_XML, LaunchSpec.JOB_SPLIT, LaunchSpec.HARP_JAR)) {
      assertTrue(res.containsKey(f), "missing resource " + f + " in " + res.keySet());
      assertEquals(LocalResourceType.FILE, res.get(f).getType());
    }
    // No library of the client's platform: each container loads its own platform's from our jar.
    assertFalse(res.containsKey(LaunchSpec.NATIVE_LIB), "a native library was shipped: " + res.keySet());
    // One worker per node, each pinned to its node.
    assertEquals(List.of("0@n0", "1@n1", "2@n2"), y.requests.stream().sorted().collect(java.util.stream.Collectors.toList()));
    // The job secret travels in the credentials only: not in job.xml, not in any environment or
    // command; the workers get it, but not the master's AMRM token.
    org.apache.hadoop.security.Credentials am = AppMaster.deserialize(app.getAMContainerSpec().getTokens());
    byte[] secret = harp.mapred.JobSecret.of(am);
    assertTrue(secret != null && secret.length >= 32);
    String hex = new String(secret, java.nio.charset.StandardCharsets.US_ASCII);
    assertFalse(y.stagedJobXml.isEmpty());
    assertFalse(y.stagedJobXml.contains("harp.job.secret") || y.stagedJobXml.contains(hex), "secret in job.xml");
    assertEquals(N, y.launched.size());
    for (var ctx : y.launched.values()) {
      org.apache.hadoop.security.Credentials w = AppMaster.deserialize(ctx.getTokens());
      assertTrue(java.util.Arrays.equals(secret, harp.mapred.JobSecret.of(w)));
      for (var t : w.getAllTokens()) {
        assertFalse(t.getKind().equals(FakeYarn.AMRM_KIND), "a worker got the AMRM token");
      }
      assertFalse(ctx.getEnvironment().toString().contains(hex) || ctx.getCommands().toString().contains(hex));
    }

    // The workers ran the mapper over their splits and the master committed the output.
    assertTrue(Files.exists(tmp.resolve("out").resolve("_SUCCESS")));
    assertEquals(List.of("rank0\t45150", "rank1\t45150", "rank2\t45150"), output(tmp.resolve("out")));
    // Counters: the workers' summed, as for any job; and where the workers ran.
    assertEquals(N, job.getCounters().findCounter("test", "records").getValue());
    assertEquals(N, job.getCounters().findCounter(WorkerMain.HOSTS_GROUP, WorkerMain.nodeName()).getValue(),
        "all fake nodes are this host");
    // The staging directory is gone.
    try (var s = Files.list(tmp.resolve("staging"))) {
      List<Path> left = new ArrayList<>();
      s.forEach(u -> {
        try (var w = Files.walk(u)) {
          w.filter(Files::isRegularFile).forEach(left::add);
        } catch (java.io.IOException e) {
          throw new RuntimeException(e);
        }
      });
      assertEquals(List.of(), left);
    }
  }

  @Test
  @Timeout(180)
  void aFailingWorkerFailsTheWholeJobWithItsRankAndNothingIsCommitted(@TempDir Path tmp) throws Exception {
    FakeYarn.failRank = 1;
    Job job = job(tmp, "sum on yarn, worker 1 fails");
    assertFalse(job.waitForCompletion(false));
    String why = job.getStatus().getFailureInfo();
    assertTrue(why.contains("worker 1") && why.contains("exit status 3") && why.contains("deliberate container failure"),
        why);
    FakeYarn y = FakeYarn.last;
    // The other workers were stopped, not left running.
    for (Process p : y.running.values()) {
      p.waitFor(30, java.util.concurrent.TimeUnit.SECONDS);
      assertFalse(p.isAlive());
    }
    assertFalse(Files.exists(tmp.resolve("out").resolve("_SUCCESS")));
  }

  @Test
  @Timeout(180)
  void theMasterAsksTheResourceManagerForItsNodesNotTheListSeenAtSubmission(@TempDir Path tmp) throws Exception {
    // A node dies between the submission (or a first attempt) and the master's start.
    FakeYarn.nodesAfterSubmit = List.of("n0", "n1");
    Job job = job(tmp, "sum on yarn, a node gone after the submission");
    assertFalse(job.waitForCompletion(false));
    String why = job.getStatus().getFailureInfo();
    assertTrue(why.contains("3 workers need 3 nodes") && why.contains("the cluster has 2 usable nodes"), why);
    assertEquals(List.of(), FakeYarn.last.requests, "a container was asked for on a node that is gone");
  }

  @Test
  @Timeout(180)
  void aGangThatCannotBePlacedInTimeFailsWithADiagnostic(@TempDir Path tmp) throws Exception {
    FakeYarn.withheld = "n2";
    Job job = job(tmp, "sum on yarn, one node never grants");
    job.getConfiguration().setLong(AmConfig.GANG_TIMEOUT_MS, 2_000);
    assertFalse(job.waitForCompletion(false));
    String why = job.getStatus().getFailureInfo();
    assertTrue(why.contains("only 2 of 3 workers could be placed after 2 s (cluster has 3 usable nodes)"), why);
    // No worker was launched before the whole gang was held.
    assertEquals(Map.of(), FakeYarn.last.running);
  }

  @Test
  @Timeout(180)
  void killingAJobEndsItKilledWithoutOutput(@TempDir Path tmp) throws Exception {
    FakeYarn.withheld = "n2"; // the job waits for its gang until killed
    Job job = job(tmp, "sum on yarn, killed");
    job.submit();
    long until = System.currentTimeMillis() + 60_000;
    while (FakeYarn.last.requests.size() < N && System.currentTimeMillis() < until) {
      Thread.sleep(50);
    }
    job.killJob();
    assertTrue(job.isComplete());
    assertEquals(org.apache.hadoop.mapreduce.JobStatus.State.KILLED, job.getJobState());
    assertNothingCommittedAndNoStagingLeft(tmp);
  }

  @Test
  @Timeout(180)
  void workersReportTheirProgressAndTheMasterAveragesIt(@TempDir Path tmp) throws Exception {
    Job job = stepsJob(tmp, "steps on yarn", 30, 200);
    job.submit();
    float seen = 0;
    while (!job.isComplete()) {
      float p = job.mapProgress();
      if (p < 0.999f) {
        seen = Math.max(seen, p);
      }
      Thread.sleep(100);
    }
    assertTrue(job.isSuccessful(), job.getStatus().getFailureInfo());
    // Registration ends at 10 %; the workers' "step i of 30" moves it on while they run.
    assertTrue(seen > 0.3f, "progress while running peaked at " + seen);
    assertEquals(1f, job.mapProgress());
    assertEquals(0f, job.reduceProgress(), "a map-only job has no reduce progress");
    // The progress group is not summed into the job's counters.
    assertEquals(0, job.getCounters().getGroup(CollectiveMapper.PROGRESS_GROUP).size());
  }

  @Test
  @Timeout(180)
  void aKilledWorkerIsNamedEvenWhenItsPeersEndingsArriveFirst(@TempDir Path tmp) throws Exception {
    FakeYarn.killRank = 1;
    FakeYarn.killAfterMs = 1_000;
    Job job = stepsJob(tmp, "steps on yarn, worker 1 killed", 400, 50);
    job.getConfiguration().setLong(AmConfig.FAILURE_GRACE_MS, 10_000);
    assertFalse(job.waitForCompletion(false));
    String why = job.getStatus().getFailureInfo();
    assertTrue(why.startsWith("worker 1 (container "), why);
    assertTrue(why.contains("exit status 137 (killed: SIGKILL)"), why);
    assertTrue(why.contains("reported: in barrier") && why.contains("rank 1 is gone"), why);
    assertTrue(job.mapProgress() < 1f, "a failed job does not show map 100%: " + job.mapProgress());
    assertNothingCommittedAndNoStagingLeft(tmp);
  }

  /**
   * What stock MapReduce clients ({@code mapred job -status/-kill}, framework "yarn") do: ask the
   * master named in the application report over MRClientProtocol RPC.
   */
  @Test
  @Timeout(180)
  void theMastersStatusServiceReportsAndKillsTheJobLikeAMapReduceMaster(@TempDir Path tmp) throws Exception {
    Job job = stepsJob(tmp, "steps on yarn, killed over MRClientProtocol", 2000, 50);
    job.submit();
    long until = System.currentTimeMillis() + 120_000;
    while ((FakeYarn.last.amRpcPort <= 0 || job.mapProgress() < 0.1f) && System.currentTimeMillis() < until) {
      Thread.sleep(50);
    }
    Configuration conf = yarnConf(tmp);
    var am = (org.apache.hadoop.mapreduce.v2.api.MRClientProtocol) org.apache.hadoop.yarn.ipc.YarnRPC.create(conf)
        .getProxy(org.apache.hadoop.mapreduce.v2.api.MRClientProtocol.class,
            new java.net.InetSocketAddress(FakeYarn.last.amHost, FakeYarn.last.amRpcPort), conf);
    var records = org.apache.hadoop.yarn.factory.providers.RecordFactoryProvider.getRecordFactory(null);
    var req = records.newRecordInstance(org.apache.hadoop.mapreduce.v2.api.protocolrecords.GetJobReportRequest.class);
    req.setJobId(org.apache.hadoop.mapreduce.TypeConverter.toYarn(job.getJobID()));
    var report = am.getJobReport(req).getJobReport();
    assertEquals(org.apache.hadoop.mapreduce.v2.api.records.JobState.RUNNING, report.getJobState());
    assertEquals(job.getJobID().toString(), org.apache.hadoop.mapreduce.TypeConverter.fromYarn(report.getJobId())
        .toString());
    assertTrue(report.getMapProgress() >= 0.1f, "progress " + report.getMapProgress());
    var kill = records.newRecordInstance(org.apache.hadoop.mapreduce.v2.api.protocolrecords.KillJobRequest.class);
    kill.setJobId(req.getJobId());
    long t0 = System.currentTimeMillis();
    am.killJob(kill);
    org.apache.hadoop.mapreduce.v2.api.records.JobState st = null;
    while (System.currentTimeMillis() - t0 < 10_000) {
      st = am.getJobReport(req).getJobReport().getJobState();
      if (st != org.apache.hadoop.mapreduce.v2.api.records.JobState.RUNNING) {
        break;
      }
      Thread.sleep(50);
    }
    assertEquals(org.apache.hadoop.mapreduce.v2.api.records.JobState.KILLED, st);
    org.apache.hadoop.yarn.ipc.YarnRPC.create(conf).stopProxy(am, conf);
    while (!job.isComplete()) {
      Thread.sleep(100);
    }
    assertEquals(org.apache.hadoop.mapreduce.JobStatus.State.KILLED, job.getJobState());
    assertTrue(job.getStatus().getFailureInfo().contains("mapred job -kill"), job.getStatus().getFailureInfo());
    assertNothingCommittedAndNoStagingLeft(tmp);
  }

  @Test
  @Timeout(180)
  void mapredJobListsShowsAndKillsAJobItDidNotSubmit(@TempDir Path tmp) throws Exception {
    FakeYarn.withheld = "n2"; // the job waits for its gang
    Job job = job(tmp, "sum on yarn, seen from another client");
    job.submit();
    FakeYarn.reuse = true;
    Configuration other = yarnConf(tmp);
    java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
    java.io.PrintStream was = System.out;
    int list;
    int status;
    int kill;
    try {
      System.setOut(new java.io.PrintStream(out, true));
      list = org.apache.hadoop.util.ToolRunner.run(other, new org.apache.hadoop.mapreduce.tools.CLI(other),
          new String[] {"-list", "all"});
      status = org.apache.hadoop.util.ToolRunner.run(other, new org.apache.hadoop.mapreduce.tools.CLI(other),
          new String[] {"-status", job.getJobID().toString()});
      kill = org.apache.hadoop.util.ToolRunner.run(other, new org.apache.hadoop.mapreduce.tools.CLI(other),
          new String[] {"-kill", job.getJobID().toString()});
    } finally {
      System.setOut(was);
    }
    String text = out.toString();
    assertEquals(0, list, text);
    assertTrue(text.contains(job.getJobID().toString()), text);
    assertEquals(0, status, text);
    assertTrue(text.contains("Job state: PREP") || text.contains("Job state: RUNNING"), text);
    assertEquals(0, kill, text);
    assertTrue(text.contains("Killed job " + job.getJobID()), text);
    assertEquals(org.apache.hadoop.mapreduce.JobStatus.State.KILLED, job.getJobState());
    assertEquals(List.of(), filesUnder(tmp.resolve("staging")), "the staging directory is removed");
  }

  @Test
  @Timeout(240)
  void theKMeansExampleOnYarnEqualsHarpKmeans(@TempDir Path tmp) throws Exception {
    harp.KMeansJobTest.javaAgreesWithHarp(tmp, yarnConf(tmp), 3000, 5, 6, 4, 3, 3, 1e-9);
  }
}
