package harp;

/**
 * Counters of a worker's native memory pool (one per worker). In a steady state (every
 * iteration needs the same buffers) {@link #allocations()} stays flat and {@link #reuses()}
 * grows.
 */
public final class PoolStats {
  private final long allocations;
  private final long reuses;
  private final long releasesKept;
  private final long releasesFreed;
  private final long bytesHeld;
  private final long bytesInUse;

  /** Decodes the native side's {@code [allocations, reuses, kept, freed, held, in use]}. */
  PoolStats(long[] v) {
    if (v.length != 6) {
      throw new HarpException(HarpException.Kind.JNI, "pool statistics: expected 6 counters, got " + v.length);
    }
    allocations = v[0];
    reuses = v[1];
    releasesKept = v[2];
    releasesFreed = v[3];
    bytesHeld = v[4];
    bytesInUse = v[5];
  }

  /** Buffers obtained from the system allocator. */
  public long allocations() {
    return allocations;
  }

  /** Requests served from a free list (no allocation). */
  public long reuses() {
    return reuses;
  }

  /** Released buffers kept in a free list for reuse. */
  public long releasesKept() {
    return releasesKept;
  }

  /** Released buffers returned to the system (free list or byte budget full). */
  public long releasesFreed() {
    return releasesFreed;
  }

  /** Bytes kept in the free lists. */
  public long bytesHeld() {
    return bytesHeld;
  }

  /** Bytes of the buffers currently in use (partitions, messages in flight). */
  public long bytesInUse() {
    return bytesInUse;
  }

  @Override
  public String toString() {
    return "PoolStats{allocations=" + allocations + ", reuses=" + reuses + ", releasesKept=" + releasesKept
        + ", releasesFreed=" + releasesFreed + ", bytesHeld=" + bytesHeld + ", bytesInUse=" + bytesInUse + "}";
  }
}
