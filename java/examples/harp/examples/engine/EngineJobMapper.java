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
    HarpJob.run(this, conf.get(EngineJob.JOB), args.isEmpty() ? new String[0] : args.split("\n", -1));
  }
}
