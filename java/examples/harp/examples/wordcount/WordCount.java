package harp.examples.wordcount;

import harp.examples.MapCollectiveJobs;
import harp.examples.engine.EngineJob;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.conf.Configured;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.util.Tool;
import org.apache.hadoop.util.ToolRunner;

/**
 * Word count on the Map-Collective model, as a Hadoop Tool, in either of two forms:
 * <ul>
 *   <li>{@code wordcount [generic -D options] --workers W <the flags of harp wordcount>} (e.g.
 *       {@code --input text --output counts}): the engine's {@code harp wordcount} job itself,
 *       run by W map tasks ({@link EngineJob});
 *   <li>{@code wordcount [generic -D options] <input> <output-dir> <workers>}, the positional
 *       form, kept as an alias: this example's mapper counts with a Java {@link
 *       harp.KeyValueTable}.
 * </ul>
 *
 * <p>In the positional form, tokens are split exactly as Hadoop's own WordCount example splits them ({@link
 * java.util.StringTokenizer} over each line: space, tab, newline, carriage return, form feed).
 * Each worker counts its splits into a key-value table (str → i64, sum), the engine combines
 * equal words before anything is sent, one regroup gives each worker the words of its
 * partitions, and each worker writes {@code part-NNNNN} ({@code word<TAB>count} lines, any
 * order). The parts are moved into {@code <output-dir>} with a {@code _SUCCESS} marker once
 * every worker has written its own: a failed job leaves no result. {@code
 * -Dharp.wordcount.partitions=N} (the key of {@code --partitions}; the earlier {@code
 * wordcount.partitions} is read as an alias when it is unset) sets the number of key partitions
 * (default 8 per worker, as {@code harp wordcount}'s).
 */
public class WordCount extends Configured implements Tool {
  public static final String OUTPUT = "harp.wordcount.output";
  public static final String PARTITIONS = "harp.wordcount.partitions";
  /** The earlier spelling of {@link #PARTITIONS}, read when it is unset. */
  public static final String PARTITIONS_ALIAS = "wordcount.partitions";

  private Job job;

  public static void main(String[] args) throws Exception {
    System.exit(ToolRunner.run(new Configuration(), new WordCount(), args));
  }

  @Override
  public int run(String[] args) throws Exception {
    if (EngineJob.flagForm(args)) {
      EngineJob flags = new EngineJob("wordcount");
      flags.setConf(getConf());
      int rc = flags.run(args);
      job = flags.job();
      return rc;
    }
    if (args.length != 3) {
      System.err.println("usage: wordcount [generic -D options] --workers W --input PATH --output DIR … (the flags of harp wordcount)");
      System.err.println("   or: wordcount [generic -D options] <input> <output-dir> <workers>");
      return 2;
    }
    int workers;
    try {
      workers = Integer.parseInt(args[2]);
    } catch (NumberFormatException e) {
      System.err.println("wordcount: workers must be a whole number: " + e.getMessage());
      return 2;
    }
    if (workers < 1) {
      System.err.println("wordcount: workers must be at least 1");
      return 2;
    }
    Configuration conf = getConf();
    Path input = new Path(args[0]);
    if (!input.getFileSystem(conf).exists(input)) {
      System.err.println("wordcount: input path does not exist: " + input);
      return 2;
    }
    Path out = new Path(args[1]);
    FileSystem fs = out.getFileSystem(conf);
    String refused = MapCollectiveJobs.checkInput(conf, input, "wordcount");
    if (refused == null) {
      refused = MapCollectiveJobs.checkOutput(conf, out, "wordcount", false);
    }
    if (refused != null) {
      System.err.println(refused);
      return 2;
    }
    if (!fs.mkdirs(new Path(out, "_temporary"))) {
      System.err.println("wordcount: cannot create output directory " + out);
      return 2;
    }
    conf.set(OUTPUT, fs.makeQualified(out).toString());
    job = MapCollectiveJobs.create(conf, "harp-wordcount", WordCount.class, workers, input, WordCountMapper.class);
    return MapCollectiveJobs.runToEnd(job, out);
  }

  /** The job of the last {@link #run}, or null. */
  public Job job() {
    return job;
  }
}
