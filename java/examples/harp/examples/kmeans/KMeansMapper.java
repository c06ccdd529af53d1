package harp.examples.kmeans;

import harp.CollectiveMapper;
import harp.KeyValReader;
import harp.io.FilePosition;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Counter;

/**
 * Lloyd's algorithm with the engine's K-means ({@link harp.KMeans}): every worker reads its input
 * splits into native memory and assigns its points with the multithreaded kernel, one allreduce
 * per iteration combines the sums, and every worker computes the same new centroids. The master
 * writes them ({@code centroids.txt}) and the run's figures ({@code summary.json}).
 */
public class KMeansMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {

  @Override
  protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
      throws IOException, InterruptedException {
    Configuration conf = context.getConfiguration();
    int iterations = conf.getInt(KMeans.ITERATIONS, 10);
    // Counters are summed over the workers: only the master counts iterations.
    Counter done = context.getCounter("harp-kmeans", "iterations");
    harp.KMeans.Result r = harp.KMeans.forTask(this, context)
        .init(conf.get(KMeans.INIT))
        .iterations(iterations)
        .skipColumns(conf.getInt(KMeans.SKIP, conf.getInt(KMeans.SKIP_ALIAS, 0)))
        .precision(harp.KMeans.Precision.valueOf(
            conf.get(KMeans.PRECISION, conf.get(KMeans.PRECISION_ALIAS, "f64")).toUpperCase(java.util.Locale.ROOT)))
        .onIteration(it -> {
          // The job's progress on YARN: the master averages every worker's "i of n".
          setProgress(context, it.iteration, iterations);
          context.setStatus("iteration " + it.iteration + " of " + iterations + ", inertia " + it.inertia);
          if (isMaster()) {
            done.increment(1);
          }
        })
        .run();
    if (isMaster()) {
      commit(conf, new Path(conf.get(KMeans.OUTPUT)), context.getJobID().toString(), r.centroidsText(),
          r.summaryJson(getNumWorkers()));
    }
  }

  /**
   * Writes the result under {@code dir/_temporary/JOB}, then moves it into {@code dir} and
   * writes {@code _SUCCESS}: a reader that finds {@code _SUCCESS} sees a complete result.
   */
  static void commit(Configuration conf, Path dir, String job, String centroids, String summary) throws IOException {
    FileSystem fs = dir.getFileSystem(conf);
    Path tmp = new Path(new Path(dir, "_temporary"), job);
    fs.delete(tmp, true); // what an earlier attempt of this job left
    write(fs, new Path(tmp, "centroids.txt"), centroids);
    write(fs, new Path(tmp, "summary.json"), summary);
    fs.delete(new Path(dir, "_SUCCESS"), false);
    for (String f : new String[] {"centroids.txt", "summary.json"}) {
      fs.delete(new Path(dir, f), false);
      if (!fs.rename(new Path(tmp, f), new Path(dir, f))) {
        throw new IOException("cannot move " + new Path(tmp, f) + " to " + new Path(dir, f));
      }
    }
    write(fs, new Path(dir, "_SUCCESS"), "");
    fs.delete(new Path(dir, "_temporary"), true);
  }

  private static void write(FileSystem fs, Path p, String text) throws IOException {
    try (OutputStream os = fs.create(p, false)) {
      os.write(text.getBytes(StandardCharsets.UTF_8));
    }
  }
}
