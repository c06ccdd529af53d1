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
  /**
   * {@code -Dharp.overwrite=true}: an existing output directory is removed before the job starts
   * (the Java form of the {@code harp} tool's {@code --overwrite}); without it, and without
   * resuming ({@code -Dharp.resume=true} for K-means), every example refuses an existing output.
   */
  public static final String OVERWRITE = "harp.overwrite";

  private MapCollectiveJobs() {}

  /**
   * The one rule of every example for an existing output directory {@code out}: refused (a
   * message naming it and the ways on, returned) unless {@code resume} (the run continues the
   * one that wrote it) or {@link #OVERWRITE} (then it is removed now); null when the job may go on.
   */
  public static String checkOutput(Configuration conf, Path out, String tool, boolean resume) throws IOException {
    org.apache.hadoop.fs.FileSystem fs = out.getFileSystem(conf);
    if (resume || !fs.exists(out)) {
      return null;
    }
    if (conf.getBoolean(OVERWRITE, false)) {
      if (!fs.delete(out, true)) {
        return tool + ": cannot remove the existing output directory " + out;
      }
      return null;
    }
    return tool + ": output directory " + out + " already exists (-D" + OVERWRITE + "=true replaces it"
        + (tool.equals("kmeans") ? ", -D" + harp.KMeans.RESUME + "=true continues the run that wrote it" : "") + ")";
  }

  /**
   * Refuses an input that holds a subdirectory, before anything starts, as the {@code harp} tool
   * does (Hadoop's FileInputFormat would hand it to a worker, which fails late): returns the
   * message, or null. Names starting with {@code _} or {@code .} are skipped, as Hadoop skips
   * them; {@code mapreduce.input.fileinputformat.input.dir.recursive=true} reads subdirectories.
   */
  public static String checkInput(Configuration conf, Path input, String tool) throws IOException {
    org.apache.hadoop.fs.FileSystem fs = input.getFileSystem(conf);
    if (conf.getBoolean(FileInputFormat.INPUT_DIR_RECURSIVE, false) || !fs.exists(input)
        || !fs.getFileStatus(input).isDirectory()) {
      return null;
    }
    for (org.apache.hadoop.fs.FileStatus st : fs.listStatus(input)) {
      String n = st.getPath().getName();
      if (st.isDirectory() && !n.startsWith("_") && !n.startsWith(".")) {
        return tool + ": input " + input + " holds a subdirectory, " + st.getPath() + ": not a file (-D"
            + FileInputFormat.INPUT_DIR_RECURSIVE + "=true reads the files under it too)";
      }
    }
    return null;
  }

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
    if (input != null) {
      FileInputFormat.addInputPath(job, input);
    }
    job.setMapperClass(mapper);
    job.setNumReduceTasks(0);
    job.setOutputFormatClass(NullOutputFormat.class);
    return job;
  }

  /**
   * Runs {@code job} to its end and returns the exit code (0 on success, else 1). When it fails
   * or is killed, {@code output/_temporary} (the workers' staging) is removed: failed workers
   * remove their own, killed ones cannot; {@code output} itself goes too if nothing else is left
   * in it (the run created it), so the same command can run again. {@code output} may be null
   * (nothing to remove).
   */
  public static int runToEnd(Job job, Path output) throws IOException, InterruptedException, ClassNotFoundException {
    boolean ok = false;
    try {
      ok = job.waitForCompletion(true);
    } finally {
      if (!ok && output != null) {
        org.apache.hadoop.fs.FileSystem fs = output.getFileSystem(job.getConfiguration());
        fs.delete(new Path(output, "_temporary"), true);
        if (fs.exists(output) && fs.getFileStatus(output).isDirectory() && fs.listStatus(output).length == 0) {
          fs.delete(output, false);
        }
      }
    }
    return ok ? 0 : 1;
  }
}
