package harp.examples.kmeans;

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
 * K-means on the Map-Collective model, as a Hadoop Tool, in either of two forms:
 * <ul>
 *   <li>{@code kmeans [generic -D options] --workers W <the flags of harp kmeans>} (e.g. {@code
 *       --input points --init init.txt --iterations 10 --output out}): the engine's {@code harp
 *       kmeans} job itself, run by W map tasks ({@link EngineJob});
 *   <li>{@code kmeans [generic -D options] <input> <initial-centroids-file> <output-dir> <iterations> <workers>},
 *       the positional form, kept as an alias: each worker reads its Hadoop input splits through
 *       {@link harp.KMeans} in this example's mapper.
 * </ul>
 *
 * <p>In the positional form: points are text, one per line, values separated by spaces or
 * commas; {@code -Dharp.kmeans.skip.columns=3} ignores leading id columns (the papers' HOG
 * files). {@code -Dharp.kmeans.threads=T} sets each worker's compute threads (default: {@code
 * mapreduce.map.cpu.vcores}, 1), {@code -Dharp.kmeans.precision=f32} computes in single precision
 * (the earlier keys {@code kmeans.skip.columns} and {@code kmeans.precision} are read as aliases
 * when the new ones are unset). The keys are those of {@code harp kmeans}'s flags
 * ({@code harp options}). The master writes {@code
 * <output-dir>/centroids.txt} (one centroid per line, exact round-trip precision) and {@code
 * summary.json} (per-iteration inertia and times, as {@code harp kmeans} does), moved into place
 * with a {@code _SUCCESS} marker once complete: a failed job leaves no result.
 *
 * <p>Recovery: {@code -Dharp.checkpoint.every=N} saves a checkpoint every N iterations (under
 * {@code <output-dir>/_checkpoints} unless {@code -Dharp.checkpoint.dir} says otherwise); {@code
 * -Dharp.resume=true} continues from the newest complete one (the output directory may then
 * exist); otherwise an existing output directory is refused unless {@code -Dharp.overwrite=true}
 * ({@link MapCollectiveJobs#checkOutput}). A failed or killed job leaves no {@code _temporary}
 * behind, nor the output directory it created. An input without a single point fails the job, as {@code harp kmeans} does.
 */
public class KMeans extends Configured implements Tool {
  public static final String INIT = "harp.kmeans.init";
  public static final String OUTPUT = "harp.kmeans.output";
  public static final String ITERATIONS = "harp.kmeans.iterations";
  /** Leading text columns to ignore ({@code --skip-columns}); alias {@link #SKIP_ALIAS}. */
  public static final String SKIP = "harp.kmeans.skip.columns";
  /** The earlier spelling of {@link #SKIP}, read when it is unset. */
  public static final String SKIP_ALIAS = "kmeans.skip.columns";
  /** {@code f64} (default) or {@code f32}: precision of the points in memory and of the kernel. */
  public static final String PRECISION = "harp.kmeans.precision";
  /** The earlier spelling of {@link #PRECISION}, read when it is unset. */
  public static final String PRECISION_ALIAS = "kmeans.precision";

  private Job job;

  public static void main(String[] args) throws Exception {
    System.exit(ToolRunner.run(new Configuration(), new KMeans(), args));
  }

  @Override
  public int run(String[] args) throws Exception {
    if (EngineJob.flagForm(args)) {
      job = null;
      EngineJob flags = new EngineJob("kmeans");
      flags.setConf(getConf());
      int rc = flags.run(args);
      job = flags.job();
      return rc;
    }
    if (args.length != 5) {
      System.err.println("usage: kmeans [generic -D options] --workers W --input PATH --output DIR … (the flags of harp kmeans)");
      System.err.println("   or: kmeans [generic -D options] <input> <initial-centroids-file> <output-dir> <iterations> <workers>");
      return 2;
    }
    int iterations;
    int workers;
    try {
      iterations = Integer.parseInt(args[3]);
      workers = Integer.parseInt(args[4]);
    } catch (NumberFormatException e) {
      System.err.println("kmeans: iterations and workers must be whole numbers: " + e.getMessage());
      return 2;
    }
    if (iterations < 1 || workers < 1) {
      System.err.println("kmeans: iterations and workers must be at least 1");
      return 2;
    }
    Configuration conf = getConf();
    Path out = new Path(args[2]);
    FileSystem fs = out.getFileSystem(conf);
    boolean resume = conf.getBoolean(harp.KMeans.RESUME, false);
    if ((resume || conf.getInt(harp.KMeans.CHECKPOINT_EVERY, 0) > 0) && conf.get(harp.KMeans.CHECKPOINT_DIR) == null) {
      conf.set(harp.KMeans.CHECKPOINT_DIR, new Path(out, "_checkpoints").toString());
    }
    Path input = new Path(args[0]);
    String badInput = MapCollectiveJobs.checkInput(conf, input, "kmeans");
    if (badInput != null) {
      System.err.println(badInput);
      return 2;
    }
    if (!hasPoints(input.getFileSystem(conf), input)) {
      System.err.println("kmeans: no points in " + input + " (no input file, or only empty ones)");
      return 2;
    }
    String refused = MapCollectiveJobs.checkOutput(conf, out, "kmeans", resume);
    if (refused != null) {
      System.err.println(refused);
      return 2;
    }
    // The output must be usable before any iteration runs (the result goes there at the end).
    if (!fs.mkdirs(new Path(out, "_temporary"))) {
      System.err.println("kmeans: cannot create output directory " + out);
      return 2;
    }
    conf.set(INIT, args[1]);
    conf.set(OUTPUT, out.toString());
    conf.setInt(ITERATIONS, iterations);
    job = MapCollectiveJobs.create(conf, "harp-kmeans", KMeans.class, workers, new Path(args[0]), KMeansMapper.class);
    return MapCollectiveJobs.runToEnd(job, out);
  }

  /**
   * Whether {@code p} (a file, or a directory's visible files, as FileInputFormat lists them)
   * holds a byte: the engine rejects an input without points, and a job over an empty input
   * would otherwise have nothing to fail on.
   */
  static boolean hasPoints(FileSystem fs, Path p) throws java.io.IOException {
    if (!fs.exists(p)) {
      return true; // FileInputFormat names the missing path
    }
    for (org.apache.hadoop.fs.FileStatus st : fs.listStatus(p)) {
      String n = st.getPath().getName();
      if (st.isFile() && st.getLen() > 0 && !n.startsWith("_") && !n.startsWith(".")) {
        return true;
      }
    }
    return false;
  }

  /** The job of the last {@link #run} (its counters, say), or null. */
  public Job job() {
    return job;
  }
}
