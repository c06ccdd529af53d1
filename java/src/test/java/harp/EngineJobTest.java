package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.examples.engine.EngineJob;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;
import org.apache.hadoop.util.ToolRunner;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Hadoop examples that run the engine's jobs (pagerank, mds, layout, components, id3, nbody, cg, and
 * kmeans and wordcount in their flag form) through LocalJobRunner with 3 map tasks, each equal
 * to `harp JOB` on 2 local worker processes.
 */
class EngineJobTest {
  /** Every line of the result files of {@code dir} (not `_SUCCESS`, not summaries), sorted. */
  static List<String> result(Path dir) throws Exception {
    assertTrue(Files.exists(dir.resolve("_SUCCESS")), "no _SUCCESS in " + dir);
    List<String> lines = new ArrayList<>();
    try (Stream<Path> files = Files.list(dir)) {
      for (Path f : (Iterable<Path>) files.sorted()::iterator) {
        String n = f.getFileName().toString();
        if (n.startsWith("_") || n.startsWith(".") || n.endsWith(".json") || Files.isDirectory(f)) {
          continue;
        }
        for (String l : Files.readAllLines(f)) {
          if (!l.isBlank()) {
            lines.add(n.startsWith("part-") ? l : n + " " + l);
          }
        }
      }
    }
    Collections.sort(lines);
    return lines;
  }

  /** The two results agree line by line, numbers within {@code rel} relative (or 1e-12 absolute). */
  static void sameResult(Path want, Path got, double rel) throws Exception {
    List<String> a = result(want);
    List<String> b = result(got);
    assertEquals(a.size(), b.size(), "lines");
    assertFalse(a.isEmpty());
    for (int i = 0; i < a.size(); i++) {
      String[] x = a.get(i).trim().split("\\s+");
      String[] y = b.get(i).trim().split("\\s+");
      assertEquals(x.length, y.length, a.get(i) + " vs " + b.get(i));
      for (int j = 0; j < x.length; j++) {
        if (x[j].equals(y[j])) {
          continue;
        }
        double u = Double.parseDouble(x[j]);
        double v = Double.parseDouble(y[j]);
        assertTrue(Math.abs(u - v) <= Math.max(rel * Math.abs(u), 1e-12), a.get(i) + " vs " + b.get(i));
      }
    }
  }

  static Path edges(Path dir, int n, int m, long seed) throws Exception {
    Files.createDirectories(dir);
    Random r = new Random(seed);
    StringBuilder a = new StringBuilder();
    StringBuilder b = new StringBuilder();
    for (int i = 0; i < m; i++) {
      (i % 3 == 0 ? b : a).append(r.nextInt(n) * 7L).append(' ').append(r.nextInt(n) * 7L).append('\n');
    }
    Files.writeString(dir.resolve("a.txt"), a);
    Files.writeString(dir.resolve("b.txt"), b);
    return dir;
  }

  static int example(Path tmp, String job, String... args) throws Exception {
    return ToolRunner.run(JobTestSupport.localConf(tmp, 3), new EngineJob(job), args);
  }

