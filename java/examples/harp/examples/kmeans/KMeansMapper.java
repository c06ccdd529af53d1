package harp.examples.kmeans;

import harp.CollectiveMapper;
import harp.Combiner;
import harp.HarpException;
import harp.KeyValReader;
import harp.Partition;
import harp.Table;
import harp.io.FilePosition;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.DoubleBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;

/**
 * Lloyd's algorithm: the master broadcasts the initial centroids; each iteration every worker
 * assigns its points to the nearest centroid and accumulates per-centroid sums and counts (and
 * the inertia) straight into a native table, one allreduce combines them, and every worker
 * computes the same new centroids. A centroid without points keeps its value.
 */
public class KMeansMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {

  @Override
  protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context)
      throws IOException, InterruptedException {
    Configuration conf = context.getConfiguration();
    int iterations = conf.getInt(KMeans.ITERATIONS, 10);
    int skip = conf.getInt(KMeans.SKIP, 0);

    Table init = newTable(Combiner.REJECT);
    if (isMaster()) {
      double[][] c = readCentroids(conf, new Path(conf.get(KMeans.INIT)));
      double[] flat = new double[c.length * c[0].length];
      for (int j = 0; j < c.length; j++) {
        System.arraycopy(c[j], 0, flat, j * c[0].length, c[0].length);
      }
      init.put(0, flat);
      init.put(1, new long[] {c.length, c[0].length});
    }
    broadcast("kmeans-init", init, getMasterID());
    long[] shape = init.get(1).toLongArray();
    int k = (int) shape[0];
    int dim = (int) shape[1];
    double[] centroids = init.get(0).toDoubleArray();
    init.close();

    double[] points = readPoints(reader, conf, dim, skip);
    int n = points.length / dim;

    for (int it = 1; it <= iterations; it++) {
      Table acc = newTable(Combiner.SUM);
      Partition p = acc.create(0, harp.DType.F64, k * dim + k + 1);
      DoubleBuffer v = p.doubles();
      double inertia = 0;
      for (int i = 0; i < n; i++) {
        int best = 0;
        double bestD = Double.POSITIVE_INFINITY;
        for (int j = 0; j < k; j++) {
          double d = 0;
          for (int q = 0; q < dim; q++) {
            double diff = points[i * dim + q] - centroids[j * dim + q];
            d += diff * diff;
          }
          if (d < bestD) {
            bestD = d;
            best = j;
          }
        }
        inertia += bestD;
        for (int q = 0; q < dim; q++) {
          v.put(best * dim + q, v.get(best * dim + q) + points[i * dim + q]);
        }
        v.put(k * dim + best, v.get(k * dim + best) + 1);
      }
      v.put(k * dim + k, inertia);
      allreduce("kmeans-sums", acc);
      DoubleBuffer r = acc.get(0).doubles();
      for (int j = 0; j < k; j++) {
        double count = r.get(k * dim + j);
        if (count > 0) {
          for (int q = 0; q < dim; q++) {
            centroids[j * dim + q] = r.get(j * dim + q) / count;
          }
        }
      }
      context.setStatus("iteration " + it + " inertia " + r.get(k * dim + k));
      context.getCounter("harp-kmeans", "iterations").increment(1);
      acc.close();
    }
    if (isMaster()) {
      Path out = new Path(conf.get(KMeans.OUTPUT), "centroids.txt");
      try (OutputStream os = out.getFileSystem(conf).create(out, false)) {
        StringBuilder sb = new StringBuilder();
        for (int j = 0; j < k; j++) {
          for (int q = 0; q < dim; q++) {
            sb.append(q == 0 ? "" : " ").append(centroids[j * dim + q]);
          }
          sb.append('\n');
        }
        os.write(sb.toString().getBytes(StandardCharsets.UTF_8));
      }
    }
  }

  static double[] parse(String line, int skip) {
    String[] f = line.trim().split("[\\s,]+");
    if (f.length == 1 && f[0].isEmpty()) {
      return null;
    }
    if (f.length <= skip) {
      throw new NumberFormatException("expected values after " + skip + " skipped columns, found " + f.length + " fields");
    }
    double[] v = new double[f.length - skip];
    for (int i = skip; i < f.length; i++) {
      v[i - skip] = Double.parseDouble(f[i]);
      if (!Double.isFinite(v[i - skip])) {
        throw new NumberFormatException("not a finite number: " + f[i]);
      }
    }
    return v;
  }

  private double[] readPoints(KeyValReader<FilePosition, Text> reader, Configuration conf, int dim, int skip)
      throws IOException, InterruptedException {
    double[] buf = new double[1024 * dim];
    int used = 0;
    while (reader.nextKeyValue()) {
      String line = reader.getCurrentValue().toString();
      double[] v;
      try {
        v = parse(line, skip);
        if (v != null && v.length != dim) {
          throw new NumberFormatException("expected " + dim + " values (the centroids' dimension), found " + v.length);
        }
      } catch (NumberFormatException e) {
        FilePosition pos = reader.getCurrentKey();
        throw new HarpException(pos.file() + ":" + pos.line(conf) + ": " + e.getMessage(), getSelfID(), "");
      }
      if (v == null) {
        continue;
      }
      if (used + dim > buf.length) {
        buf = java.util.Arrays.copyOf(buf, buf.length * 2);
      }
      System.arraycopy(v, 0, buf, used, dim);
      used += dim;
    }
    return java.util.Arrays.copyOf(buf, used);
  }

  static double[][] readCentroids(Configuration conf, Path path) throws IOException {
    FileSystem fs = path.getFileSystem(conf);
    List<double[]> rows = new ArrayList<>();
    try (BufferedReader in = new BufferedReader(new InputStreamReader(fs.open(path), StandardCharsets.UTF_8))) {
      String line;
      int no = 0;
      while ((line = in.readLine()) != null) {
        no++;
        double[] v;
        try {
          v = parse(line, 0);
        } catch (NumberFormatException e) {
          throw new IOException(path + ":" + no + ": " + e.getMessage());
        }
        if (v == null) {
          continue;
        }
        if (!rows.isEmpty() && v.length != rows.get(0).length) {
          throw new IOException(path + ":" + no + ": expected " + rows.get(0).length + " values, found " + v.length);
        }
        rows.add(v);
      }
    }
    if (rows.isEmpty()) {
      throw new IOException(path + ": no centroids");
    }
    return rows.toArray(new double[0][]);
  }
}
