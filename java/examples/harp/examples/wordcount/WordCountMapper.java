package harp.examples.wordcount;

import harp.CollectiveMapper;
import harp.Combiner;
import harp.DType;
import harp.KeyType;
import harp.KeyValReader;
import harp.KeyValueTable;
import harp.ValueType;
import harp.io.FilePosition;
import java.io.IOException;
import java.io.OutputStream;
import java.util.StringTokenizer;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;

/** Counts words into a key-value table, regroups it, writes this worker's words (see {@link WordCount}). */
public class WordCountMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {

  @Override
  protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
      throws IOException, InterruptedException {
    Configuration conf = context.getConfiguration();
    int partitions = conf.getInt(WordCount.PARTITIONS, conf.getInt(WordCount.PARTITIONS_ALIAS, 8 * getNumWorkers()));
    Path dir = new Path(conf.get(WordCount.OUTPUT));
    FileSystem fs = dir.getFileSystem(conf);
    Path tmp = new Path(new Path(dir, "_temporary"), context.getJobID().toString());
    String part = String.format("part-%05d", getSelfID());
    try (KeyValueTable counts = newKeyValueTable(KeyType.STR, ValueType.scalar(DType.I64), Combiner.SUM, partitions)) {
      long tokens = 0;
      while (reader.nextKeyValue()) {
        StringTokenizer t = new StringTokenizer(reader.getCurrentValue().toString());
        while (t.hasMoreTokens()) {
          counts.add(t.nextToken(), 1L);
          tokens++;
        }
      }
      context.getCounter("harp-wordcount", "tokens").increment(tokens);
      regroup("words", counts, null);
      long words = 0;
      try (OutputStream os = fs.create(new Path(tmp, part), true)) {
        Text line = new Text();
        KeyValueTable.Cursor c = counts.cursor();
        byte[] tab = {'\t'};
        while (c.next()) {
          line.set(c.keyBytes());
          line.append(tab, 0, 1);
          byte[] n = Long.toString(c.longValue()).getBytes(java.nio.charset.StandardCharsets.US_ASCII);
          line.append(n, 0, n.length);
          os.write(line.getBytes(), 0, line.getLength());
          os.write('\n');
          words++;
        }
      }
      context.getCounter("harp-wordcount", "words").increment(words);
    }
    // Every part is written before the master moves them: a failure before this point leaves
    // the output directory without a result.
    barrier("wordcount-written");
    if (isMaster()) {
      for (int r = 0; r < getNumWorkers(); r++) {
        String name = String.format("part-%05d", r);
        if (!fs.rename(new Path(tmp, name), new Path(dir, name))) {
          throw new IOException("cannot move " + new Path(tmp, name) + " to " + dir);
        }
      }
      fs.create(new Path(dir, "_SUCCESS"), true).close();
      fs.delete(new Path(dir, "_temporary"), true);
    }
  }
}
