package harp.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.CollectiveMapper;
import harp.Combiner;
import harp.KeyValReader;
import harp.Table;
import harp.io.FilePosition;
import harp.io.WorkerInputFormat;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.LongWritable;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapred.JobConf;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.JobContext;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.output.FileOutputCommitter;
import org.apache.hadoop.mapreduce.lib.output.FileOutputFormat;
import org.apache.hadoop.mapreduce.lib.output.TextOutputFormat;
import org.apache.hadoop.mapreduce.split.JobSplit;
import org.apache.hadoop.mapreduce.split.JobSplitWriter;
import org.apache.hadoop.mapreduce.split.SplitMetaInfoReader;
import org.apache.hadoop.mapreduce.task.JobContextImpl;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The worker side of YARN mode with real processes: each worker is a JVM running WorkerMain
 * (as a container would), registers with the master's registry, receives the roster, runs the
 * job's CollectiveMapper with a real Mapper.Context over its assigned split, and writes through
 * the job's OutputFormat; the master then commits the job output.
 */
class WorkerProcessesTest {
  /** Sums the numbers of its split, allreduces, and writes (rank, global sum). */
  public static class SumMapper extends CollectiveMapper<FilePosition, Text, Text, LongWritable> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
        throws IOException, InterruptedException {
      long sum = 0;
      while (reader.nextKeyValue()) {
        sum += Long.parseLong(reader.getCurrentValue().toString().trim());
      }
      Table t = newTable(Combiner.SUM);
      t.put(0, new long[] {sum});
      allreduce("sum", t);
      context.getCounter("test", "records").increment(1);
      context.write(new Text("rank" + getSelfID()), new LongWritable(t.get(0).toLongArray()[0]));
    }
  }

  static final int N = 3;

  static final class Setup extends Value {
    private final Path jobXml;
    private final Path splitFile;
    private final List<Long> offsets;
    private final Path out;
    private final Configuration conf;

    Setup(Path jobXml, Path splitFile, List<Long> offsets, Path out, Configuration conf) {
      this.jobXml = jobXml;
      this.splitFile = splitFile;
      this.offsets = offsets;
      this.out = out;
      this.conf = conf;
    }

    public Path jobXml() {
      return jobXml;
    }

    public Path splitFile() {
      return splitFile;
    }

    public List<Long> offsets() {
      return offsets;
    }

    public Path out() {
      return out;
    }

    public Configuration conf() {
      return conf;
    }

    @Override
    Object[] fields() {
      return new Object[] {jobXml, splitFile, offsets, out, conf};
    }

    @Override
    String[] names() {
      return new String[] {"jobXml", "splitFile", "offsets", "out", "conf"};
    }
  }

  static Setup prepare(Path tmp, String amAddress) throws Exception {
    Path in = Files.createDirectories(tmp.resolve("in"));
    StringBuilder a = new StringBuilder();
    for (int i = 1; i <= 300; i++) {
      a.append(i).append('\n');
    }
    Files.writeString(in.resolve("a.txt"), a.toString());
    Path out = tmp.resolve("out");
    Job job = Job.getInstance(new Configuration());
    Configuration conf = job.getConfiguration();
    // Like HDFS on a real cluster: the default file system is not the container's directory.
    ElsewhereFileSystem.install(conf);
    conf.set("mapreduce.job.id", "job_1700000000000_0007");
    conf.set("harp.am.address", amAddress);
    conf.setInt(WorkerInputFormat.WORKERS, N);
    conf.setLong("harp.connect.timeout.ms", 20_000);
    conf.setLong("harp.collective.timeout.ms", 20_000);
    conf.set("harp.worker.host", "127.0.0.1");
    job.setInputFormatClass(WorkerInputFormat.class);
    FileInputFormat.addInputPath(job, new org.apache.hadoop.fs.Path(in.toUri()));
    job.setMapperClass(SumMapper.class);
    job.setOutputFormatClass(TextOutputFormat.class);
    job.setOutputKeyClass(Text.class);
    job.setOutputValueClass(LongWritable.class);
    FileOutputFormat.setOutputPath(job, new org.apache.hadoop.fs.Path(out.toUri()));
    JobContext jc = new JobContextImpl(conf, job.getJobID());
    List<InputSplit> splits = new WorkerInputFormat().getSplits(jc);
    assertEquals(N, splits.size());
    // The job submitter's split files, read back the way the master does.
    org.apache.hadoop.fs.Path jobDir = new org.apache.hadoop.fs.Path(tmp.resolve("jobdir").toUri());
    org.apache.hadoop.fs.FileSystem fs = jobDir.getFileSystem(conf);
    JobSplitWriter.createSplitFiles(jobDir, conf, fs, splits);
    List<Long> offsets = new ArrayList<>();
    for (JobSplit.TaskSplitMetaInfo m : SplitMetaInfoReader.readSplitMetaInfo(job.getJobID(), fs, conf, jobDir)) {
      offsets.add(m.getStartOffset());
    }
    assertEquals(N, offsets.size());
    Path xml = tmp.resolve("job.xml");
    try (FileOutputStream o = new FileOutputStream(xml.toFile())) {
      conf.writeXml(o);
    }
    return new Setup(xml, tmp.resolve("jobdir").resolve("job.split"), offsets, out, conf);
  }

  /**
   * Worker {@code rank} as a NodeManager starts it: in its own container directory holding
   * job.xml and job.split (named relatively on the command line), with its credentials (here: the
   * job secret {@code secret}) in the token file the environment names.
   */
  static Process worker(Setup s, int rank, String secret) throws IOException {
    Path dir = Files.createDirectories(s.jobXml().resolveSibling("container-" + rank));
    Files.copy(s.jobXml(), dir.resolve("job.xml"), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
    Files.deleteIfExists(dir.resolve("job.split"));
    Files.createSymbolicLink(dir.resolve("job.split"), s.splitFile());
    org.apache.hadoop.security.Credentials creds = new org.apache.hadoop.security.Credentials();
    creds.addSecretKey(harp.mapred.JobSecret.KEY, secret.getBytes(java.nio.charset.StandardCharsets.US_ASCII));
    Path tokens = dir.resolve("container_tokens");
    try (java.io.DataOutputStream o = new java.io.DataOutputStream(Files.newOutputStream(tokens))) {
      creds.writeTokenStorageToStream(o);
    }
    List<String> cp = new ArrayList<>();
    for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
      cp.add(new File(e).getAbsolutePath());
    }
    ProcessBuilder pb = new ProcessBuilder(System.getProperty("java.home") + File.separator + "bin" + File.separator + "java",
        "-cp", String.join(File.pathSeparator, cp), WorkerMain.class.getName(), "job.xml",
        Integer.toString(rank), "job.split", Long.toString(s.offsets().get(rank)));
    pb.directory(dir.toFile());
    pb.environment().put("HADOOP_TOKEN_FILE_LOCATION", tokens.toString());
    pb.redirectErrorStream(true);
    pb.redirectOutput(s.jobXml().resolveSibling("worker-" + rank + ".log").toFile());
    return pb.start();
  }

  static String log(Setup s, int rank) throws IOException {
    return Files.readString(s.jobXml().resolveSibling("worker-" + rank + ".log"));
  }

  /** A master in the STARTING state (all containers held and launched), through fakes. */
  static GangMaster startedMaster(GangMasterTest.Fake f) {
    GangMaster m = new GangMaster(new AmConfig(N, 1024, 1, 60_000, 1, 0), f, f, f);
    m.start(0, GangMasterTest.nodes(N), GangMasterTest.groups(N));
    for (int i = 0; i < N; i++) {
      String r = f.requests.get(i);
      m.onAllocated(new GangMaster.Container("c" + i, r.substring(r.indexOf('@') + 1, r.indexOf(':'))));
    }
    assertEquals(GangMaster.State.STARTING, m.state());
    return m;
  }

  @Test
  @Timeout(120)
  void workersRegisterRunTheMapperOverTheirSplitsAndTheOutputIsCommitted(@TempDir Path tmp) throws Exception {
    GangMasterTest.Fake f = new GangMasterTest.Fake();
    GangMaster master = startedMaster(f);
    try (Registry reg = new Registry(master, "job-secret-number-1".getBytes(), InetAddress.getLoopbackAddress())) {
      Setup s = prepare(tmp, reg.address());
      List<Process> ps = new ArrayList<>();
      for (int r = 0; r < N; r++) {
        ps.add(worker(s, r, "job-secret-number-1"));
      }
      for (int r = 0; r < N; r++) {
        assertTrue(ps.get(r).waitFor(90, TimeUnit.SECONDS), "worker " + r + " hangs");
        assertEquals(0, ps.get(r).exitValue(), log(s, r));
        master.onCompleted("c" + r, 0, "");
      }
      assertEquals(GangMaster.State.SUCCEEDED, master.state());
      // What the real master's Committer does: the job's OutputCommitter commits the job.
      JobContext jc = new JobContextImpl(new JobConf(s.conf()), org.apache.hadoop.mapreduce.JobID.forName("job_1700000000000_0007"));
      new FileOutputCommitter(new org.apache.hadoop.fs.Path(s.out().toUri()), jc).commitJob(jc);
      assertTrue(Files.exists(s.out().resolve("_SUCCESS")));
      List<String> lines = new ArrayList<>();
      try (var files = Files.list(s.out())) {
        for (Path p : files.filter(p -> p.getFileName().toString().startsWith("part-m-")).sorted().collect(java.util.stream.Collectors.toList())) {
          lines.addAll(Files.readAllLines(p));
        }
      }
      assertEquals(List.of("rank0\t45150", "rank1\t45150", "rank2\t45150"), lines);
    }
  }

  @Test
  void aWorkerGivenSeveralSplitsShowsThemAllAsItsTaskSplit() throws Exception {
    var a = new org.apache.hadoop.mapreduce.lib.input.FileSplit(new org.apache.hadoop.fs.Path("/a"), 0, 10, null);
    var b = new org.apache.hadoop.mapreduce.lib.input.FileSplit(new org.apache.hadoop.fs.Path("/b"), 5, 7, null);
    assertEquals(a, WorkerMain.contextSplit(List.of(a)));
    InputSplit both = WorkerMain.contextSplit(List.of(a, b));
    assertTrue(both instanceof WorkerInputFormat.GroupSplit, both.getClass().getName());
    assertEquals(List.of(a, b), ((WorkerInputFormat.GroupSplit) both).fileSplits());
    assertEquals(17, both.getLength());
  }

  @Test
  @Timeout(120)
  void aWorkerWithAWrongSecretIsRefusedAndTheJobFailsEverywhere(@TempDir Path tmp) throws Exception {
    GangMasterTest.Fake f = new GangMasterTest.Fake();
    GangMaster master = startedMaster(f);
    try (Registry reg = new Registry(master, "job-secret-number-2".getBytes(), InetAddress.getLoopbackAddress())) {
      Setup s = prepare(tmp, reg.address());
      Process good0 = worker(s, 0, "job-secret-number-2");
      Process bad = worker(s, 1, "not-the-job-secret");
      Process good2 = worker(s, 2, "job-secret-number-2");
      assertTrue(bad.waitFor(60, TimeUnit.SECONDS));
      assertNotEquals(0, bad.exitValue());
      assertTrue(log(s, 1).contains("refused registration"), log(s, 1));
      // The master sees the container fail, stops the gang and tells the waiting workers.
      master.onCompleted("c1", 1, "registration refused");
      reg.failAll(master.diagnostics());
      for (Process p : List.of(good0, good2)) {
        assertTrue(p.waitFor(60, TimeUnit.SECONDS));
        assertNotEquals(0, p.exitValue());
      }
      assertTrue(log(s, 0).contains("refused registration: FAIL worker 1"), log(s, 0));
      assertEquals(false, f.succeeded);
      assertEquals(List.of("c0", "c2"), f.stopped);
    }
  }
}
