package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.io.FilePosition;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link CollectiveMapper#checkpoints}: a job that checkpoints two tables (one allreduced, the
 * same everywhere; one of each worker's own) fails after an iteration; its rerun with
 * {@code harp.resume=true} learns the iteration to resume from, restores both tables and ends
 * with the same bits as the job run without a failure.
 */
class CheckpointsJobTest {
  static final int ITERATIONS = 7;

  /** An iterative job over two tables; rank 1 throws after iteration {@code test.fail.after}. */
  public static class IterativeMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
        throws IOException, InterruptedException {
      Configuration conf = context.getConfiguration();
      int r = getSelfID();
      Table model = newTable(Combiner.SUM);
      Table local = newTable(Combiner.SUM);
      Checkpoints ck = checkpoints(context, "model", "local");
      int start = ck.resumeIteration();
      if (start > 0) {
        ck.restore("model", model);
        ck.restore("local", local);
      } else {
        model.put(0, new double[] {1, 2, 3, 4});
        local.put(r, new double[] {r + 0.5, r + 1.5, r + 2.5, r + 3.5});
      }
      for (int it = start + 1; it <= ITERATIONS; it++) {
        double[] m = model.get(0).toDoubleArray();
        double[] l = local.get(r).toDoubleArray();
        double[] mine = new double[4];
        for (int i = 0; i < 4; i++) {
          l[i] = l[i] * 1.1 + m[i] / 3;
          mine[i] = l[i] / (it + 1.0);
        }
        local.put(r, l);
        model.put(0, mine);
        allreduce("model", model);
        ck.afterIteration(it, ITERATIONS, model, local);
        if (r == 1 && it == conf.getInt("test.fail.after", -1)) {
          throw new IllegalStateException("failing on purpose after iteration " + it);
        }
      }
      StringBuilder sb = new StringBuilder("resumed " + start + "\n");
      for (double v : model.get(0).toDoubleArray()) {
        sb.append(Long.toHexString(Double.doubleToRawLongBits(v))).append('\n');
      }
      for (double v : local.get(r).toDoubleArray()) {
        sb.append(Long.toHexString(Double.doubleToRawLongBits(v))).append('\n');
      }
      Files.writeString(Path.of(conf.get("test.out") + "-" + r), sb.toString());
    }
  }

  static Job job(Path tmp, String name, Configuration extra) throws IOException {
    Path in = Files.createDirectories(tmp.resolve("in"));
    Files.writeString(in.resolve("a.txt"), "a\nb\n");
    Configuration conf = JobTestSupport.localConf(tmp.resolve(name), 2);
    conf.set("test.out", tmp.resolve(name + ".out").toString());
    extra.forEach(e -> conf.set(e.getKey(), e.getValue()));
    return JobTestSupport.job(conf, in, IterativeMapper.class);
  }

  /** Rank {@code r}'s output without its first line, and that line. */
  static String[] out(Path tmp, String name, int r) throws IOException {
    String s = Files.readString(tmp.resolve(name + ".out-" + r));
    int nl = s.indexOf('\n');
    return new String[] {s.substring(0, nl), s.substring(nl + 1)};
  }

  @Test
  @Timeout(180)
  void aFailedJobResumesFromItsLastCheckpointToTheSameBits(@TempDir Path tmp) throws Exception {
    Job full = job(tmp, "full", new Configuration(false));
    assertTrue(full.waitForCompletion(false), "job failed: " + full.getStatus().getFailureInfo());

    Path dir = tmp.resolve("checkpoints");
    Configuration ck = new Configuration(false);
    ck.set(Checkpoints.EVERY, "2");
    ck.set(Checkpoints.DIR, dir.toString());
    Configuration failing = new Configuration(ck);
    failing.set("test.fail.after", "5");
    Job failed = job(tmp, "failed", failing);
    assertFalse(failed.waitForCompletion(false), "the failing job succeeded");
    assertTrue(Files.exists(dir.resolve("ckpt-0000000004").resolve("manifest.json")));
    assertFalse(Files.exists(dir.resolve("ckpt-0000000006")));

    Configuration resume = new Configuration(ck);
    resume.set(Checkpoints.RESUME, "true");
    Job resumed = job(tmp, "resumed", resume);
    assertTrue(resumed.waitForCompletion(false), "job failed: " + resumed.getStatus().getFailureInfo());
    for (int r = 0; r < 2; r++) {
      assertEquals("resumed 0", out(tmp, "full", r)[0]);
      assertEquals("resumed 4", out(tmp, "resumed", r)[0]);
      assertEquals(out(tmp, "full", r)[1], out(tmp, "resumed", r)[1], "rank " + r);
    }
    // The resumed job saved 6 and 7 and kept those two.
    assertTrue(Files.exists(dir.resolve("ckpt-0000000007").resolve("manifest.json")));
    assertFalse(Files.exists(dir.resolve("ckpt-0000000004")));
  }

  @Test
  @Timeout(120)
  void checkpointsWithoutADirectoryFailTheJob(@TempDir Path tmp) throws Exception {
    Configuration c = new Configuration(false);
    c.set(Checkpoints.EVERY, "2");
    Job job = job(tmp, "nodir", c);
    assertFalse(job.waitForCompletion(false), "a job without a checkpoint directory succeeded");
  }
}
