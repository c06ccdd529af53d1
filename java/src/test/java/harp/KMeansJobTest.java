package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.examples.kmeans.KMeans;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.util.ToolRunner;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The Java K-means example through LocalJobRunner against `harp kmeans` on the same data. */
public class KMeansJobTest {
  /** Runs the harp binary (-Dharp.bin) and asserts it succeeded; also used by the YARN tests. */
  public static void harp(String... args) throws IOException, InterruptedException {
    String[] cmd = new String[args.length + 1];
    cmd[0] = JobTestSupport.harpBinary();
    System.arraycopy(args, 0, cmd, 1, args.length);
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(p.waitFor(120, TimeUnit.SECONDS), "harp did not finish");
    assertEquals(0, p.exitValue(), out);
  }

  /** Every number of a centroids file, in order. */
  public static double[] read(Path f) throws IOException {
    List<String> lines = Files.readAllLines(f);
    return lines.stream().filter(l -> !l.isBlank()).flatMap(l -> java.util.Arrays.stream(l.trim().split("\\s+")))
        .mapToDouble(Double::parseDouble).toArray();
  }

  /**
   * Generates n points of dimension dim and k initial centroids, runs `harp kmeans` (harpWorkers
   * processes, extra flags harpFlags) and the Java example (javaWorkers map tasks, conf) for
   * `iterations`, and asserts every centroid value agrees within the relative tolerance `rel`.
   * Returns the Java centroids.
   */
  public static double[] javaAgreesWithHarp(Path tmp, Configuration conf, int n, int dim, int k, int iterations,
      int harpWorkers, int javaWorkers, double rel, String... harpFlags) throws Exception {
    Path data = tmp.resolve("data");
    harp("gen", "points", "--n", "" + n, "--dim", "" + dim, "--seed", "11", "--init", "" + k, "--files", "3",
        "--output", data.toString());
    List<String> cmd = new java.util.ArrayList<>(List.of("kmeans", "--workers", "" + harpWorkers, "--input",
        data.resolve("points").toString(), "--init", data.resolve("init.txt").toString(), "--iterations",
        "" + iterations, "--output", tmp.resolve("rust").toString()));
    cmd.addAll(List.of(harpFlags));
    harp(cmd.toArray(new String[0]));
    // file: URIs, so the paths mean the local files whatever the job's default file system is.
    int rc = ToolRunner.run(conf, new KMeans(), new String[] {data.resolve("points").toUri().toString(),
        data.resolve("init.txt").toUri().toString(), tmp.resolve("java").toUri().toString(), "" + iterations,
        "" + javaWorkers});
    assertEquals(0, rc);
    double[] want = read(tmp.resolve("rust").resolve("centroids.txt"));
    double[] got = read(tmp.resolve("java").resolve("centroids.txt"));
    assertEquals(k * dim, want.length);
    assertEquals(want.length, got.length);
    for (int i = 0; i < want.length; i++) {
      double d = Math.abs(got[i] - want[i]) / Math.max(Math.abs(want[i]), 1e-300);
      assertTrue(d <= rel, "value " + i + ": " + got[i] + " vs " + want[i]);
    }
    return got;
  }

  @Test
  @Timeout(180)
  void javaKMeansEqualsHarpKmeans(@TempDir Path tmp) throws Exception {
    javaAgreesWithHarp(tmp, JobTestSupport.localConf(tmp, 4), 4000, 6, 7, 5, 3, 4, 1e-9);
  }

  /** tmp/in/p.txt holding {@code points} and tmp/init.txt holding {@code init}; returns tmp/in. */
  static Path smallInput(Path tmp, String points, String init) throws IOException {
    Path in = Files.createDirectories(tmp.resolve("in"));
    Files.writeString(in.resolve("p.txt"), points);
    Files.writeString(tmp.resolve("init.txt"), init);
    return in;
  }

