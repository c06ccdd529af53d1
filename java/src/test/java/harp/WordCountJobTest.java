package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.examples.wordcount.WordCount;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.StringTokenizer;
import java.util.TreeMap;
import org.apache.hadoop.util.ToolRunner;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** The WordCount example through LocalJobRunner against a reference count with Hadoop's tokenizer. */
class WordCountJobTest {
  static Map<String, Long> readParts(Path dir, int workers) throws Exception {
    Map<String, Long> got = new TreeMap<>();
    for (int r = 0; r < workers; r++) {
      for (String l : Files.readAllLines(dir.resolve(String.format("part-%05d", r)), StandardCharsets.UTF_8)) {
        int tab = l.lastIndexOf('\t');
        assertNull(got.put(l.substring(0, tab), Long.parseLong(l.substring(tab + 1))), "word on two workers: " + l);
      }
    }
    return got;
  }

  @Test
  @Timeout(120)
  void wordCountEqualsTheReference(@TempDir Path tmp) throws Exception {
    Path in = Files.createDirectories(tmp.resolve("in"));
    StringBuilder a = new StringBuilder();
    Map<String, Long> want = new TreeMap<>();
    java.util.Random rnd = new java.util.Random(5);
    String[] seps = {" ", "\t", "  ", "\r", "\f", " \t "};
    for (int i = 0; i < 30_000; i++) {
      StringBuilder line = new StringBuilder();
      int n = rnd.nextInt(8);
      for (int j = 0; j < n; j++) {
        line.append("w").append((int) Math.abs(rnd.nextGaussian() * 300)).append(j % 3 == 0 ? "é" : "");
        line.append(seps[rnd.nextInt(seps.length)]);
      }
      a.append(line).append('\n');
    }
    String text = a.toString();
    Files.writeString(in.resolve("one.txt"), text.substring(0, text.length() / 3));
    Files.writeString(in.resolve("two.txt"), text.substring(text.length() / 3));
    Files.writeString(in.resolve("empty.txt"), "");
    for (String l : text.split("\n", -1)) {
      StringTokenizer t = new StringTokenizer(l);
      while (t.hasMoreTokens()) {
        want.merge(t.nextToken(), 1L, Long::sum);
      }
    }
    Path out = tmp.resolve("out");
    WordCount tool = new WordCount();
    int rc = ToolRunner.run(JobTestSupport.localConf(tmp, 3), tool,
        new String[] {in.toUri().toString(), out.toUri().toString(), "3"});
    assertEquals(0, rc);
    assertEquals(want, readParts(out, 3));
    assertEquals(0, Files.size(out.resolve("_SUCCESS")));
    assertFalse(Files.exists(out.resolve("_temporary")));
    // The job's counters hold the bytes the workers read and wrote (Hadoop's map task counts
    // neither for a worker): at least the input's and the parts' sizes (the readers read on to
    // the end of a line, and a local file system writes checksums too).
    long inBytes = text.getBytes(java.nio.charset.StandardCharsets.UTF_8).length;
    long partBytes = 0;
    for (int i = 0; i < 3; i++) {
      partBytes += Files.size(out.resolve(String.format("part-%05d", i)));
    }
    org.apache.hadoop.mapreduce.Counters counters = tool.job().getCounters();
    long read = counters.findCounter(org.apache.hadoop.mapreduce.lib.input.FileInputFormatCounter.BYTES_READ).getValue();
    long written = counters.findCounter(org.apache.hadoop.mapreduce.lib.output.FileOutputFormatCounter.BYTES_WRITTEN)
        .getValue();
    assertTrue(read >= inBytes && read < 2 * inBytes, "Bytes Read " + read + " for " + inBytes + " bytes of input");
    assertTrue(written >= partBytes && written < 1.1 * partBytes + 1024, "Bytes Written " + written + " for "
        + partBytes + " bytes of output");
  }

  @Test
  @Timeout(120)
  void aFailedJobLeavesNoResult(@TempDir Path tmp) throws Exception {
    Path out = tmp.resolve("out");
    int rc = ToolRunner.run(JobTestSupport.localConf(tmp, 2), new WordCount(),
        new String[] {tmp.resolve("missing").toUri().toString(), out.toUri().toString(), "2"});
    assertEquals(2, rc);
    assertFalse(Files.exists(out));
    // Every worker fails (0 partitions): the job fails and the output holds no result.
    Path in = Files.createDirectories(tmp.resolve("in"));
    Files.writeString(in.resolve("a.txt"), "a b c\n");
    org.apache.hadoop.conf.Configuration conf = JobTestSupport.localConf(tmp, 2);
    conf.setInt(WordCount.PARTITIONS, 0);
    rc = ToolRunner.run(conf, new WordCount(), new String[] {in.toUri().toString(), out.toUri().toString(), "2"});
    assertNotEquals(0, rc);
    assertFalse(Files.exists(out.resolve("_SUCCESS")));
    assertFalse(Files.exists(out.resolve("part-00000")));
    assertFalse(Files.exists(out.resolve("_temporary")));
  }
}
