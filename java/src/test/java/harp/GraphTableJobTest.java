package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.io.FilePosition;
import java.io.IOException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.Random;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Edge tables and the graph collectives from Java, 4 concurrent map tasks. */
class GraphTableJobTest {
  static final int EDGES = 3000;
  static final int PARTS = 8;

  /** The whole graph, the same on every worker: sparse ids, self-loops and repeats included. */
  static long[][] graph() {
    Random r = new Random(17);
    long[][] e = new long[EDGES][];
    for (int i = 0; i < EDGES; i++) {
      e[i] = new long[] {r.nextInt(400) * 1_000_003L, r.nextInt(400) * 1_000_003L};
    }
    return e;
  }

  public static class GraphMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    private int verified;

    private void check(boolean ok, String what) {
      if (!ok) {
        throw new AssertionError("rank " + getSelfID() + ": " + what);
      }
      verified++;
    }

    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
        throws IOException, InterruptedException {
      if (context.getConfiguration().getBoolean("graph.test.groups", false)) {
        // Two disjoint groups of two, {0, 2} and {1, 3}, each running the whole check at once.
        Group g = group(getSelfID() % 2 == 0 ? new int[] {0, 2} : new int[] {1, 3});
        checkGraph(g);
        // Allgather with the total known, in the group: every member ends with both partitions.
        try (Table t = newTable(Combiner.SUM)) {
          t.put(g.rank(), new long[] {getSelfID()});
          g.allgather("known", t, Options.defaults().totalPartitions(g.size()));
          check(t.ids().length == 2 && t.get(0).toLongArray()[0] == g.members()[0]
              && t.get(1).toLongArray()[0] == g.members()[1], "group allgather with a known total");
        }
      } else {
        checkGraph(this);
      }
      context.getCounter("harp-test", "verified").increment(verified);
    }

    private void checkGraph(Collectives sc) {
      int r = sc.rank();
      int p = sc.size();
      long[][] all = graph();
      Map<Long, Double> inDegree = new HashMap<>();
      for (long[] e : all) {
        inDegree.merge(e[1], 1.0, Double::sum);
      }
      try (EdgeTable edges = newEdgeTable(true);
          KeyValueTable messages = newKeyValueTable(KeyType.I64, ValueType.scalar(DType.F64), Combiner.SUM, PARTS)) {
        for (int i = r; i < EDGES; i += p) {
          edges.add(all[i][0], all[i][1], i);
        }
        sc.regroupEdges("by-src", edges, true, PARTS);
        // Every edge is now with the worker of its source's partition; count them all.
        Table n = newTable(Combiner.SUM);
        n.put(0, new long[] {edges.count()});
        sc.allreduce("count", n);
        check(n.get(0).toLongArray()[0] == EDGES, "edges after regroup: " + n.get(0).toLongArray()[0]);
        boolean mine = true;
        EdgeTable.Cursor c = edges.cursor();
        while (c.next()) {
          mine &= c.partition() % p == r && all[(int) c.weight()][0] == c.src() && all[(int) c.weight()][1] == c.dst();
          messages.add(c.dst(), 1.0); // one message per edge, combined locally by destination
        }
        check(mine, "an edge on the wrong worker or changed");
        sc.sendMessages("in-degree", messages);
        KeyValueTable.Cursor m = messages.cursor();
        boolean right = true;
        int vertices = 0;
        while (m.next()) {
          right &= m.partition() % p == r && m.doubleValue() == inDegree.get(m.keyLong());
          vertices++;
        }
        check(right, "in-degree messages");
        Table v = newTable(Combiner.SUM);
        v.put(0, new long[] {vertices});
        sc.allreduce("vertices", v);
        check(v.get(0).toLongArray()[0] == inDegree.size(), "vertices with messages");
        // Edges to the workers holding their destination's partition in `messages`.
        sc.sendEdgesToVertices("to-dst", edges, false, messages, PARTS);
        boolean held = true;
        java.util.Set<Integer> parts = new java.util.HashSet<>();
        for (int id : messages.table().ids()) {
          parts.add(id);
        }
        EdgeTable.Cursor d = edges.cursor();
        while (d.next()) {
          held &= parts.contains(d.partition());
        }
        check(held, "an edge whose destination partition is elsewhere");
        check(JobTestSupport.throwsIae(() -> edges.add(1, 2)), "an unweighted edge accepted by a weighted table");
      }
    }
  }

  @Test
  @Timeout(120)
  void graphCollectivesWorkFromJava(@TempDir Path tmp) throws Exception {
    Job job = JobTestSupport.job(JobTestSupport.localConf(tmp, 4), JobTestSupport.writeLines(tmp.resolve("in"), "a", 8)
        .getParent(), GraphMapper.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    assertEquals(4 * 6L, job.getCounters().findCounter("harp-test", "verified").getValue());
  }

  /** The same graph collectives in two disjoint groups of two workers, running at the same time. */
  @Test
  @Timeout(120)
  void graphCollectivesWorkInGroups(@TempDir Path tmp) throws Exception {
    org.apache.hadoop.conf.Configuration conf = JobTestSupport.localConf(tmp, 4);
    conf.setBoolean("graph.test.groups", true);
    Job job = JobTestSupport.job(conf, JobTestSupport.writeLines(tmp.resolve("in"), "a", 8).getParent(),
        GraphMapper.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    assertEquals(4 * 7L, job.getCounters().findCounter("harp-test", "verified").getValue());
  }
}
