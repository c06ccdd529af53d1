package harp.examples.engine;

import harp.CollectiveMapper;
import harp.HarpJob;
import harp.KeyValReader;
import harp.io.FilePosition;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.Text;

/** Runs the job named by {@link EngineJob#JOB} on this task's worker (see {@link EngineJob}). */
public class EngineJobMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
  @Override
  protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context) {
    Configuration conf = context.getConfiguration();
    String args = conf.get(EngineJob.ARGS, "");
    java.util.List<String> v = new java.util.ArrayList<>(
        java.util.Arrays.asList(args.isEmpty() ? new String[0] : args.split("\n", -1)));
    // harp.resume: set for the workers of a restarted YARN master when the job has a checkpoint
    // directory (or by -Dharp.resume=true): continue from the last complete checkpoint.
    if (conf.getBoolean(EngineJob.RESUME, false) && v.contains("--checkpoint-dir") && !v.contains("--resume")) {
      v.add("--resume");
    }
    HarpJob.run(this, conf.get(EngineJob.JOB), v.toArray(new String[0]));
  }
}
