package harp.examples.bench;

import harp.Algorithm;
import harp.CollectiveMapper;
import harp.Combiner;
import harp.KeyValReader;
import harp.Options;
import harp.Table;
import harp.io.FilePosition;
import harp.io.WorkerInputFormat;
import harp.mapred.MapCollectiveClientProtocolProvider;
import java.io.IOException;
import java.nio.file.Files;
import java.util.Arrays;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.conf.Configured;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.output.NullOutputFormat;
import org.apache.hadoop.util.Tool;
import org.apache.hadoop.util.ToolRunner;

/**
 * Times allreduce or broadcast through the Java API, measured like {@code harp bench}: each
 * repetition starts after a barrier, its time is the slowest worker's, the median is printed as
 * one JSON line. {@code bench [-D…] <allreduce|broadcast> <bytes> <workers> <reps>}
 */
public class Bench extends Configured implements Tool {
  public static void main(String[] args) throws Exception {
    System.exit(ToolRunner.run(new Configuration(), new Bench(), args));
  }

  @Override
  public int run(String[] args) throws Exception {
    if (args.length != 4 || !(args[0].equals("allreduce") || args[0].equals("broadcast"))) {
      System.err.println("usage: bench [-D…] <allreduce|broadcast> <bytes> <workers> <reps>");
      return 2;
    }
    Configuration conf = getConf();
    int workers = Integer.parseInt(args[2]);
    conf.set("bench.op", args[0]);
    conf.setLong("bench.bytes", Long.parseLong(args[1]));
    conf.setInt("bench.reps", Integer.parseInt(args[3]));
    conf.setInt(MapCollectiveClientProtocolProvider.WORKERS, workers);
    conf.setInt(WorkerInputFormat.WORKERS, workers);
    conf.setIfUnset("mapreduce.client.completion.pollinterval", "50");
    conf.setInt("mapreduce.map.maxattempts", 1);
    java.nio.file.Path in = Files.createTempDirectory("harp-bench-in");
    Files.write(in.resolve("x.txt"), "x\n".getBytes(java.nio.charset.StandardCharsets.UTF_8));
    Job job = Job.getInstance(conf, "harp-bench");
    job.setJarByClass(Bench.class);
    job.setInputFormatClass(WorkerInputFormat.class);
    FileInputFormat.addInputPath(job, new Path(in.toUri()));
    job.setMapperClass(BenchMapper.class);
    job.setNumReduceTasks(0);
    job.setOutputFormatClass(NullOutputFormat.class);
    return job.waitForCompletion(false) ? 0 : 1;
  }

  /** The timed loop. */
  public static class BenchMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context) {
      Configuration conf = context.getConfiguration();
      String op = conf.get("bench.op");
      long bytes = conf.getLong("bench.bytes", 1 << 20);
      int reps = conf.getInt("bench.reps", 10);
      int warmup = 2;
      double[] times = new double[reps];
      for (int rep = 0; rep < warmup + reps; rep++) {
        Table t = newTable(Combiner.SUM);
        if (op.equals("allreduce") || isMaster()) {
          t.create(0, harp.DType.F64, (int) Math.max(1, bytes / 8)).doubles().put(0, getSelfID() + 1);
        }
        barrier("bench-start");
        long t0 = System.nanoTime();
        if (op.equals("allreduce")) {
          allreduce("bench", t);
        } else {
          broadcast("bench", t, Options.defaults().algorithm(Algorithm.Broadcast.CHAIN));
        }
        double dt = (System.nanoTime() - t0) / 1e9;
        if (rep >= warmup) {
          times[rep - warmup] = dt;
        }
        t.close();
      }
      Table tt = newTable(Combiner.MAX);
      tt.put(0, times);
      allreduce("bench-times", tt, Options.defaults().algorithm(Algorithm.Allreduce.BIDIRECTIONAL_EXCHANGE));
      if (isMaster()) {
        double[] all = tt.get(0).toDoubleArray();
        Arrays.sort(all);
        double median = all.length % 2 == 1 ? all[all.length / 2] : (all[all.length / 2 - 1] + all[all.length / 2]) / 2;
        System.out.printf("{\"api\":\"java\",\"op\":\"%s\",\"workers\":%d,\"bytes\":%d,\"reps\":%d,\"median_s\":%.9f}%n",
            op, getNumWorkers(), bytes, reps, median);
      }
    }
  }
}
