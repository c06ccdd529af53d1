package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.io.FilePosition;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.StringTokenizer;
import java.util.TreeMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The small integer types, dense combiners written in Java and local aggregation across map
 * threads, through LocalJobRunner with 2 concurrent map tasks.
 */
class ParityJobTest {
  static final int WORKERS = 2;
  static final int THREADS = 4;

  public static class ParityMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    private int verified;

    private void check(boolean ok, String what) {
      if (!ok) {
        throw new AssertionError("rank " + getSelfID() + ": " + what);
      }
      verified++;
    }

    /** Word counts of {@code lines} in a str -> i64 table summed on insert. */
    private KeyValueTable count(List<String> lines) {
      KeyValueTable t = newKeyValueTable(KeyType.STR, ValueType.scalar(DType.I64), Combiner.SUM, 8);
      for (String l : lines) {
        StringTokenizer tok = new StringTokenizer(l);
        while (tok.hasMoreTokens()) {
          t.add(tok.nextToken(), 1L);
        }
      }
      t.flush();
      return t;
    }

    private static Map<String, Long> read(KeyValueTable t) {
      Map<String, Long> m = new TreeMap<>();
      KeyValueTable.Cursor c = t.cursor();
      while (c.next()) {
        m.put(c.keyString(), c.longValue());
      }
      return m;
    }

    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
        throws IOException, InterruptedException {
      int r = getSelfID();
      int p = getNumWorkers();
      List<String> lines = new ArrayList<>();
      while (reader.nextKeyValue()) {
        lines.add(reader.getCurrentValue().toString());
      }

      // 1. i16 (sum wraps at 16 bits) and u16 (max compares unsigned) through allreduce.
      try (Table t = newTable(Combiner.SUM); Table m = newTable(Combiner.MAX)) {
        t.put(0, new short[] {(short) (r + 1), (short) -r, Short.MAX_VALUE});
        allreduce("i16", t);
        short[] got = t.get(0).toShortArray();
        check(got[0] == p * (p + 1) / 2 && got[1] == -p * (p - 1) / 2 && got[2] == (short) (p * Short.MAX_VALUE),
            "i16 sums " + java.util.Arrays.toString(got));
        m.create(0, DType.U16, 2).shorts().put(new short[] {(short) (r == 0 ? 0xffff : 1), (short) r});
        allreduce("u16", m);
        short[] mx = m.get(0).toShortArray();
        check(Short.toUnsignedInt(mx[0]) == 0xffff && mx[1] == p - 1, "u16 max " + java.util.Arrays.toString(mx));
      }

      // 2. A dense combiner written in Java through allreduce, reduce and regroup.
      DenseCombiner absMax = DenseCombiner.ofDoubles("abs-max", (a, b) -> Math.abs(a) >= Math.abs(b) ? a : b);
      try (Table t = newTable(absMax)) {
        for (int pid = 0; pid < 3; pid++) {
          double[] v = new double[1000];
          for (int i = 0; i < v.length; i++) {
            v[i] = (r % 2 == 0 ? -1 : 1) * (r * 10 + i % 7 + pid);
          }
          t.put(pid, v);
        }
        allreduce("java-dense", t);
        double want = ((p - 1) % 2 == 0 ? -1 : 1) * ((p - 1) * 10 + 6 + 2);
        check(t.get(2).toDoubleArray()[6] == want, "java dense allreduce " + t.get(2).toDoubleArray()[6]);
        regroup("java-dense-regroup", t, (id, n) -> id % n);
        boolean right = t.size() > 0;
        for (int pid : t.ids()) {
          double w = ((p - 1) % 2 == 0 ? -1 : 1) * ((p - 1) * 10 + 6 + pid);
          right &= pid % p == r && t.get(pid).toDoubleArray()[6] == w;
        }
        check(right, "java dense regroup " + java.util.Arrays.toString(t.ids()));
      }
      // Not element-wise: whole i32 partitions, the arguments as documented.
      DenseCombiner sumInts = new DenseCombiner() {
        @Override
        public void combine(ByteBuffer into, ByteBuffer from, DType type) {
          if (type != DType.I32 || !from.isReadOnly() || into.capacity() != from.capacity()) {
            throw new AssertionError("combine arguments " + type + " " + from);
          }
          for (int i = 0; i < into.capacity(); i += 4) {
            into.putInt(i, into.getInt(i) + from.getInt(i));
          }
        }
      };
      try (Table t = newTable(sumInts)) {
        t.put(0, new int[] {r, 1});
        allreduce("java-dense-ints", t);
        int[] got = t.get(0).toIntArray();
        check(got[0] == p * (p - 1) / 2 && got[1] == p, "java dense i32 sum " + java.util.Arrays.toString(got));
      }
      IllegalStateException thrown = new IllegalStateException("no merging please");
      try (Table a = newTable((into, from, type) -> {
        throw thrown;
      }); Table b = newTable((DenseCombiner) (into, from, type) -> {
        throw thrown;
      })) {
        a.put(0, new double[] {1});
        b.put(0, new double[] {2});
        HarpException e = null;
        try {
          a.merge(b);
        } catch (HarpException x) {
          e = x;
        }
        check(e != null && e.getKind() == HarpException.Kind.DATA && e.getCause() == thrown
            && e.getMessage().contains("no merging please"), "java dense combiner exception as the cause: " + e);
      }

      // 3. Local aggregation: 4 threads each count a quarter of the lines into their own table;
      // the merged table equals one thread's count of all lines, and is smaller than the four.
      List<List<String>> shares = new ArrayList<>();
      for (int i = 0; i < THREADS; i++) {
        shares.add(new ArrayList<>());
      }
      for (int i = 0; i < lines.size(); i++) {
        shares.get(i % THREADS).add(lines.get(i));
      }
      KeyValueTable[] per = new KeyValueTable[THREADS];
      Thread[] threads = new Thread[THREADS];
      Throwable[] failed = new Throwable[1];
      for (int i = 0; i < THREADS; i++) {
        int q = i;
        threads[i] = new Thread(() -> {
          try {
            per[q] = count(shares.get(q));
          } catch (Throwable x) {
            failed[0] = x;
          }
        });
        threads[i].start();
      }
      for (Thread th : threads) {
        th.join();
      }
      check(failed[0] == null, "thread failed: " + failed[0]);
      long unmerged = 0;
      for (KeyValueTable t : per) {
        unmerged += t.table().byteSize();
      }
      try (KeyValueTable single = count(lines); KeyValueTable merged = per[0]) {
        merged.merge(java.util.Arrays.copyOfRange(per, 1, THREADS));
        long bytes = merged.table().byteSize();
        check(read(merged).equals(read(single)), "merged counts equal the single-thread counts");
        check(bytes == single.table().byteSize() && bytes < unmerged, "bytes " + bytes + " of " + unmerged);
        check(per[1].table().size() == 0, "merged tables are left empty");
        System.out.println("local aggregation rank " + r + ": " + lines.size() + " lines, " + THREADS
            + " threads: " + unmerged + " bytes in the per-thread tables, " + bytes + " merged");
        regroup("words", merged, (id, n) -> id % n);
        allreduce("after", single);
      }
      for (int i = 1; i < THREADS; i++) {
        per[i].close();
      }
      // Dense per-thread tables: the sum of 4 threads' partitions equals one table's.
      Table[] dense = new Table[THREADS];
      for (int i = 0; i < THREADS; i++) {
        dense[i] = newTable(Combiner.SUM);
        dense[i].put(i % 2, new long[] {i, 1});
      }
      dense[0].merge(dense[1], dense[2], dense[3]);
      check(dense[0].get(0).toLongArray()[0] == 2 && dense[0].get(1).toLongArray()[0] == 4
          && dense[0].get(1).toLongArray()[1] == 2, "dense merge");
      for (Table t : dense) {
        t.close();
      }
      context.getCounter("harp-test", "verified").increment(verified);
    }
  }

  @Test
  @Timeout(120)
  void smallIntegersJavaCombinersAndLocalAggregation(@TempDir Path tmp) throws Exception {
    Path in = Files.createDirectories(tmp.resolve("in"));
    StringBuilder sb = new StringBuilder();
    long x = 1;
    for (int i = 0; i < 4000; i++) {
      for (int w = 0; w < 8; w++) {
        x = x * 6364136223846793005L + 1442695040888963407L;
        // A skewed vocabulary of 2,000 words: the small ids are frequent, as in text.
        long u = (x >>> 33) % 2000;
        sb.append("w").append(u * u / 2000).append(' ');
      }
      sb.append('\n');
    }
    Files.write(in.resolve("words.txt"), sb.toString().getBytes(StandardCharsets.UTF_8));
    Configuration conf = JobTestSupport.localConf(tmp, WORKERS);
    Job job = JobTestSupport.job(conf, in, ParityMapper.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    assertEquals(WORKERS * 11L, job.getCounters().findCounter("harp-test", "verified").getValue());
  }
}
