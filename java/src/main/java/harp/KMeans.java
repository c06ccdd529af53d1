package harp;

import harp.io.WorkerInputFormat;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.function.Consumer;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.mapreduce.InputSplit;
import org.apache.hadoop.mapreduce.MapContext;
import org.apache.hadoop.mapreduce.lib.input.FileSplit;

/**
 * The engine's K-means (Lloyd's algorithm, the same code as {@code harp kmeans}) run from a
 * {@link CollectiveMapper}: the engine reads this worker's input splits straight into native
 * memory (no point is ever on the Java heap), computes with its blocked multithreaded kernel and
 * combines the workers' sums with one allreduce per iteration. Every worker must call
 * {@link Builder#run} with the same initial centroids, iterations and options.
 *
 * <pre>{@code
 * KMeans.Result r = KMeans.forTask(this, context)     // this task's splits, threads from the conf
 *     .init(conf.get("harp.kmeans.init")).iterations(10)
 *     .onIteration(it -> context.setStatus("iteration " + it.iteration + " of 10"))
 *     .run();
 * }</pre>
 *
 * <p>Threads: {@value #THREADS} (the CLI's {@code --threads}), default the container's vcores
 * ({@code mapreduce.map.cpu.vcores}, default 1). In local mode every map task of the job is a
 * worker of the same JVM, each with its own kernel threads: W workers use W × threads cores.
 */
public final class KMeans {
  /** Compute threads of each worker (the CLI's {@code --threads}). */
  public static final String THREADS = "harp.kmeans.threads";
  /** Save a checkpoint every N iterations and after the last (the CLI's {@code --checkpoint-every}); 0: never. */
  public static final String CHECKPOINT_EVERY = "harp.checkpoint.every";
  /** Where checkpoints go (the CLI's {@code --checkpoint-dir}; the example's default: OUTPUT/_checkpoints). */
  public static final String CHECKPOINT_DIR = "harp.checkpoint.dir";
  /** {@code true}: continue from the newest complete checkpoint (the CLI's {@code --resume}). */
  public static final String RESUME = "harp.resume";

  /** Precision of the points in memory and of the distance kernel. */
  public enum Precision {
    F64,
    F32
  }

  private KMeans() {}

  /** The compute threads a task of this job uses: {@value #THREADS}, else its vcores, else 1. */
  public static int threads(Configuration conf) {
    int t = ConfNumbers.getInt(conf, THREADS, ConfNumbers.getInt(conf, "mapreduce.map.cpu.vcores", 1));
    if (t < 1) {
      throw new IllegalArgumentException(THREADS + " must be at least 1, got " + t);
    }
    return t;
  }

  /** A K-means run on {@code mapper}'s worker, with no input yet. */
  public static Builder on(CollectiveMapper<?, ?, ?, ?> mapper) {
    return new Builder(mapper);
  }

  /**
   * A K-means run over this map task's input split (a {@link WorkerInputFormat} group or a
   * {@link FileSplit}), with {@link #threads(Configuration)} threads. Use {@link
   * WorkerInputFormat}: it gives every worker exactly one split.
   */
  public static Builder forTask(CollectiveMapper<?, ?, ?, ?> mapper, MapContext<?, ?, ?, ?> context)
      throws IOException {
    Configuration conf = context.getConfiguration();
    Builder b = on(mapper).threads(threads(conf)).configuration(conf)
        .checkpointEvery(ConfNumbers.getInt(conf, CHECKPOINT_EVERY, 0))
        .resume(conf.getBoolean(RESUME, false));
    if (conf.get(CHECKPOINT_DIR) != null) {
      b.checkpointDir(conf.get(CHECKPOINT_DIR));
    }
    if (context.getJobID() != null) {
      b.job(context.getJobID().toString());
    }
    InputSplit s = context.getInputSplit();
    List<FileSplit> splits;
    if (s instanceof WorkerInputFormat.GroupSplit) {
      splits = ((WorkerInputFormat.GroupSplit) s).fileSplits();
    } else if (s instanceof FileSplit) {
      splits = Collections.singletonList((FileSplit) s);
    } else {
      throw new IllegalArgumentException("K-means reads file splits; this task's split is a "
          + (s == null ? "null" : s.getClass().getName()));
    }
    for (FileSplit f : splits) {
      Path p = f.getPath();
      b.split(p.getFileSystem(conf).makeQualified(p).toString(), f.getStart(), f.getLength());
    }
    return b;
  }