  @Test
  @Timeout(180)
  void pagerankAndComponentsEqualTheHarpTool(@TempDir Path tmp) throws Exception {
    Path in = edges(tmp.resolve("edges"), 300, 900, 3);
    KMeansJobTest.harp("pagerank", "--workers", "2", "--input", in.toString(), "--iterations", "15", "--output",
        tmp.resolve("rust-pr").toString());
    assertEquals(0, example(tmp, "pagerank", "--workers", "3", "--input", in.toUri().toString(), "--iterations", "15",
        "--output", tmp.resolve("java-pr").toUri().toString()));
    sameResult(tmp.resolve("rust-pr"), tmp.resolve("java-pr"), 1e-12);

    // Weighted edges (a third field on some lines; one file without any), the same way.
    Path weighted = Files.createDirectories(tmp.resolve("weighted"));
    Random r = new Random(5);
    StringBuilder w = new StringBuilder();
    for (int i = 0; i < 600; i++) {
      w.append(r.nextInt(200)).append(' ').append(r.nextInt(200));
      w.append(i % 4 == 0 ? "\n" : " " + (1 + r.nextInt(40)) / 8.0 + "\n");
    }
    Files.writeString(weighted.resolve("a.txt"), w);
    Files.writeString(weighted.resolve("b.txt"), "1 2\n2 3\n3 1\n");
    KMeansJobTest.harp("pagerank", "--workers", "2", "--input", weighted.toString(), "--iterations", "15",
        "--output", tmp.resolve("rust-wpr").toString());
    assertEquals(0, example(tmp, "pagerank", "--workers", "3", "--input", weighted.toUri().toString(),
        "--iterations", "15", "--output", tmp.resolve("java-wpr").toUri().toString()));
    sameResult(tmp.resolve("rust-wpr"), tmp.resolve("java-wpr"), 1e-12);

    KMeansJobTest.harp("components", "--workers", "2", "--input", in.toString(), "--output",
        tmp.resolve("rust-cc").toString());
    assertEquals(0, example(tmp, "components", "--workers", "3", "--input", in.toUri().toString(), "--output",
        tmp.resolve("java-cc").toUri().toString()));
    sameResult(tmp.resolve("rust-cc"), tmp.resolve("java-cc"), 0);
  }

  /**
   * The wiring of a YARN master restart without YARN: a pagerank job with checkpoints puts their
   * directory into {@code harp.checkpoint.dir}; a rerun of the same arguments with only
   * {@code harp.resume=true} in the configuration (what {@code LaunchSpec.resumeOnRestart} sets
   * for attempt 2) is let into its output directory and resumes, ending with the bits of an
   * uninterrupted job.
   */
  @Test
  @Timeout(180)
  void aPagerankJobResumesWhenItsConfigurationSaysSo(@TempDir Path tmp) throws Exception {
    Path in = edges(tmp.resolve("edges"), 200, 700, 4);
    String out = tmp.resolve("java-ck").toUri().toString();
    assertEquals(0, example(tmp, "pagerank", "--workers", "3", "--input", in.toUri().toString(), "--iterations", "8",
        "--output", tmp.resolve("java-full").toUri().toString()));
    EngineJob first = new EngineJob("pagerank");
    assertEquals(0, ToolRunner.run(JobTestSupport.localConf(tmp, 3), first, new String[] {"--workers", "3",
        "--input", in.toUri().toString(), "--iterations", "4", "--checkpoint-every", "2", "--output", out}));
    String dir = first.job().getConfiguration().get("harp.checkpoint.dir");
    assertEquals(tmp.resolve("java-ck").resolve("_checkpoints").toUri().toString().replaceAll("/$", ""),
        dir.replace("file:/", "file:///").replaceAll("/$", ""));
    assertTrue(Files.exists(tmp.resolve("java-ck/_checkpoints/ckpt-0000000004/manifest.json")));
    org.apache.hadoop.conf.Configuration restarted = JobTestSupport.localConf(tmp, 3);
    restarted.setBoolean("harp.resume", true);
    assertEquals(0, ToolRunner.run(restarted, new EngineJob("pagerank"), new String[] {"--workers", "3",
        "--input", in.toUri().toString(), "--iterations", "8", "--checkpoint-every", "2", "--output", out}));
    assertTrue(Files.exists(tmp.resolve("java-ck/_checkpoints/ckpt-0000000008/manifest.json")));
    sameResult(tmp.resolve("java-full"), tmp.resolve("java-ck"), 0);
  }

