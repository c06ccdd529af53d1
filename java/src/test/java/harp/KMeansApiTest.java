package harp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.io.FilePosition;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** {@link KMeans} used directly from a mapper: input modes, the per-iteration callback, failures. */
class KMeansApiTest {
  /**
   * Runs K-means twice, over this task's splits and over the whole input divided by the engine,
   * checks both give the same centroids and that the callback saw every iteration in order.
   */
  public static class ApiMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
        throws IOException, InterruptedException {
      Configuration conf = context.getConfiguration();
      List<Integer> seen = new ArrayList<>();
      KMeans.Result a = KMeans.forTask(this, context).init(conf.get("test.init")).iterations(3)
          .onIteration(it -> seen.add(it.iteration)).run();
      KMeans.Result b = KMeans.on(this).input(conf.get("test.input")).init(conf.get("test.init")).iterations(3).run();
      if (!seen.equals(List.of(1, 2, 3)) || a.iterations.size() != 3) {
        throw new AssertionError("iterations seen " + seen + ", reported " + a.iterations.size());
      }
      for (int j = 0; j < a.k; j++) {
        double[] x = a.centroid(j);
        double[] y = b.centroid(j);
        for (int q = 0; q < a.dim; q++) {
          if (Math.abs(x[q] - y[q]) > 1e-9 * Math.max(1, Math.abs(y[q]))) {
            throw new AssertionError("centroid " + j + ": " + x[q] + " vs " + y[q]);
          }
        }
      }
      // The path used and the share of distances computed: all of them on gemm (the automatic
      // choice for 2 dimensions and 2 centroids); fewer once Yinyang's bounds hold.
      if (!a.assign.equals("gemm") || a.iterations.stream().anyMatch(it -> it.distances != 1.0)) {
        throw new AssertionError("assign " + a.assign + ", distances " + shares(a));
      }
      KMeans.Result y = KMeans.forTask(this, context).init(conf.get("test.init")).iterations(3)
          .option("assign", "yinyang").run();
      double last = y.iterations.get(2).distances;
      if (!y.assign.equals("yinyang") || !(last >= 0 && last < 1)
          || !y.summaryJson(2).contains("\"assign\": \"yinyang\"")) {
        throw new AssertionError("assign " + y.assign + ", distances " + shares(y));
      }
      if (a.points != 4 || a.k != 2 || a.dim != 2 || a.threads != 2) {
        throw new AssertionError("points " + a.points + " k " + a.k + " dim " + a.dim + " threads " + a.threads);
      }
      if (isMaster()) {
        Files.writeString(Path.of(conf.get("test.out")), a.centroidsText());
      }
      context.getCounter("harp-test", "verified").increment(1);
    }
  }

  static List<Double> shares(KMeans.Result r) {
    List<Double> v = new ArrayList<>();
    r.iterations.forEach(it -> v.add(it.distances));
    return v;
  }

  /** Throws from the per-iteration callback on rank 1. */
  public static class ThrowingMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
        throws IOException, InterruptedException {
      KMeans.forTask(this, context).init(context.getConfiguration().get("test.init")).iterations(3)
          .onIteration(it -> {
            if (getSelfID() == 1 && it.iteration == 2) {
              throw new IllegalStateException("callback failed on purpose");
            }
          }).run();
    }
  }

  /** Centroids chosen by the engine (k-means++ over the points) instead of read from a file. */
  public static class SeededMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
        throws IOException, InterruptedException {
      KMeans.Result r = KMeans.forTask(this, context).option("init_method", "kmeans++").option("k", "2")
          .option("seed", "5").iterations(4).run();
      if (isMaster()) {
        Files.writeString(Path.of(context.getConfiguration().get("test.out")), r.centroidsText());
      }
    }
  }

  static Job job(Path tmp, Class<? extends CollectiveMapper<?, ?, ?, ?>> mapper) throws IOException {
    Path in = Files.createDirectories(tmp.resolve("in"));
    Files.writeString(in.resolve("a.txt"), "0 0\n0 1\n");
    Files.writeString(in.resolve("b.txt"), "10 10\n10 11\n");
    Files.writeString(tmp.resolve("init.txt"), "1 1\n9 9\n");
    Configuration conf = JobTestSupport.localConf(tmp, 2);
    conf.set("test.init", tmp.resolve("init.txt").toString());
    conf.set("test.input", in.toString());
    conf.set("test.out", tmp.resolve("centroids.txt").toString());
    conf.setInt(KMeans.THREADS, 2);
    return JobTestSupport.job(conf, in, mapper);
  }

  @Test
  @Timeout(120)
  void splitsAndWholeInputGiveTheSameCentroidsAndEveryIterationIsReported(@TempDir Path tmp) throws Exception {
    Job job = job(tmp, ApiMapper.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    assertEquals(2, job.getCounters().findCounter("harp-test", "verified").getValue());
    double[] got = KMeansJobTest.read(tmp.resolve("centroids.txt"));
    assertArrayEquals(new double[] {0, 0.5, 10, 10.5}, got);
  }

  @Test
  @Timeout(120)
  void theEngineCanChooseTheInitialCentroids(@TempDir Path tmp) throws Exception {
    Job job = job(tmp, SeededMapper.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    double[] got = KMeansJobTest.read(tmp.resolve("centroids.txt"));
    if (got[0] > got[2]) {
      got = new double[] {got[2], got[3], got[0], got[1]};
    }
    assertArrayEquals(new double[] {0, 0.5, 10, 10.5}, got);
  }

  @Test
  @Timeout(120)
  void anExceptionFromTheCallbackFailsTheJob(@TempDir Path tmp) throws Exception {
    Job job = job(tmp, ThrowingMapper.class);
    assertFalse(job.waitForCompletion(false));
  }

  /**
   * On a cluster the default file system is HDFS: "/data/init.txt" in a job means
   * hdfs://namenode/data/init.txt, and the engine must be told so (it would read the local disk).
   */
  @Test
  void pathsWithoutASchemeAreResolvedAgainstTheJobsDefaultFileSystem() {
    Configuration conf = new Configuration();
    conf.set("fs.defaultFS", "hdfs://localhost:1");
    String spec = KMeans.on(null).configuration(conf).init("/data/init.txt").input("points").spec();
    assertTrue(spec.contains("init=hdfs://localhost:1/data/init.txt\n"), spec);
    assertTrue(spec.contains("input=hdfs://localhost:1/user/") && spec.contains("/points\n"), spec);
    String local = KMeans.on(null).configuration(new Configuration()).init("file:///tmp/i.txt").spec();
    assertTrue(local.contains("init=file:/tmp/i.txt\n"), local);
  }

  @Test
  void checkpointOptionsGoIntoTheSpec() {
    String spec = KMeans.on(null).init("/i.txt").input("/p").checkpointEvery(3).checkpointDir("/ck").resume(true)
        .job("job_1_0001").spec();
    assertTrue(spec.contains("checkpoint_every=3\n") && spec.contains("checkpoint_dir=/ck\n")
        && spec.contains("resume=true\n") && spec.contains("job=job_1_0001\n"), spec);
    // Checkpoints or resume without a directory, a negative period and a path-like job name are refused.
    org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
        () -> KMeans.on(null).init("/i.txt").input("/p").checkpointEvery(2).spec());
    org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class,
        () -> KMeans.on(null).init("/i.txt").input("/p").resume(true).spec());
    org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class, () -> KMeans.on(null).checkpointEvery(-1));
    org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class, () -> KMeans.on(null).job("a/b"));
    String plain = KMeans.on(null).init("/i.txt").input("/p").spec();
    assertTrue(!plain.contains("checkpoint") && !plain.contains("resume"), plain);
  }

  @Test
  void badArgumentsAreRejectedBeforeAnyNativeCall() {
    Configuration conf = new Configuration(false);
    conf.setInt("mapreduce.map.cpu.vcores", 4);
    assertEquals(4, KMeans.threads(conf));
    conf.setInt(KMeans.THREADS, 2);
    assertEquals(2, KMeans.threads(conf));
    assertEquals(1, KMeans.threads(new Configuration(false)));
    KMeans.Builder b = KMeans.on(null);
    org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class, () -> b.iterations(0));
    org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class, () -> b.init("a\nb"));
    org.junit.jupiter.api.Assertions.assertThrows(IllegalArgumentException.class, b::spec);
  }
}