  /** One iteration as the master saw it (inertia before the update; the same on every worker). */
  public static final class Iteration {
    public final int iteration;
    public final double inertia;
    public final double computeSeconds;
    public final double commSeconds;
    /**
     * The share of the n·k point–centroid distances computed in this iteration, over all
     * workers: 1 on the {@code gemm} path, less where {@code yinyang} or {@code hamerly} bounds skipped some;
     * NaN when not counted (the {@code pruned} path, iterations loaded from a checkpoint).
     */
    public final double distances;

    Iteration(int iteration, double inertia, double computeSeconds, double commSeconds, double distances) {
      this.iteration = iteration;
      this.inertia = inertia;
      this.computeSeconds = computeSeconds;
      this.commSeconds = commSeconds;
      this.distances = distances;
    }
  }

  /** The final centroids (the same on every worker) and the run's figures. */
  public static final class Result {
    public final int k;
    public final int dim;
    /** Points of all workers. */
    public final long points;
    /** Compute threads of this worker. */
    public final int threads;
    /** Seconds this worker spent loading its points. */
    public final double loadSeconds;
    public final List<Iteration> iterations;
    /** Why the loop ended: {@code iterations} (all ran), {@code tolerance} or {@code converged}. */
    public final String stopReason;
    /** The iteration of the checkpoint this run resumed from (its earlier iterations are listed too), or 0. */
    public final int resumedFrom;
    /** The assignment path used, {@code auto} resolved: {@code gemm}, {@code pruned}, {@code yinyang} or {@code hamerly}. */
    public final String assign;
    private final double[] centroids;

    /** Decodes {@code runEngine}'s array (layout in rust/harp-jni/src/kmeans.rs). */
    Result(double[] v) {
      k = (int) v[0];
      dim = (int) v[1];
      points = (long) v[2];
      loadSeconds = v[3];
      threads = (int) v[4];
      stopReason = new String[] {"iterations", "tolerance", "converged"}[(int) v[5]];
      assign = Native.names("kmeans-assign").split("\n")[(int) v[6]];
      int m = (int) v[7];
      List<Iteration> its = new ArrayList<>(m);
      for (int i = 0; i < m; i++) {
        int at = 8 + 5 * i;
        its.add(new Iteration(i + 1, v[at], v[at + 1], v[at + 2], v[at + 4]));
      }
      iterations = Collections.unmodifiableList(its);
      centroids = java.util.Arrays.copyOfRange(v, 8 + 5 * m, 8 + 5 * m + k * dim);
      resumedFrom = (int) v[8 + 5 * m + k * dim];
    }

    /** Centroid {@code j} (a copy). */
    public double[] centroid(int j) {
      return java.util.Arrays.copyOfRange(centroids, j * dim, (j + 1) * dim);
    }

    /** One centroid per line, values separated by a space, each exactly round-tripping. */
    public String centroidsText() {
      StringBuilder sb = new StringBuilder(k * dim * 20);
      for (int j = 0; j < k; j++) {
        for (int q = 0; q < dim; q++) {
          sb.append(q == 0 ? "" : " ").append(centroids[j * dim + q]);
        }
        sb.append('\n');
      }
      return sb.toString();
    }

    /** The figures in the form of {@code harp kmeans}'s summary.json. */
    public String summaryJson(int workers) {
      StringBuilder sb = new StringBuilder("{\n");
      double compute = 0;
      double comm = 0;
      sb.append("  \"workers\": ").append(workers).append(",\n");
      sb.append("  \"threads\": ").append(threads).append(",\n");
      sb.append("  \"points\": ").append(points).append(",\n");
      sb.append("  \"k\": ").append(k).append(",\n");
      sb.append("  \"dim\": ").append(dim).append(",\n");
      sb.append("  \"iterations\": [");
      for (Iteration it : iterations) {
        compute += it.computeSeconds;
        comm += it.commSeconds;
        sb.append(it.iteration == 1 ? "\n" : ",\n").append(String.format(Locale.ROOT,
            "    {\"iteration\": %d, \"inertia\": %s, \"compute_s\": %s, \"comm_s\": %s, \"distances\": %s}",
            it.iteration, num(it.inertia), num(it.computeSeconds), num(it.commSeconds), num(it.distances)));
      }
      sb.append("\n  ],\n");
      sb.append("  \"stop_reason\": \"").append(stopReason).append("\",\n");
      sb.append("  \"assign\": \"").append(assign).append("\",\n");
      sb.append("  \"resumed_from\": ").append(resumedFrom == 0 ? "null" : Integer.toString(resumedFrom)).append(",\n");
      sb.append("  \"load_s\": ").append(num(loadSeconds)).append(",\n");
      sb.append("  \"compute_s\": ").append(num(compute)).append(",\n");
      sb.append("  \"comm_s\": ").append(num(comm)).append(",\n");
      sb.append("  \"final_inertia\": ")
          .append(iterations.isEmpty() ? "null" : num(iterations.get(iterations.size() - 1).inertia)).append("\n}\n");
      return sb.toString();
    }

