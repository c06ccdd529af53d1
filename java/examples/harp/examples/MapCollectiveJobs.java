package harp.examples;

import harp.io.WorkerInputFormat;
import harp.mapred.MapCollectiveClientProtocolProvider;
import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.mapreduce.Mapper;
import org.apache.hadoop.mapreduce.lib.input.FileInputFormat;
import org.apache.hadoop.mapreduce.lib.output.NullOutputFormat;

/** What every example's client does the same way: the job's set-up and its end. */
public final class MapCollectiveJobs {
  private MapCollectiveJobs() {}

  /**
   * A map-collective job of {@code workers} map tasks (one worker each, exactly {@code workers}
   * splits of {@code input}), running {@code mapper}, without reducers or Hadoop output (the
   * workers write their results). A failed worker fails the job: no task retries, since the
   * other workers would not wait for a new attempt.
   */
  public static Job create(Configuration conf, String name, Class<?> jarOf, int workers, Path input,
      Class<? extends Mapper<?, ?, ?, ?>> mapper) throws IOException {
    conf.setInt(MapCollectiveClientProtocolProvider.WORKERS, workers);
    conf.setInt(WorkerInputFormat.WORKERS, workers);
    conf.setIfUnset("mapreduce.client.completion.pollinterval", "50");
    conf.setInt("mapreduce.map.maxattempts", 1);
    Job job = Job.getInstance(conf, name);
    job.setJarByClass(jarOf);
    job.setInputFormatClass(WorkerInputFormat.class);
    FileInputFormat.addInputPath(job, input);
    job.setMapperClass(mapper);
    job.setNumReduceTasks(0);
    job.setOutputFormatClass(NullOutputFormat.class);
    return job;
  }

  /**
   * Runs {@code job} to its end and returns the exit code (0 on success, else 1). When it fails
   * or is killed, {@code output/_temporary} (the workers' staging) is removed: failed workers
   * remove their own, killed ones cannot. {@code output} may be null (nothing to remove).
   */
  public static int runToEnd(Job job, Path output) throws IOException, InterruptedException, ClassNotFoundException {
    boolean ok = false;
    try {
      ok = job.waitForCompletion(true);
    } finally {
      if (!ok && output != null) {
        output.getFileSystem(job.getConfiguration()).delete(new Path(output, "_temporary"), true);
      }
    }
    return ok ? 0 : 1;
  }
}
