package harp.examples.engine;

import harp.examples.MapCollectiveJobs;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Set;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.conf.Configured;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.Job;
import org.apache.hadoop.util.Tool;

/**
 * One of the {@code harp} tool's jobs as a Hadoop job:
 * {@code hadoop jar harp-rs-examples.jar JOB [generic -D options] --workers W <the arguments of harp JOB>},
 * e.g. {@code pagerank --workers 4 --input edges --iterations 20 --output ranks}, or without
 * {@code --input} for the jobs that generate their data ({@code nbody}, {@code cg --grid G}). The arguments
 * are those of {@code harp JOB} (docs/apps.md), checked by the engine the same way; paths
 * ({@code --input}, {@code --output}, {@code --weights}, {@code --init}, {@code --test}, {@code --rhs}) without a scheme are
 * resolved against the job's default file system (HDFS on a cluster), as Hadoop resolves
 * paths. Each of the W map tasks runs one worker ({@link harp.HarpJob}); the engine reads that
 * worker's share of the input and the workers commit the output with {@code _SUCCESS}, so a
 * failed job leaves no result; the client removes {@code <output>/_temporary} when the job fails
 * or is killed (a killed worker cannot). An existing output directory is refused, as by every
 * example, unless {@code -Dharp.overwrite=true} (it is removed first) or the arguments hold
 * {@code --overwrite} or {@code --resume} (the engine's own options, passed on to it).
 */
public class EngineJob extends Configured implements Tool {
  /** The job's name ({@code pagerank}, …) and its arguments, one per line. */
  public static final String JOB = "harp.example.job";
  public static final String ARGS = "harp.example.args";
  static final Set<String> PATHS = java.util.Collections.unmodifiableSet(new java.util.HashSet<>(
      java.util.Arrays.asList("--input", "--output", "--weights", "--init", "--labels", "--checkpoint-dir",
          "--test", "--rhs")));
  /** The jobs that may run without {@code --input}: they generate their data (nbody; cg with {@code --grid}). */
  static final Set<String> GENERATED = java.util.Collections.unmodifiableSet(new java.util.HashSet<>(
      java.util.Arrays.asList("nbody", "cg")));

  private final String name;
  private Job job;

  public EngineJob(String name) {
    this.name = name;
  }

  @Override
  public int run(String[] args) throws Exception {
    List<String> rest = new ArrayList<>(Arrays.asList(args));
    int at = rest.indexOf("--workers");
    if (at < 0 || at + 1 >= rest.size() || (!rest.contains("--input") && !GENERATED.contains(name))) {
      System.err.println("usage: " + name + " [generic -D options] --workers W --input PATH … (the arguments of harp "
          + name + ")");
      return 2;
    }
    int workers;
    try {
      workers = Integer.parseInt(rest.get(at + 1));
    } catch (NumberFormatException e) {
      System.err.println(name + ": --workers must be a whole number: " + rest.get(at + 1));
      return 2;
    }
    if (workers < 1) {
      System.err.println(name + ": --workers must be at least 1");
      return 2;
    }
    rest.remove(at + 1);
    rest.remove(at);
    Configuration conf = getConf();
    Path input = null;
    Path output = null;
    for (int i = 0; i + 1 < rest.size(); i++) {
      if (PATHS.contains(rest.get(i))) {
        Path p = new Path(rest.get(i + 1));
        FileSystem fs = p.getFileSystem(conf);
        Path q = fs.makeQualified(p);
        rest.set(i + 1, q.toString());
        if (rest.get(i).equals("--output")) {
          output = q;
        }
        if (rest.get(i).equals("--input")) {
          input = q;
          if (!fs.exists(q)) {
            System.err.println(name + ": input path does not exist: " + q);
            return 2;
          }
        }
      }
    }
    String checkpoints = checkpointDir(rest, output);
    if (checkpoints != null) {
      // In the job's configuration, so that the workers of a restarted YARN master (attempt 2
      // and later) resume from it (docs/checkpoints.md).
      conf.set(RESUME_DIR, checkpoints);
    }
    boolean resume = rest.contains("--resume") || conf.getBoolean(RESUME, false);
    String refused = input == null ? null : MapCollectiveJobs.checkInput(conf, input, name);
    if (refused == null && output != null) {
      refused = MapCollectiveJobs.checkOutput(conf, output, name, rest.contains("--overwrite") || resume);
    }
    if (refused != null) {
      System.err.println(refused);
      return 2;
    }
    conf.set(JOB, name);
    conf.set(ARGS, String.join("\n", rest));
    job = MapCollectiveJobs.create(conf, "harp-" + name, EngineJob.class, workers, input, EngineJobMapper.class);
    return MapCollectiveJobs.runToEnd(job, output);
  }