    private static String num(double v) {
      return Double.isFinite(v) ? Double.toString(v) : "null";
    }
  }

  /** What to run; {@link #run} starts it. */
  public static final class Builder {
    private final CollectiveMapper<?, ?, ?, ?> mapper;
    private final StringBuilder splits = new StringBuilder();
    private String input;
    private String init;
    private int iterations = 10;
    private int threads = 1;
    private Precision precision = Precision.F64;
    private double tolerance = -1;
    private int splitCount;
    private final StringBuilder extra = new StringBuilder();
    private boolean chosenInit;
    private String format = "text";
    private int checkpointEvery;
    private String checkpointDir;
    private boolean resume;
    private String job;
    private int skipColumns;
    private Consumer<Iteration> onIteration;
    /** The job's configuration when known: paths are qualified against its default file system. */
    private Configuration conf;

    private Builder(CollectiveMapper<?, ?, ?, ?> mapper) {
      this.mapper = mapper;
    }

    /** Adds a byte range of a file (Hadoop {@link FileSplit} semantics for text lines). */
    public Builder split(String path, long start, long length) {
      if (start < 0 || length < 0) {
        throw new IllegalArgumentException("bad split " + path + " at " + start + " length " + length);
      }
      splitCount++;
      splits.append("split=").append(start).append(' ').append(length).append(' ').append(clean(path)).append('\n');
      return this;
    }

    /** Instead of splits: a file or directory that the engine divides evenly among the workers. */
    public Builder input(String path) {
      input = clean(qualified(path));
      return this;
    }

    /**
     * {@code path} as Hadoop resolves it for this job: a path without a scheme names a file on the
     * default file system (HDFS on a cluster), not on the local disk the engine would read.
     */
    private String qualified(String path) {
      if (conf == null || path == null) {
        return path;
      }
      try {
        Path p = new Path(path);
        return p.getFileSystem(conf).makeQualified(p).toString();
      } catch (IOException e) {
        throw new java.io.UncheckedIOException("cannot resolve " + path + ": " + e.getMessage(), e);
      }
    }

    /** Initial centroids: text, one per line (read by the master); K and the dimension come from it. */
    public Builder init(String path) {
      init = clean(qualified(path));
      return this;
    }

    public Builder iterations(int n) {
      if (n < 1) {
        throw new IllegalArgumentException("iterations must be at least 1, got " + n);
      }
      iterations = n;
      return this;
    }

    public Builder threads(int n) {
      if (n < 1) {
        throw new IllegalArgumentException("threads must be at least 1, got " + n);
      }
      threads = n;
      return this;
    }

    public Builder precision(Precision p) {
      precision = p;
      return this;
    }

    /**
     * Stop early once an iteration lowers the inertia by at most this fraction of the previous
     * iteration's, or when no centroid moves (default: run every iteration).
     */
    public Builder tolerance(double t) {
      if (!(t >= 0) || Double.isInfinite(t)) {
        throw new IllegalArgumentException("tolerance must be >= 0, got " + t);
      }
      tolerance = t;
      return this;
    }

    /**
     * Save a checkpoint of the centroids and figures every {@code n} iterations and after the
     * last one, into {@link #checkpointDir} (0, the default: never). All workers' parts or none: a
     * checkpoint is complete once its manifest is written.
     */
    public Builder checkpointEvery(int n) {
      if (n < 0) {
        throw new IllegalArgumentException("checkpoint every must be >= 0, got " + n);
      }
      checkpointEvery = n;
      return this;
    }

    /** Directory of the checkpoints (local, file: or hdfs:), needed with checkpoints or resume. */
    public Builder checkpointDir(String path) {
      checkpointDir = clean(qualified(path));
      return this;
    }

    /**
     * Continue from the newest complete checkpoint in {@link #checkpointDir} up to {@link
     * #iterations} (from the start when there is none); the centroids are bit-identical to an
     * uninterrupted run with the same number of workers.
     */
    public Builder resume(boolean r) {
      resume = r;
      return this;
    }

    /** The job's name, recorded in checkpoints (the same on every worker; forTask uses the job id). */
    public Builder job(String name) {
      if (name == null || name.isEmpty() || name.indexOf('/') >= 0 || name.startsWith(".")) {
        throw new IllegalArgumentException("bad job name: " + name);
      }
      job = clean(name);
      return this;
    }