  @Test
  @Timeout(120)
  void malformedPointsNameTheFileAndLine(@TempDir Path tmp) throws Exception {
    Path in = smallInput(tmp, "1 2\n3 4\n5 oops\n7 8\n", "0 0\n1 1\n");
    Object[] r = runCapturingErr(new KMeans(), JobTestSupport.localConf(tmp, 1), in.toString(),
        tmp.resolve("init.txt").toString(), tmp.resolve("out").toString(), "2", "1");
    assertNotEquals(0, r[0]);
    String log = (String) r[1];
    assertTrue(log.contains("p.txt:3: ") && log.contains("oops"), log);
  }

  /** Runs the example with stderr captured; returns {exit code, stderr}. */
  static Object[] runCapturingErr(org.apache.hadoop.util.Tool tool, Configuration conf, String... args) throws Exception {
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    PrintStream old = System.err;
    int rc;
    try {
      System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
      rc = ToolRunner.run(conf, tool, args);
    } finally {
      System.setErr(old);
    }
    return new Object[] {rc, err.toString(StandardCharsets.UTF_8)};
  }

  /** The integer value of a top-level key of summary.json. */
  static long summaryValue(Path summary, String key) throws IOException {
    java.util.regex.Matcher m = java.util.regex.Pattern.compile("\"" + key + "\": (\\d+)").matcher(Files.readString(summary));
    assertTrue(m.find(), key + " missing from " + summary);
    return Long.parseLong(m.group(1));
  }

  @Test
  @Timeout(180)
  void threadsComeFromTheKeyElseTheVcoresAndTheMasterAloneCountsIterations(@TempDir Path tmp) throws Exception {
    Path data = tmp.resolve("data");
    harp("gen", "points", "--n", "3000", "--dim", "4", "--seed", "5", "--init", "5", "--files", "2",
        "--output", data.toString());
    String[] common = {data.resolve("points").toString(), data.resolve("init.txt").toString()};
    Configuration conf = JobTestSupport.localConf(tmp.resolve("a"), 2);
    conf.setInt(harp.KMeans.THREADS, 3);
    conf.setInt("mapreduce.map.cpu.vcores", 2);
    KMeans tool = new KMeans();
    assertEquals(0, ToolRunner.run(conf, tool, new String[] {common[0], common[1], tmp.resolve("a-out").toString(), "4", "2"}));
    Path summary = tmp.resolve("a-out").resolve("summary.json");
    assertEquals(3, summaryValue(summary, "threads"));
    assertEquals(2, summaryValue(summary, "workers"));
    assertEquals(3000, summaryValue(summary, "points"));
    assertEquals(4, tool.job().getCounters().findCounter("harp-kmeans", "iterations").getValue(),
        "iterations counted once, not once per worker");

    conf = JobTestSupport.localConf(tmp.resolve("b"), 2);
    conf.setInt("mapreduce.map.cpu.vcores", 2);
    assertEquals(0, ToolRunner.run(conf, new KMeans(), new String[] {common[0], common[1], tmp.resolve("b-out").toString(), "1", "2"}));
    assertEquals(2, summaryValue(tmp.resolve("b-out").resolve("summary.json"), "threads"));

    conf = JobTestSupport.localConf(tmp.resolve("c"), 2);
    conf.setInt(harp.KMeans.THREADS, 0);
    Object[] r = runCapturingErr(new KMeans(), conf, common[0], common[1], tmp.resolve("c-out").toString(), "1", "2");
    assertNotEquals(0, r[0]);
    assertTrue(((String) r[1]).contains("harp.kmeans.threads must be at least 1"), (String) r[1]);
  }