  static final String RESUME_DIR = "harp.checkpoint.dir";
  static final String RESUME = "harp.resume";

  /**
   * The checkpoint directory of a job whose arguments save or read checkpoints
   * ({@code --checkpoint-every N} with N > 0, or {@code --resume}): {@code --checkpoint-dir}, or
   * else {@code <output>/_checkpoints}, which is then added to the arguments; null otherwise.
   */
  static String checkpointDir(List<String> rest, Path output) {
    int at = rest.indexOf("--checkpoint-dir");
    if (at >= 0 && at + 1 < rest.size()) {
      return rest.get(at + 1);
    }
    int every = rest.indexOf("--checkpoint-every");
    boolean saving = every >= 0 && every + 1 < rest.size() && !rest.get(every + 1).trim().equals("0");
    if (!(saving || rest.contains("--resume")) || output == null) {
      return null;
    }
    String dir = new Path(output, "_checkpoints").toString();
    rest.add("--checkpoint-dir");
    rest.add(dir);
    return dir;
  }

  /**
   * Whether {@code args} (after the generic options) are in the flag form of a {@code harp} job
   * ({@code --workers W --input …}) rather than an example's positional form.
   */
  public static boolean flagForm(String[] args) {
    return args.length > 0 && args[0].startsWith("--");
  }

  /** The job of the last {@link #run}, or null. */
  public Job job() {
    return job;
  }

  /** {@code pagerank}, {@code lda}, {@code mds}, {@code layout}, {@code components}, {@code id3}, {@code mfsgd}, {@code nbody} and {@code cg} for the program driver. */
  public static class PageRank {
    public static void main(String[] args) throws Exception {
      System.exit(org.apache.hadoop.util.ToolRunner.run(new EngineJob("pagerank"), args));
    }
  }

  public static class Lda {
    public static void main(String[] args) throws Exception {
      System.exit(org.apache.hadoop.util.ToolRunner.run(new EngineJob("lda"), args));
    }
  }

  public static class Mds {
    public static void main(String[] args) throws Exception {
      System.exit(org.apache.hadoop.util.ToolRunner.run(new EngineJob("mds"), args));
    }
  }

  public static class Layout {
    public static void main(String[] args) throws Exception {
      System.exit(org.apache.hadoop.util.ToolRunner.run(new EngineJob("layout"), args));
    }
  }

  public static class Components {
    public static void main(String[] args) throws Exception {
      System.exit(org.apache.hadoop.util.ToolRunner.run(new EngineJob("components"), args));
    }
  }

  public static class Id3 {
    public static void main(String[] args) throws Exception {
      System.exit(org.apache.hadoop.util.ToolRunner.run(new EngineJob("id3"), args));
    }
  }

  public static class Mfsgd {
    public static void main(String[] args) throws Exception {
      System.exit(org.apache.hadoop.util.ToolRunner.run(new EngineJob("mfsgd"), args));
    }
  }

  public static class Nbody {
    public static void main(String[] args) throws Exception {
      System.exit(org.apache.hadoop.util.ToolRunner.run(new EngineJob("nbody"), args));
    }
  }

  public static class Cg {
    public static void main(String[] args) throws Exception {
      System.exit(org.apache.hadoop.util.ToolRunner.run(new EngineJob("cg"), args));
    }
  }
}