  @Test
  @Timeout(180)
  void mdsAndLayoutEqualTheHarpTool(@TempDir Path tmp) throws Exception {
    Path dist = tmp.resolve("d.txt");
    KMeansJobTest.harp("gen", "dist", "--n", "120", "--dim", "3", "--seed", "4", "--output", dist.toString());
    KMeansJobTest.harp("mds", "--workers", "2", "--input", dist.toString(), "--dim", "2", "--iterations", "10",
        "--output", tmp.resolve("rust-mds").toString());
    assertEquals(0, example(tmp, "mds", "--workers", "3", "--input", dist.toUri().toString(), "--dim", "2",
        "--iterations", "10", "--output", tmp.resolve("java-mds").toUri().toString()));
    sameResult(tmp.resolve("rust-mds"), tmp.resolve("java-mds"), 1e-9);

    Path in = edges(tmp.resolve("edges"), 80, 160, 9);
    KMeansJobTest.harp("layout", "--workers", "2", "--input", in.toString(), "--iterations", "10", "--output",
        tmp.resolve("rust-layout").toString());
    assertEquals(0, example(tmp, "layout", "--workers", "3", "--input", in.toUri().toString(), "--iterations", "10",
        "--output", tmp.resolve("java-layout").toUri().toString()));
    sameResult(tmp.resolve("rust-layout"), tmp.resolve("java-layout"), 1e-9);
  }

  @Test
  @Timeout(240)
  void kmeansWordcountAndId3TakeTheFlagsOfTheirHarpJobs(@TempDir Path tmp) throws Exception {
    Path data = tmp.resolve("km");
    KMeansJobTest.harp("gen", "points", "--n", "600", "--dim", "3", "--seed", "2", "--init", "4", "--output",
        data.toString());
    KMeansJobTest.harp("kmeans", "--workers", "2", "--input", data.resolve("points").toString(), "--init",
        data.resolve("init.txt").toString(), "--iterations", "5", "--output", tmp.resolve("rust-km").toString());
    assertEquals(0, ToolRunner.run(JobTestSupport.localConf(tmp, 3), new harp.examples.kmeans.KMeans(),
        new String[] {"--workers", "3", "--input", data.resolve("points").toUri().toString(), "--init",
            data.resolve("init.txt").toString(), "--iterations", "5", "--output",
            tmp.resolve("java-km").toUri().toString()}));
    sameResult(tmp.resolve("rust-km"), tmp.resolve("java-km"), 1e-9);

    Path text = Files.createDirectories(tmp.resolve("text"));
    Files.writeString(text.resolve("a.txt"), "the cat and the hat\nand the bat\n");
    Files.writeString(text.resolve("b.txt"), "a cat\tsat\n");
    KMeansJobTest.harp("wordcount", "--workers", "2", "--input", text.toString(), "--output",
        tmp.resolve("rust-wc").toString());
    assertEquals(0, ToolRunner.run(JobTestSupport.localConf(tmp, 3), new harp.examples.wordcount.WordCount(),
        new String[] {"--workers", "3", "--input", text.toUri().toString(), "--output",
            tmp.resolve("java-wc").toUri().toString()}));
    sameResult(tmp.resolve("rust-wc"), tmp.resolve("java-wc"), 0);

    Path tuples = Files.createDirectories(tmp.resolve("tuples"));
    Random r = new Random(7);
    StringBuilder t = new StringBuilder();
    for (int i = 0; i < 300; i++) {
      int a = r.nextInt(3);
      int b = r.nextInt(2);
      t.append('a').append(a).append(",b").append(b).append(',').append(a == 0 || b == 1 ? "yes" : "no").append('\n');
    }
    Files.writeString(tuples.resolve("t.csv"), t);
    KMeansJobTest.harp("id3", "--workers", "2", "--input", tuples.toString(), "--output",
        tmp.resolve("rust-id3").toString());
    assertEquals(0, example(tmp, "id3", "--workers", "3", "--input", tuples.toUri().toString(), "--output",
        tmp.resolve("java-id3").toUri().toString()));
    sameResult(tmp.resolve("rust-id3"), tmp.resolve("java-id3"), 0);
  }

