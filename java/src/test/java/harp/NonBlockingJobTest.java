package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.io.FilePosition;
import java.nio.file.Path;
import java.util.Arrays;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Collectives started without blocking ({@link Pending}) through LocalJobRunner with 4 map tasks. */
class NonBlockingJobTest {
  static final int P = 4;

  public static class Started extends CollectiveMapper<FilePosition, Text, Object, Object> {
    int verified;

    void expect(String what, double[] want, double[] got) {
      if (!Arrays.equals(want, got)) {
        throw new AssertionError("rank " + getSelfID() + ": " + what + ": expected " + Arrays.toString(want)
            + " got " + Arrays.toString(got));
      }
      verified++;
    }

    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context) throws java.io.IOException,
        InterruptedException {
      while (reader.nextKeyValue()) {
        // the input only decides the number of workers
      }
      int r = getSelfID();
      // Rotation of two slices: one moves while the other is computed on.
      Table a = newTable(Combiner.SUM);
      a.put(0, new double[] {r});
      Table b = newTable(Combiner.SUM);
      b.put(1, new double[] {10 * r});
      Pending<Table> ra = rotateStart("slice-a", a);
      Table sums = newTable(Combiner.SUM);
      sums.put(2, new double[] {r + 1});
      Pending<Table> sum = allreduceStart("sums", sums);
      Pending<Void> dropped = barrierStart("closed unread");
      Pending<Table> rb = rotateStart("slice-b", b);
      double work = 0;
      for (int i = 0; i < 100000; i++) {
        work += Math.sqrt(i);
      }
      assertTrue(work > 0);
      // Completion in start order: once the last is complete, so is every earlier one.
      if (rb.test()) {
        assertTrue(ra.test() && sum.test() && dropped.test(), "rank " + r + ": completion out of order");
      }
      dropped.close();
      int prev = (r + P - 1) % P;
      expect("rotate a", new double[] {prev}, ra.get().get(0).toDoubleArray());
      expect("rotate b", new double[] {10 * prev}, rb.get().get(1).toDoubleArray());
      expect("allreduce", new double[] {P * (P + 1) / 2}, sum.get().get(2).toDoubleArray());
      // try-with-resources: close waits; the table is back afterwards.
      Table g = newTable(Combiner.SUM);
      g.put(3, new double[] {1});
      try (Pending<Table> gathered = allgatherStart("gathered", g)) {
        expect("allgather", new double[] {P}, gathered.get().get(3).toDoubleArray());
      }
      // Push and pull: partition r is owned by rank r (modulo).
      Table local = newTable(Combiner.SUM);
      for (int id = 0; id < P; id++) {
        local.put(id, new double[] {1});
      }
      Table global = newTable(Combiner.SUM);
      global.put(r, new double[] {100});
      Table pushed = pushStart("push", local, global, null).get();
      expect("push", new double[] {100 + P}, pushed.get(r).toDoubleArray());
      Table pulled = pullStart("pull", local, global, null).get();
      for (int id = 0; id < P; id++) {
        expect("pull " + id, new double[] {100 + P}, pulled.get(id).toDoubleArray());
      }
      Table bc = newTable(Combiner.SUM);
      bc.put(0, new double[] {r == 2 ? 7 : -1});
      expect("broadcast", new double[] {7},
          broadcastStart("bc", bc, Options.defaults().root(2)).get().get(0).toDoubleArray());
      // A blocking call after started ones waits for them.
      Table c = newTable(Combiner.SUM);
      c.put(0, new double[] {r});
      Pending<Table> rc = rotateStart("before blocking", c);
      barrier("blocking");
      assertTrue(rc.test(), "rank " + r + ": a blocking call returned before the started one");
      expect("rotate c", new double[] {prev}, rc.get().get(0).toDoubleArray());
      context.getCounter("harp-test", "verified").increment(verified);
    }
  }

  @Test
  @Timeout(120)
  void startedCollectivesMatchTheBlockingOnes(@TempDir Path tmp) throws Exception {
    Path in = tmp.resolve("in");
    JobTestSupport.writeLines(in, "a.txt", 8);
    Job job = JobTestSupport.job(JobTestSupport.localConf(tmp, P), in, Started.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    // per worker: rotate a, b, allreduce, allgather, push, pull x4, broadcast, rotate c
    assertEquals(P * 11, job.getCounters().findCounter("harp-test", "verified").getValue());
  }
}