    /** {@code text} (one point per line) or {@code f32} (raw little-endian records). */
    public Builder format(String f) {
      format = clean(f);
      return this;
    }

    /** Leading text columns to ignore (3 for the Harp papers' HOG lines). */
    public Builder skipColumns(int n) {
      if (n < 0) {
        throw new IllegalArgumentException("skip columns must be >= 0, got " + n);
      }
      skipColumns = n;
      return this;
    }

    /**
     * Any other option of the engine's K-means by its name in {@code docs/jni-contract.md}
     * ({@code assign}, {@code empty_cluster}, {@code allreduce}, {@code init_method} with {@code k}
     * and {@code seed} instead of {@link #init}, {@code labels}, …).
     */
    public Builder option(String key, String value) {
      if (clean(key).indexOf('=') >= 0 || key.isEmpty()) {
        throw new IllegalArgumentException("bad K-means option name: " + key);
      }
      extra.append(key).append('=').append(clean(value)).append('\n');
      chosenInit |= key.equals("init_method");
      return this;
    }

    /**
     * The job's configuration: input and init paths without a scheme are then resolved against
     * its default file system, as Hadoop resolves them ({@link #forTask} sets it).
     */
    public Builder configuration(Configuration c) {
      conf = c;
      return this;
    }

    /** Called on the mapper's thread after every iteration (an exception is rethrown by run()). */
    public Builder onIteration(Consumer<Iteration> c) {
      onIteration = c;
      return this;
    }

    String spec() {
      if (init == null && !chosenInit) {
        throw new IllegalArgumentException("K-means needs initial centroids (init, or option init_method and k)");
      }
      if (input != null && splitCount > 0) {
        throw new IllegalArgumentException("K-means input: splits or a whole input, not both");
      }
      if ((checkpointEvery > 0 || resume) && checkpointDir == null) {
        throw new IllegalArgumentException("K-means checkpoints and resume need a checkpoint directory");
      }
      StringBuilder s = new StringBuilder();
      if (checkpointEvery > 0) {
        s.append("checkpoint_every=").append(checkpointEvery).append('\n');
      }
      if (checkpointDir != null) {
        s.append("checkpoint_dir=").append(checkpointDir).append('\n');
      }
      if (resume) {
        s.append("resume=true\n");
      }
      if (job != null) {
        s.append("job=").append(job).append('\n');
      }
      if (init != null) {
        s.append("init=").append(init).append('\n');
      }
      s.append("iterations=").append(iterations).append('\n');
      s.append("threads=").append(threads).append('\n');
      s.append("format=").append(format).append('\n');
      s.append("skip_columns=").append(skipColumns).append('\n');
      if (precision != Precision.F64) {
        s.append("precision=").append(precision.name().toLowerCase(Locale.ROOT)).append('\n');
      }
      if (tolerance >= 0) {
        s.append("tolerance=").append(tolerance).append('\n');
      }
      if (input != null) {
        s.append("input=").append(input).append('\n');
      } else {
        // Explicit splits, possibly none (a worker of a small input may get no split).
        s.append("splits=").append(splitCount).append('\n');
      }
      return s.append(splits).append(extra).toString();
    }

    /** Runs every iteration (all workers together); throws {@link HarpException} on failure. */
    public Result run() {
      String spec = spec();
      Progress p = onIteration == null ? null : new Progress(onIteration);
      return new Result(mapper.runNative(w -> runEngine(w.handle(), spec, p)));
    }

    private static String clean(String v) {
      if (v == null || v.indexOf('\n') >= 0 || v.indexOf('\r') >= 0) {
        throw new IllegalArgumentException("bad K-means argument: " + v);
      }
      return v;
    }
  }

  /**
   * The engine's K-means loop on {@code worker} as described by {@code spec} ({@code key=value}
   * lines, see {@link Builder}); {@code progress} (may be null) gets {@code iteration(int, double,
   * double, double, double)} after every iteration. Returns the encoded outcome (see {@link Result}).
   * The native is in {@code rust/harp-jni/src/kmeans.rs}; the library is loaded by then (the
   * worker exists).
   */
  private static native double[] runEngine(long worker, String spec, Object progress);

  /** The object the native side calls after every iteration. */
  static final class Progress {
    private final Consumer<Iteration> c;

    Progress(Consumer<Iteration> c) {
      this.c = c;
    }

    void iteration(int i, double inertia, double computeSeconds, double commSeconds, double distances) {
      c.accept(new Iteration(i, inertia, computeSeconds, commSeconds, distances));
    }
  }
}
