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

/** Sub-groups ({@link CollectiveMapper#group}) through LocalJobRunner with 4 concurrent map tasks. */
class GroupsJobTest {
  static final int[] EVEN = {0, 2};
  static final int[] ODD = {3, 1};

  abstract static class Checking extends CollectiveMapper<FilePosition, Text, Object, Object> {
    int verified;

    void expect(String what, Object want, Object got) {
      String w = want instanceof double[] ? Arrays.toString((double[]) want)
          : want instanceof int[] ? Arrays.toString((int[]) want) : String.valueOf(want);
      String g = got instanceof double[] ? Arrays.toString((double[]) got)
          : got instanceof int[] ? Arrays.toString((int[]) got) : String.valueOf(got);
      if (!w.equals(g)) {
        throw new AssertionError("rank " + getSelfID() + ": " + what + ": expected " + w + " got " + g);
      }
      verified++;
    }

    void drain(KeyValReader<FilePosition, Text> reader) throws java.io.IOException, InterruptedException {
      while (reader.nextKeyValue()) {
        // the input only decides the number of workers
      }
    }
  }

  /** Two disjoint groups {0, 2} and {3, 1} run collectives at the same time, then the whole job. */
  public static class TwoGroups extends Checking {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context) throws java.io.IOException,
        InterruptedException {
      drain(reader);
      int r = getSelfID();
      int[] mine = r % 2 == 0 ? EVEN : ODD;
      Group g = group(mine);
      int gr = r == mine[0] ? 0 : 1;
      expect("rank", gr, g.rank());
      expect("size", 2, g.size());
      expect("members", mine, g.members());
      int a = mine[0];
      int b = mine[1];

      Table t = newTable(Combiner.SUM);
      t.put(0, new double[] {r + 1, 10 * r});
      g.allreduce("g-allreduce", t);
      expect("group allreduce", new double[] {a + b + 2, 10 * (a + b)}, t.get(0).toDoubleArray());
      t.close();

      // root: group rank 1, world rank mine[1]
      Table bc = newTable(Combiner.SUM);
      bc.put(7, new double[] {100 + r});
      g.broadcast("g-bcast", bc, Options.defaults().root(1));
      expect("group broadcast ids", new int[] {7}, bc.ids());
      expect("group broadcast", new double[] {100 + b}, bc.get(7).toDoubleArray());
      bc.close();

      Table red = newTable(Combiner.SUM);
      red.put(1, new double[] {r});
      g.reduce("g-reduce", red);
      expect("group reduce", gr == 0 ? new int[] {1} : new int[0], red.ids());
      if (gr == 0) {
        expect("group reduce value", new double[] {a + b}, red.get(1).toDoubleArray());
      }
      red.close();

      Table ag = newTable(Combiner.SUM);
      ag.put(20 + r, new double[] {r});
      g.allgather("g-allgather", ag);
      expect("group allgather", new int[] {20 + Math.min(a, b), 20 + Math.max(a, b)}, ag.ids());
      ag.close();

      // pids 2 and 3 modulo the group's size (2): group ranks 0 and 1 (modulo 4 would name
      // world ranks 2 and 3, outside a group of two)
      Table rs = newTable(Combiner.SUM);
      rs.put(2, new double[] {r});
      rs.put(3, new double[] {2 * r});
      g.reduceScatter("g-reduce-scatter", rs, null);
      expect("group reduce-scatter ids", new int[] {2 + gr}, rs.ids());
      expect("group reduce-scatter", new double[] {(gr + 1) * (a + b)}, rs.get(2 + gr).toDoubleArray());
      rs.close();

      // an explicit partitioner sees the group's size: pid 10 -> group rank 1, pid 11 -> 0
      Table rg = newTable(Combiner.SUM);
      rg.put(10, new double[] {r});
      rg.put(11, new double[] {1});
      g.regroup("g-regroup", rg, (id, n) -> (id + 1) % n);
      expect("group regroup ids", new int[] {gr == 0 ? 11 : 10}, rg.ids());
      expect("group regroup", new double[] {gr == 0 ? 2 : a + b}, rg.get(gr == 0 ? 11 : 10).toDoubleArray());
      rg.close();

      // push: partition 5 of every member goes to group rank 1's global table (holding 1000);
      // pull: both members fetch it back from there
      Table local = newTable(Combiner.SUM);
      local.put(5, new double[] {r});
      Table global = newTable(Combiner.SUM);
      if (gr == 1) {
        global.put(5, new double[] {1000});
      }
      g.push("g-push", local, global, (id, n) -> 1);
      expect("group push ids", gr == 1 ? new int[] {5} : new int[0], global.ids());
      if (gr == 1) {
        expect("group push", new double[] {1000 + a + b}, global.get(5).toDoubleArray());
      }
      g.pull("g-pull", local, global, (id, n) -> 1);
      expect("group pull", new double[] {1000 + a + b}, local.get(5).toDoubleArray());
      local.close();
      global.close();

      // the same list again continues the group's sequence
      group(mine).barrier("g-again");

      Table world = newTable(Combiner.SUM);
      world.put(0, new double[] {r});
      allreduce("world", world);
      expect("world allreduce after the groups", new double[] {6}, world.get(0).toDoubleArray());
      context.getCounter("harp-test", "verified").increment(verified);
    }
  }

  /** Bad member lists fail at once with the engine's message and leave the worker usable. */
  public static class BadGroups extends Checking {
    private void fails(String what, String needle, Runnable r) {
      try {
        r.run();
      } catch (HarpException e) {
        expect(what + " kind", HarpException.Kind.CONFIG, e.getKind());
        if (!e.getMessage().contains(needle)) {
          throw new AssertionError("rank " + getSelfID() + ": " + what + ": message " + e.getMessage()
              + " lacks '" + needle + "'");
        }
        verified++;
        return;
      }
      throw new AssertionError("rank " + getSelfID() + ": " + what + " did not fail");
    }

    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context) throws java.io.IOException,
        InterruptedException {
      drain(reader);
      int r = getSelfID();
      int other = (r + 1) % 4;
      fails("not a member", "rank " + r + " is not a member", () -> group(other));
      fails("duplicate", "rank " + r + " is listed twice", () -> group(r, other, r));
      fails("out of range", "rank 4 is not a worker", () -> group(r, 4));
      fails("empty", "at least one member", () -> group());
      Table world = newTable(Combiner.SUM);
      world.put(0, new double[] {1});
      allreduce("world", world);
      expect("world allreduce after the errors", new double[] {4}, world.get(0).toDoubleArray());
      context.getCounter("harp-test", "verified").increment(verified);
    }
  }

  private static long run(Path tmp, Class<? extends CollectiveMapper<?, ?, ?, ?>> mapper) throws Exception {
    Path in = tmp.resolve("in");
    JobTestSupport.writeLines(in, "a.txt", 8);
    Job job = JobTestSupport.job(JobTestSupport.localConf(tmp, 4), in, mapper);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    return job.getCounters().findCounter("harp-test", "verified").getValue();
  }

  @Test
  @Timeout(120)
  void twoDisjointGroupsThenTheWholeJob(@TempDir Path tmp) throws Exception {
    // per worker: rank, size, members, allreduce, broadcast ids + value, reduce (+ value on
    // group rank 0), allgather, reduce-scatter ids + value, regroup ids + value, push ids (+ value
    // on group rank 1), pull, world allreduce
    assertEquals(4 * 15 + 2 + 2, run(tmp, TwoGroups.class));
  }

  @Test
  @Timeout(120)
  void badMemberListsAreClearErrors(@TempDir Path tmp) throws Exception {
    // per worker: 4 failures (kind + message each) and the world allreduce
    assertEquals(4 * 9, run(tmp, BadGroups.class));
  }
}
