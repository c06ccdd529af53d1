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
        .skipColumns(conf.getInt(KMeans.SKIP, 0))
        .precision(harp.KMeans.Precision.valueOf(conf.get(KMeans.PRECISION, "f64").toUpperCase(java.util.Locale.ROOT)))
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
      Path dir = new Path(conf.get(KMeans.OUTPUT));
      FileSystem fs = dir.getFileSystem(conf);
      write(fs, new Path(dir, "centroids.txt"), r.centroidsText());
      write(fs, new Path(dir, "summary.json"), r.summaryJson(getNumWorkers()));
    }
  }

  private static void write(FileSystem fs, Path p, String text) throws IOException {
    try (OutputStream os = fs.create(p, false)) {
      os.write(text.getBytes(StandardCharsets.UTF_8));
    }
  }
}
