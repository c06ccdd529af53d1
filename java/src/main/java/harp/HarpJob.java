package harp;

import java.util.Objects;

/**
 * Runs one of the {@code harp} tool's jobs ({@code wordcount}, {@code pagerank}, {@code mds},
 * {@code layout}, {@code components}, {@code kmeans}, …) as this map task's part of the job, with
 * the same arguments, input checks and output as {@code harp worker … JOB …}: the engine reads
 * this worker's share of {@code --input} (local files, {@code hdfs://}) and the workers commit
 * {@code --output} with a {@code _SUCCESS} marker. Paths without a scheme are resolved by the
 * caller (see the examples), not against the task's working directory. Natives: {@code
 * rust/harp-jni/src/job.rs}.
 */
public final class HarpJob {
  static {
    Native.ensureLoaded();
  }

  private HarpJob() {}

  /** Runs {@code job args…} on the mapper's worker; blocks until done; throws {@link HarpException}. */
  public static void run(CollectiveMapper<?, ?, ?, ?> mapper, String job, String... args) {
    Objects.requireNonNull(job, "job");
    String[] all = new String[args.length + 1];
    all[0] = job;
    System.arraycopy(args, 0, all, 1, args.length);
    mapper.runNative(w -> {
      runJob(w.handle(), all);
      return null;
    });
  }

  static native void runJob(long worker, String[] args);
}
