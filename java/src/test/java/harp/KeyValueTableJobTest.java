package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.io.FilePosition;
import java.io.IOException;
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

/** Key-value tables from Java through LocalJobRunner with 4 concurrent map tasks. */
class KeyValueTableJobTest {
  static final int WORKERS = 4;

  public static class KvMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
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
      int r = getSelfID();
      int p = getNumWorkers();
      Path out = Path.of(context.getConfiguration().get("test.out"));

      // 1. Word count: str → i64 sums, regrouped so each worker owns its keys' partitions.
      try (KeyValueTable words = newKeyValueTable(KeyType.STR, ValueType.scalar(DType.I64), Combiner.SUM, 4 * p)) {
        while (reader.nextKeyValue()) {
          StringTokenizer t = new StringTokenizer(reader.getCurrentValue().toString());
          while (t.hasMoreTokens()) {
            words.add(t.nextToken(), 1L);
          }
        }
        regroup("words", words, null);
        StringBuilder sb = new StringBuilder();
        KeyValueTable.Cursor c = words.cursor();
        boolean owned = true;
        while (c.next()) {
          owned &= c.partition() % p == r;
          sb.append(c.keyString()).append('\t').append(c.longValue()).append('\n');
        }
        check(owned, "holds a partition it does not own");
        Files.write(out.resolve("words-" + r), sb.toString().getBytes(StandardCharsets.UTF_8));
      }

      // 2. A combiner written in Java (max of f64 values), through allreduce.
      try (KeyValueTable max = newKeyValueTable(KeyType.I64, ValueType.scalar(DType.F64),
          KvCombiner.ofDoubles("max", Math::max), 7)) {
        for (long k = 0; k < 50; k++) {
          max.add(k, (double) ((r * 31 + k * 17) % 101));
          max.add(k, -1.0); // combined locally by the Java combiner before anything is sent
        }
        allreduce("max", max);
        KeyValueTable.Cursor c = max.cursor();
        int n = 0;
        boolean right = true;
        while (c.next()) {
          long k = c.keyLong();
          double want = -1;
          for (int q = 0; q < p; q++) {
            want = Math.max(want, (q * 31 + k * 17) % 101);
          }
          right &= c.doubleValue() == want;
          n++;
        }
        check(n == 50 && right, "java max combiner: " + n + " keys, right=" + right);
      }

      // 3. APPEND of f64 arrays through allgather: every worker sees every worker's values.
      try (KeyValueTable lists = newKeyValueTable(KeyType.I32, ValueType.array(DType.F64), Combiner.APPEND, 3)) {
        lists.add(5L, new double[] {r});
        lists.add((long) (100 + r), new double[] {r, r + 0.5});
        allgather("lists", lists);
        KeyValueTable.Cursor c = lists.cursor();
        Map<Long, double[]> seen = new TreeMap<>();
        while (c.next()) {
          seen.put(c.keyLong(), c.doubles());
        }
        double[] five = seen.get(5L);
        java.util.Arrays.sort(five);
        double[] want = new double[p];
        for (int q = 0; q < p; q++) {
          want[q] = q;
        }
        check(seen.size() == p + 1 && java.util.Arrays.equals(want, five)
            && java.util.Arrays.equals(new double[] {2, 2.5}, seen.get(102L)), "append/allgather: " + seen.keySet());
      }

      // 4. Bad input is refused in Java before anything is written; a throwing Java combiner
      // fails the flush with its message and its exception as the cause (the same object), and
      // the table stays usable.
      try (KeyValueTable t = newKeyValueTable(KeyType.I32, ValueType.scalar(DType.I32), Combiner.SUM, 2)) {
        check(JobTestSupport.throwsIae(() -> t.add(1L << 40, 1L)), "i32 key out of range accepted");
        check(JobTestSupport.throwsIae(() -> t.add(1L, 1L << 40)), "i32 value out of range accepted");
        check(JobTestSupport.throwsIae(() -> t.add("x", 1L)), "str key accepted by an i32 table");
        check(JobTestSupport.throwsIae(() -> t.add(1L, 1.5)), "f64 value accepted by an i32 table");
        t.add(1L, 2L);
        t.add(1L, 3L);
        KeyValueTable.Cursor c = t.cursor();
        check(c.next() && c.keyLong() == 1 && c.longValue() == 5 && !c.next(), "i32 sums");
      }
      IllegalStateException thrown = new IllegalStateException("no duplicates please");
      try (KeyValueTable t = newKeyValueTable(KeyType.I64, ValueType.scalar(DType.I64), new KvCombiner() {
        @Override
        public byte[] combine(byte[] key, byte[] acc, byte[] other) {
          throw thrown;
        }
      }, 1)) {
        t.add(7L, 1L);
        t.add(7L, 2L);
        HarpException e = null;
        try {
          t.flush();
        } catch (HarpException x) {
          e = x;
        }
        check(e != null && e.getMessage().contains("no duplicates please") && e.getMessage().contains("key 7"),
            "java combiner exception: " + e);
        check(e.getKind() == HarpException.Kind.DATA && e.getCause() == thrown,
            "java combiner exception as the cause: " + e + ", cause " + e.getCause());
        t.add(8L, 1L);
        check(t.count() == 1, "table usable after a failed batch");
      }
      context.getCounter("harp-test", "verified").increment(verified);
    }
  }

  @Test
  @Timeout(120)
  void keyValueTablesWorkFromJavaWithFourMapTasks(@TempDir Path tmp) throws Exception {
    Path in = Files.createDirectories(tmp.resolve("in"));
    List<String> lines = new ArrayList<>();
    for (int i = 0; i < 2000; i++) {
      lines.add("w" + (i % 13) + " \tx" + (i % 7) + "  é" + (i % 3) + (i % 100 == 0 ? "\f" + i : ""));
    }
    Files.write(in.resolve("a.txt"), lines.subList(0, 1500), StandardCharsets.UTF_8);
    Files.write(in.resolve("b.txt"), lines.subList(1500, 2000), StandardCharsets.UTF_8);
    Map<String, Long> want = new TreeMap<>();
    for (String l : lines) {
      StringTokenizer t = new StringTokenizer(l);
      while (t.hasMoreTokens()) {
        want.merge(t.nextToken(), 1L, Long::sum);
      }
    }
    Path out = Files.createDirectories(tmp.resolve("out"));
    Configuration conf = JobTestSupport.localConf(tmp, WORKERS);
    conf.set("test.out", out.toString());
    Job job = JobTestSupport.job(conf, in, KvMapper.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    Map<String, Long> got = new TreeMap<>();
    for (int r = 0; r < WORKERS; r++) {
      for (String l : Files.readAllLines(out.resolve("words-" + r), StandardCharsets.UTF_8)) {
        String[] f = l.split("\t");
        assertEquals(null, got.put(f[0], Long.parseLong(f[1])), "key " + f[0] + " on two workers");
      }
    }
    assertEquals(want, got);
    assertEquals(WORKERS * 11L, job.getCounters().findCounter("harp-test", "verified").getValue());
  }
}
