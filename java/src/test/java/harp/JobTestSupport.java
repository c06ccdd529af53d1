package harp;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.apache.hadoop.conf.Configuration;

/** A local-mode configuration whose scratch directories live under a test's temp dir. */
final class JobTestSupport {
  private JobTestSupport() {}

  static Configuration localConf(Path tmp, int workers) {
    Configuration conf = new Configuration();
    conf.set("mapreduce.framework.name", "map-collective");
    conf.set("fs.defaultFS", "file:///");
    conf.set("mapreduce.jobtracker.staging.root.dir", tmp.resolve("staging").toString());
    conf.set("hadoop.tmp.dir", tmp.resolve("hadoop-tmp").toString());
    conf.set("mapreduce.cluster.local.dir", tmp.resolve("local").toString());
    conf.set("mapreduce.client.completion.pollinterval", "50");
    conf.setInt("mapreduce.map.maxattempts", 1);
    conf.setInt("harp.workers", workers);
    conf.setLong("harp.collective.timeout.ms", 20_000);
    conf.setLong("harp.connect.timeout.ms", 20_000);
    return conf;
  }

  /** A map-collective job over the text files in {@code in} (WorkerInputFormat, no output). */
  static org.apache.hadoop.mapreduce.Job job(Configuration conf, Path in, Class<? extends CollectiveMapper<?, ?, ?, ?>> mapper)
      throws IOException {
    conf.setInt(harp.io.WorkerInputFormat.WORKERS, conf.getInt("harp.workers", 1));
    org.apache.hadoop.mapreduce.Job job = org.apache.hadoop.mapreduce.Job.getInstance(conf, mapper.getSimpleName());
    job.setInputFormatClass(harp.io.WorkerInputFormat.class);
    org.apache.hadoop.mapreduce.lib.input.FileInputFormat.addInputPath(job, new org.apache.hadoop.fs.Path(in.toUri()));
    job.setMapperClass(mapper);
    job.setNumReduceTasks(0);
    job.setOutputFormatClass(org.apache.hadoop.mapreduce.lib.output.NullOutputFormat.class);
    return job;
  }

  static Path writeLines(Path dir, String name, int lines) throws IOException {
    Files.createDirectories(dir);
    StringBuilder sb = new StringBuilder();
    for (int i = 0; i < lines; i++) {
      sb.append(i).append('\n');
    }
    Path f = dir.resolve(name);
    Files.write(f, sb.toString().getBytes(StandardCharsets.UTF_8));
    return f;
  }

  /** Whether {@code r} throws an {@link IllegalArgumentException}. */
  static boolean throwsIae(Runnable r) {
    try {
      r.run();
      return false;
    } catch (IllegalArgumentException e) {
      return true;
    }
  }

  static String harpBinary() {
    String b = System.getProperty("harp.bin", "target/release/harp");
    if (!new File(b).canExecute()) {
      throw new IllegalStateException("harp binary not found at " + b + " (set -Dharp.bin)");
    }
    return b;
  }
}