  @Test
  @Timeout(120)
  void aMissingInitFileFailsTheJobNamingIt(@TempDir Path tmp) throws Exception {
    Path in = Files.createDirectories(tmp.resolve("in"));
    Files.writeString(in.resolve("p.txt"), "1 2\n3 4\n5 6\n7 8\n");
    String init = tmp.resolve("no-such-init.txt").toString();
    Object[] r = runCapturingErr(new KMeans(), JobTestSupport.localConf(tmp, 2), in.toString(), init,
        tmp.resolve("out").toString(), "2", "2");
    assertNotEquals(0, r[0]);
    String log = (String) r[1];
    assertTrue(log.contains("HarpException") && log.contains(init), log);
    assertTrue(Files.notExists(tmp.resolve("out").resolve("centroids.txt")));
    // The failed job leaves neither _temporary nor the output directory it created: the same
    // command runs again (and fails for the same reason, not for an existing output).
    assertTrue(Files.notExists(tmp.resolve("out")), "the failed job left its output directory behind");
    r = runCapturingErr(new KMeans(), JobTestSupport.localConf(tmp, 2), in.toString(), init,
        tmp.resolve("out").toString(), "2", "2");
    assertNotEquals(0, r[0]);
    assertTrue(((String) r[1]).contains(init) && !((String) r[1]).contains("already exists"), (String) r[1]);
  }

  @Test
  @Timeout(120)
  void anInputWithASubdirectoryIsRefusedBeforeTheJobStarts(@TempDir Path tmp) throws Exception {
    Path in = smallInput(tmp, "1 2\n3 4\n5 6\n7 8\n", "0 0\n1 1\n");
    Files.writeString(Files.createDirectories(in.resolve("more")).resolve("q.txt"), "9 9\n");
    Files.createDirectories(in.resolve("_hidden"));
    Object[] r = runCapturingErr(new KMeans(), JobTestSupport.localConf(tmp, 2), in.toString(),
        tmp.resolve("init.txt").toString(), tmp.resolve("out").toString(), "2", "2");
    assertEquals(2, r[0], (String) r[1]);
    assertTrue(((String) r[1]).contains("holds a subdirectory") && ((String) r[1]).contains("/in/more"), (String) r[1]);
    assertTrue(Files.notExists(tmp.resolve("out")));
    // Any map-collective job: its input format refuses it at submission, in the client.
    org.apache.hadoop.mapreduce.Job job = org.apache.hadoop.mapreduce.Job.getInstance(JobTestSupport.localConf(tmp, 2));
    job.getConfiguration().setInt(harp.io.WorkerInputFormat.WORKERS, 2);
    org.apache.hadoop.mapreduce.lib.input.FileInputFormat.addInputPath(job, new org.apache.hadoop.fs.Path(in.toUri()));
    java.io.IOException e = org.junit.jupiter.api.Assertions.assertThrows(java.io.IOException.class,
        () -> new harp.io.WorkerInputFormat().getSplits(job));
    assertTrue(e.getMessage().contains("holds a subdirectory") && e.getMessage().contains("/in/more"), e.getMessage());
  }

  @Test
  @Timeout(120)
  void anExistingOutputIsRefusedUnlessOverwriteIsAsked(@TempDir Path tmp) throws Exception {
    Path in = smallInput(tmp, "1 2\n3 4\n5 6\n7 8\n", "0 0\n9 9\n");
    Path out = Files.createDirectories(tmp.resolve("out"));
    Files.writeString(out.resolve("old.txt"), "an earlier result\n");
    String[] args = {in.toString(), tmp.resolve("init.txt").toString(), out.toString(), "2", "2"};
    Object[] r = runCapturingErr(new KMeans(), JobTestSupport.localConf(tmp, 2), args);
    assertEquals(2, r[0]);
    assertTrue(((String) r[1]).contains("already exists") && ((String) r[1]).contains("-Dharp.overwrite=true"), (String) r[1]);
    assertTrue(Files.exists(out.resolve("old.txt")));
    Configuration conf = JobTestSupport.localConf(tmp, 2);
    conf.setBoolean(harp.examples.MapCollectiveJobs.OVERWRITE, true);
    assertEquals(0, ToolRunner.run(conf, new KMeans(), args));
    assertTrue(Files.exists(out.resolve("_SUCCESS")) && Files.exists(out.resolve("centroids.txt")));
    assertTrue(Files.notExists(out.resolve("old.txt")), "the old result was replaced");
  }

