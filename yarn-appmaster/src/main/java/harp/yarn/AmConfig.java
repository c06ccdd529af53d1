package harp.yarn;

import java.util.function.ToLongFunction;

/**
 * Configuration keys of a map-collective job on YARN (read by the application master), with
 * their defaults. Documented in docs/yarn.md.
 */
public final class AmConfig {
  public static final String WORKERS = "harp.workers";
  public static final String WORKER_MEMORY_MB = "harp.yarn.worker.memory.mb";
  public static final String WORKER_VCORES = "harp.yarn.worker.vcores";
  public static final String GANG_TIMEOUT_MS = "harp.yarn.gang.timeout.ms";
  public static final String WORKERS_PER_NODE = "harp.yarn.workers.per.node";
  public static final String LOG_LEVEL = "harp.log.level";
  public static final String FAILURE_GRACE_MS = "harp.yarn.failure.grace.ms";
  /** The engine's collective timeout, which also bounds the wait for a worker on a lost node. */
  public static final String COLLECTIVE_TIMEOUT_MS = "harp.collective.timeout.ms";

  /** Number of workers; 0 means one per input split group (the number of splits). */
  public final int workers;
  public final int memoryMb;
  public final int vcores;
  public final long gangTimeoutMs;
  /** At most this many workers on one node (1: one worker per node). */
  public final int workersPerNode;
  /**
   * After the first worker fails, how long the master waits for the others' endings before it
   * decides whom to blame (a killed worker's own ending may be reported after its peers' exits).
   */
  public final long failureGraceMs;
  /**
   * A worker whose NodeManager cannot be reached and that has not reported its result is failed
   * this long after the NodeManager was first found unreachable ({@link #COLLECTIVE_TIMEOUT_MS}).
   */
  public final long nodeLostMs;

  public AmConfig(int workers, int memoryMb, int vcores, long gangTimeoutMs, int workersPerNode) {
    this(workers, memoryMb, vcores, gangTimeoutMs, workersPerNode, 2_000);
  }

  public AmConfig(int workers, int memoryMb, int vcores, long gangTimeoutMs, int workersPerNode,
      long failureGraceMs) {
    this(workers, memoryMb, vcores, gangTimeoutMs, workersPerNode, failureGraceMs, 120_000);
  }

  public AmConfig(int workers, int memoryMb, int vcores, long gangTimeoutMs, int workersPerNode,
      long failureGraceMs, long nodeLostMs) {
    if (memoryMb <= 0 || vcores <= 0 || gangTimeoutMs <= 0 || workersPerNode <= 0 || workers < 0
        || failureGraceMs < 0 || nodeLostMs <= 0) {
      throw new IllegalArgumentException("bad map-collective settings: workers=" + workers + " memory=" + memoryMb
          + " vcores=" + vcores + " gang timeout=" + gangTimeoutMs + " workers per node=" + workersPerNode
          + " failure grace=" + failureGraceMs + " collective timeout=" + nodeLostMs);
    }
    this.nodeLostMs = nodeLostMs;
    this.workers = workers;
    this.memoryMb = memoryMb;
    this.vcores = vcores;
    this.gangTimeoutMs = gangTimeoutMs;
    this.workersPerNode = workersPerNode;
    this.failureGraceMs = failureGraceMs;
  }

  /** Reads the keys through {@code get} (a Hadoop Configuration's getLong, say). */
  public static AmConfig from(ToLongFunction<String[]> get) {
    return new AmConfig((int) get.applyAsLong(new String[] {WORKERS, "0"}),
        (int) get.applyAsLong(new String[] {WORKER_MEMORY_MB, "2048"}),
        (int) get.applyAsLong(new String[] {WORKER_VCORES, "1"}),
        get.applyAsLong(new String[] {GANG_TIMEOUT_MS, "120000"}),
        (int) get.applyAsLong(new String[] {WORKERS_PER_NODE, "1"}),
        get.applyAsLong(new String[] {FAILURE_GRACE_MS, "2000"}),
        get.applyAsLong(new String[] {COLLECTIVE_TIMEOUT_MS, "120000"}));
  }
}