  /**
   * The jobs that generate their data run without {@code --input} (one empty split per worker)
   * and, like {@code harp nbody} and {@code harp cg}, give the same bits for any worker count;
   * cg also reads its matrix from a file. Another job without {@code --input} is refused.
   */
  @Test
  @Timeout(240)
  void nbodyAndCgRunWithoutInputAndEqualTheHarpTool(@TempDir Path tmp) throws Exception {
    KMeansJobTest.harp("nbody", "--workers", "2", "--bodies", "300", "--steps", "4", "--output",
        tmp.resolve("rust-nbody").toString());
    assertEquals(0, example(tmp, "nbody", "--workers", "3", "--bodies", "300", "--steps", "4", "--output",
        tmp.resolve("java-nbody").toUri().toString()));
    sameResult(tmp.resolve("rust-nbody"), tmp.resolve("java-nbody"), 0);
    assertEquals(300, result(tmp.resolve("java-nbody")).size());

    KMeansJobTest.harp("cg", "--workers", "2", "--grid", "12", "--output", tmp.resolve("rust-cg").toString());
    assertEquals(0, example(tmp, "cg", "--workers", "3", "--grid", "12", "--output",
        tmp.resolve("java-cg").toUri().toString()));
    sameResult(tmp.resolve("rust-cg"), tmp.resolve("java-cg"), 0);

    Path matrix = tmp.resolve("poisson.txt");
    KMeansJobTest.harp("gen", "poisson", "--grid", "12", "--output", matrix.toString());
    assertEquals(0, example(tmp, "cg", "--workers", "3", "--input", matrix.toUri().toString(), "--output",
        tmp.resolve("java-cg-file").toUri().toString()));
    sameResult(tmp.resolve("rust-cg"), tmp.resolve("java-cg-file"), 0);

    Object[] r = KMeansJobTest.runCapturingErr(new EngineJob("pagerank"), JobTestSupport.localConf(tmp, 3),
        "--workers", "2", "--output", tmp.resolve("pr").toUri().toString());
    assertEquals(2, r[0]);
    assertTrue(((String) r[1]).contains("usage: pagerank"), (String) r[1]);
  }

  @Test
  @Timeout(120)
  void badInputFailsTheJobAndLeavesNoResult(@TempDir Path tmp) throws Exception {
    Path in = Files.createDirectories(tmp.resolve("in"));
    Files.writeString(in.resolve("e.txt"), "1 2\n3 x4\n");
    Path out = tmp.resolve("out");
    assertNotEquals(0, example(tmp, "pagerank", "--workers", "2", "--input", in.toUri().toString(), "--iterations",
        "3", "--output", out.toUri().toString()));
    assertFalse(Files.exists(out.resolve("_SUCCESS")));
    assertFalse(Files.exists(out.resolve("_temporary")));
    assertEquals(2, example(tmp, "pagerank", "--workers", "2", "--input", tmp.resolve("nope").toUri().toString(),
        "--output", out.toUri().toString()));
    assertEquals(2, example(tmp, "pagerank", "--input", in.toUri().toString()));
  }

  @Test
  @Timeout(180)
  void anExistingOutputIsRefusedAsByEveryExample(@TempDir Path tmp) throws Exception {
    Path in = edges(tmp.resolve("edges"), 50, 100, 3);
    for (String app : new String[] {"pagerank", "components"}) {
      Path out = Files.createDirectories(tmp.resolve(app + "-out"));
      Files.writeString(out.resolve("keep.txt"), "an earlier result\n");
      Object[] r = KMeansJobTest.runCapturingErr(new EngineJob(app), JobTestSupport.localConf(tmp, 3), "--workers", "2",
          "--input", in.toUri().toString(), "--output", out.toUri().toString());
      assertEquals(2, r[0], app + ": " + r[1]);
      assertTrue(((String) r[1]).contains("already exists"), (String) r[1]);
      assertTrue(Files.exists(out.resolve("keep.txt")) && Files.notExists(out.resolve("_SUCCESS")), app);
    }
  }
}
