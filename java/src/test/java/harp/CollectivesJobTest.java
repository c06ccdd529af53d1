package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.io.FilePosition;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Arrays;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Every collective through Hadoop's LocalJobRunner with 4 concurrent map tasks. */
class CollectivesJobTest {
  static final int LINES = 100;

  /** Runs every collective and checks each result against what it must be. */
  public static class CheckMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    private int verified;

    private void expect(String what, double[] want, double[] got) {
      if (!Arrays.equals(want, got)) {
        throw new AssertionError("rank " + getSelfID() + ": " + what + ": expected " + Arrays.toString(want)
            + " got " + Arrays.toString(got));
      }
      verified++;
    }

    private void expectIds(String what, int[] want, Table t) {
      if (!Arrays.equals(want, t.ids())) {
        throw new AssertionError("rank " + getSelfID() + ": " + what + ": ids " + Arrays.toString(t.ids())
            + ", expected " + Arrays.toString(want));
      }
      verified++;
    }

    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
        throws IOException, InterruptedException {
      int r = getSelfID();
      int p = getNumWorkers();
      long lines = 0;
      while (reader.nextKeyValue()) {
        lines++;
      }
      Table count = newTable(Combiner.SUM);
      count.put(0, new long[] {lines});
      allreduce("lines", count);
      if (count.get(0).toLongArray()[0] != LINES) {
        throw new AssertionError("workers read " + count.get(0).toLongArray()[0] + " lines, expected " + LINES);
      }
      verified++;
      barrier("start");

      // allreduce, small (bidirectional exchange) and large (regroup-allgather) partitions
      for (Algorithm.Allreduce a : Algorithm.Allreduce.values()) {
        Table t = newTable(Combiner.SUM);
        int[] lens = {1000, 1000, 1000, 20000};
        for (int pid = 0; pid < lens.length; pid++) {
          double[] v = new double[lens[pid]];
          for (int i = 0; i < v.length; i++) {
            v[i] = r * 1000 + i + pid;
          }
          t.put(pid, v);
        }
        allreduce("allreduce-" + a, t, Options.defaults().algorithm(a));
        for (int pid = 0; pid < lens.length; pid++) {
          double[] want = new double[lens[pid]];
          for (int i = 0; i < want.length; i++) {
            want[i] = 1000.0 * p * (p - 1) / 2 + p * (i + pid);
          }
          expect("allreduce " + a + " partition " + pid, want, t.get(pid).toDoubleArray());
        }
        t.close();
      }

      for (Algorithm.Broadcast a : Algorithm.Broadcast.values()) {
        Table t = newTable(Combiner.SUM);
        if (r == 1) {
          double[] v = new double[300_000];
          for (int i = 0; i < v.length; i++) {
            v[i] = i;
          }
          t.put(5, v);
        } else {
          t.put(9, new double[] {-1});
        }
        broadcast("bcast-" + a, t, Options.defaults().root(1).algorithm(a));
        expectIds("broadcast " + a, new int[] {5}, t);
        double[] v = t.get(5).toDoubleArray();
        if (v.length != 300_000 || v[299_999] != 299_999) {
          throw new AssertionError("broadcast " + a + " payload wrong");
        }
        t.close();
      }

      Table ag = newTable(Combiner.SUM);
      ag.put(10 + r, new double[] {r});
      allgather("allgather", ag);
      expectIds("allgather", new int[] {10, 11, 12, 13}, ag);
      expect("allgather value", new double[] {2}, ag.get(12).toDoubleArray());
      Table agk = newTable(Combiner.SUM);
      agk.put(10 + r, new double[] {r});
      allgather("allgather-known", agk, Options.defaults().totalPartitions(p));
      expectIds("allgather known total", new int[] {10, 11, 12, 13}, agk);

      for (Algorithm.Reduce a : Algorithm.Reduce.values()) {
        Table red = newTable(Combiner.SUM);
        red.put(0, new double[] {r + 1});
        reduce("reduce-" + a, red, Options.defaults().root(2).algorithm(a));
        if (r == 2) {
          expect("reduce " + a, new double[] {10}, red.get(0).toDoubleArray());
        } else {
          expectIds("reduce " + a + " leaves others empty", new int[0], red);
        }
      }

      Table ga = newTable(Combiner.SUM);
      ga.put(r, new double[] {r});
      gather("gather", ga);
      expectIds("gather", r == 0 ? new int[] {0, 1, 2, 3} : new int[] {r}, ga);

      Table sc = newTable(Combiner.SUM);
      if (r == 3) {
        for (int id = 0; id < 8; id++) {
          sc.put(id, new double[] {id});
        }
      }
      scatter("scatter", sc, null, Options.defaults().root(3));
      expectIds("scatter", new int[] {r, r + 4}, sc);
      expect("scatter value", new double[] {r + 4}, sc.get(r + 4).toDoubleArray());

      Table rs = newTable(Combiner.SUM);
      for (int id = 0; id < 8; id++) {
        rs.put(id, new double[] {id + r});
      }
      reduceScatter("reduce-scatter", rs, null);
      expectIds("reduce-scatter", new int[] {r, r + 4}, rs);
      expect("reduce-scatter value", new double[] {4 * r + 6}, rs.get(r).toDoubleArray());

      Table rg = newTable(Combiner.SUM);
      for (int id = 0; id < 8; id++) {
        rg.put(id, new double[] {1});
      }
      Partitioner next = (id, workers) -> (id + 1) % workers;
      regroup("regroup", rg, next);
      int a0 = (r + p - 1) % p;
      expectIds("regroup custom partitioner", new int[] {Math.min(a0, a0 + 4), Math.max(a0, a0 + 4)}, rg);
      expect("regroup value", new double[] {4}, rg.get(a0).toDoubleArray());

      Table plan = newTable(Combiner.SUM);
      for (int id = 0; id < 8; id++) {
        plan.put(id, new double[] {1});
      }
      regroupPlanned("regroup-planned", plan);
      Table held = newTable(Combiner.SUM);
      held.put(0, new long[] {plan.size()});
      for (int id : plan.ids()) {
        expect("planned value", new double[] {4}, plan.get(id).toDoubleArray());
      }
      allreduce("planned-count", held);
      if (held.get(0).toLongArray()[0] != 8) {
        throw new AssertionError("planned regroup kept " + held.get(0).toLongArray()[0] + " partitions, expected 8");
      }

      Table global = newTable(Combiner.SUM);
      for (int id = r; id < 8; id += p) {
        global.put(id, new double[] {100 * id});
      }
      Table local = newTable(Combiner.SUM);
      local.put(r, new double[] {1});
      local.put(r + 1, new double[] {1});
      push("push", local, global, null);
      for (int id = r; id < 8; id += p) {
        int holders = (id < p ? 1 : 0) + (id >= 1 && id <= p ? 1 : 0);
        expect("push id " + id, new double[] {100 * id + holders}, global.get(id).toDoubleArray());
      }
      Table want = newTable(Combiner.SUM);
      int wid = (r + 2) % 8;
      want.put(wid, new double[] {0});
      pull("pull", want, global, null);
      int holders = (wid < p ? 1 : 0) + (wid >= 1 && wid <= p ? 1 : 0);
      expect("pull", new double[] {100 * wid + holders}, want.get(wid).toDoubleArray());

      Table rot = newTable(Combiner.SUM);
      rot.put(0, new double[] {r});
      rotate("rotate", rot, null);
      expect("rotate", new double[] {(r + p - 1) % p}, rot.get(0).toDoubleArray());
      rotate("rotate-map", rot, new int[] {3, 0, 1, 2});
      expect("rotate map", new double[] {r}, rot.get(0).toDoubleArray());

      // Closed tables are forgotten: the mapper's list stays bounded over create/close cycles.
      int open = openTables();
      for (int i = 0; i < 200; i++) {
        newTable(Combiner.SUM).close();
      }
      if (openTables() != open) {
        throw new AssertionError("open tables went from " + open + " to " + openTables());
      }
      verified++;

      barrier("end");
      context.getCounter("harp-test", "verified").increment(verified);
    }
  }

  /** Rank 1 fails in user code; every worker must fail, none may hang. */
  public static class FailingMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context) {
      barrier("before");
      if (getSelfID() == 1) {
        throw new IllegalStateException("boom on purpose");
      }
      Table t = newTable(Combiner.SUM);
      t.put(0, new double[] {1});
      try {
        allreduce("after", t);
      } catch (HarpException e) {
        // Failed tasks' counters are not kept by the local runner: leave the message in a file.
        try {
          java.nio.file.Files.writeString(Path.of(context.getConfiguration().get("test.out"), "rank-" + getSelfID()),
              e.getKind() + "|" + e.getRank() + "|" + e.getOperation() + "|" + e.getMessage());
        } catch (IOException io) {
          throw new IllegalStateException(io);
        }
        throw e;
      }
    }
  }

  static Job job(Configuration conf, Path tmp, Class<? extends CollectiveMapper<?, ?, ?, ?>> mapper) throws IOException {
    Path in = tmp.resolve("in");
    JobTestSupport.writeLines(in, "a.txt", LINES / 2);
    JobTestSupport.writeLines(in, "b.txt", LINES / 2);
    return JobTestSupport.job(conf, in, mapper);
  }

  @Test
  @Timeout(120)
  void everyCollectiveWorksWithFourConcurrentMapTasks(@TempDir Path tmp) throws Exception {
    Job job = job(JobTestSupport.localConf(tmp, 4), tmp, CheckMapper.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    long verified = job.getCounters().findCounter("harp-test", "verified").getValue();
    // 1 (lines) + 3 algorithms x 4 partitions + 4 broadcasts + 3 (allgathers) + 3 reduces
    // + 1 gather + 2 scatter + 2 reduce-scatter + 2 regroup + 8 planned values held in total
    // (counted below) + push + pull + 2 rotates + 1 bounded table list, per worker.
    long perWorker = 1 + 12 + Algorithm.Broadcast.values().length + 3
        + Algorithm.Reduce.values().length + 1 + 2 + 2 + 2 + 2 + 1 + 2 + 1;
    assertEquals(4 * perWorker + 8, verified);
  }

  @Test
  @Timeout(120)
  void aWorkerFailingInUserCodeFailsTheJobWithoutHanging(@TempDir Path tmp) throws Exception {
    Configuration conf = JobTestSupport.localConf(tmp, 3);
    Path out = java.nio.file.Files.createDirectories(tmp.resolve("out"));
    conf.set("test.out", out.toString());
    Job job = job(conf, tmp, FailingMapper.class);
    assertFalse(job.waitForCompletion(false));
    for (int rank : new int[] {0, 2}) {
      String msg = java.nio.file.Files.readString(out.resolve("rank-" + rank));
      assertTrue(msg.startsWith("PEER_LOST|" + rank + "|allreduce|"), msg);
      assertTrue(msg.contains("rank 1") && msg.contains("boom on purpose"), msg);
    }
  }

  @Test
  @Timeout(60)
  void aJobNeedingMoreConcurrentMapsThanAllowedFailsAtOnce(@TempDir Path tmp) throws Exception {
    Configuration conf = JobTestSupport.localConf(tmp, 5);
    conf.setInt("mapreduce.local.map.tasks.maximum", 2);
    Job job = job(conf, tmp, CheckMapper.class);
    IOException e = assertThrows(IOException.class, () -> job.waitForCompletion(false));
    assertTrue(e.getMessage().contains("has 5 map tasks, which must all run at once") && e.getMessage().contains("allows 2"),
        e.getMessage());
  }
}