  @Test
  @Timeout(120)
  void anEmptyInputFailsTheJobLikeHarpKmeans(@TempDir Path tmp) throws Exception {
    Files.writeString(tmp.resolve("init.txt"), "0 0\n1 1\n");
    Path emptyDir = Files.createDirectories(tmp.resolve("empty-dir"));
    Path emptyFileDir = Files.createDirectories(tmp.resolve("empty-file"));
    Files.writeString(emptyFileDir.resolve("p.txt"), "");
    for (Path in : new Path[] {emptyDir, emptyFileDir, emptyFileDir.resolve("p.txt")}) {
      Path out = tmp.resolve("out-" + in.getFileName());
      Object[] r = runCapturingErr(new KMeans(), JobTestSupport.localConf(tmp, 2), in.toString(),
          tmp.resolve("init.txt").toString(), out.toString(), "2", "2");
      assertEquals(2, r[0], in + ": " + r[1]);
      assertTrue(((String) r[1]).contains("no points in"), (String) r[1]);
      assertTrue(Files.notExists(out.resolve("centroids.txt")) && Files.notExists(out.resolve("_SUCCESS")));
    }
  }

  @Test
  @Timeout(240)
  void aResumedJobGivesTheUninterruptedCentroidsBitForBit(@TempDir Path tmp) throws Exception {
    Path data = tmp.resolve("data");
    harp("gen", "points", "--n", "3000", "--dim", "4", "--seed", "23", "--init", "6", "--files", "2",
        "--output", data.toString());
    String points = data.resolve("points").toUri().toString();
    String init = data.resolve("init.txt").toUri().toString();
    Path full = tmp.resolve("full");
    assertEquals(0, ToolRunner.run(JobTestSupport.localConf(tmp, 3), new KMeans(),
        new String[] {points, init, full.toUri().toString(), "6", "3"}));
    assertTrue(Files.exists(full.resolve("_SUCCESS")) && Files.notExists(full.resolve("_temporary")));
    // 2 iterations with checkpoints, then resumed up to 6.
    Path out = tmp.resolve("out");
    Configuration conf = JobTestSupport.localConf(tmp, 3);
    conf.setInt(harp.KMeans.CHECKPOINT_EVERY, 1);
    assertEquals(0, ToolRunner.run(conf, new KMeans(), new String[] {points, init, out.toUri().toString(), "2", "3"}));
    assertTrue(Files.exists(out.resolve("_checkpoints").resolve("ckpt-0000000002").resolve("manifest.json")));
    // Without resume an existing output is refused.
    Object[] r = runCapturingErr(new KMeans(), JobTestSupport.localConf(tmp, 3), points, init, out.toUri().toString(), "6", "3");
    assertEquals(2, r[0]);
    assertTrue(((String) r[1]).contains("already exists"), (String) r[1]);
    Configuration again = JobTestSupport.localConf(tmp, 3);
    again.setBoolean(harp.KMeans.RESUME, true);
    assertEquals(0, ToolRunner.run(again, new KMeans(), new String[] {points, init, out.toUri().toString(), "6", "3"}));
    assertEquals(Files.readString(full.resolve("centroids.txt")), Files.readString(out.resolve("centroids.txt")));
    assertTrue(Files.exists(out.resolve("_SUCCESS")));
    // Six iterations are listed (2 from the checkpoint, 4 new) in the summary, as uninterrupted.
    assertEquals(6, Files.readString(out.resolve("summary.json")).split("\"inertia\"", -1).length - 1);
  }

  @Test
  @Timeout(180)
  void javaKMeansInF32EqualsHarpKmeansInF32(@TempDir Path tmp) throws Exception {
    Configuration conf = JobTestSupport.localConf(tmp, 3);
    conf.set(KMeans.PRECISION, "f32");
    double[] got = javaAgreesWithHarp(tmp, conf, 5000, 8, 6, 4, 2, 3, 1e-5, "--precision", "f32");
    for (int i = 0; i < got.length; i++) {
      assertEquals((double) (float) got[i], got[i], "value " + i + " is not an f32: the run was not in f32");
    }
  }
}
