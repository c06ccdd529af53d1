package harp;

/**
 * A collective started without blocking ({@code rotateStart}, {@code allreduceStart}, … of
 * {@link CollectiveMapper}; the engine's {@code harp::Pending}). The operation runs on the
 * worker's progress thread while the caller computes; {@link #get} waits for it and returns its
 * table, {@link #test} says whether it is complete without blocking, {@link #close} waits and
 * discards the result (try-with-resources). Like a {@code CompletableFuture}: {@link #isDone} is
 * {@link #test}, {@link #join} is {@link #get}.
 *
 * <p>Rules (docs/java-guide.md, "Non-blocking collectives"): operations complete in the order
 * they were started; every worker starts them in the same order as it would call the blocking
 * ones; a blocking collective first waits for every started one. The tables of a started
 * operation belong to it until {@code get} or {@code close}: they read as empty meanwhile, and
 * after a failed operation they stay empty. A failure is a {@link HarpException}, thrown by
 * {@code get}, as the blocking call throws it; a dead or silent peer fails every pending
 * operation of every worker within the timeout, naming it.
 */
public final class Pending<T> implements AutoCloseable {
  static {
    Native.ensureLoaded();
  }

  private long handle;
  private final T value;
  private final Table[] tables;
  private HarpException error;

  Pending(long handle, T value, Table... tables) {
    this.handle = handle;
    this.value = value;
    this.tables = tables;
  }

  /** Whether the operation is complete (then {@link #get} returns at once). Never blocks. */
  public synchronized boolean test() {
    return handle == 0 || test(handle);
  }

  /** {@link #test}. */
  public boolean isDone() {
    return test();
  }

  /**
   * Waits until the operation is complete and returns its table (for push the global table, for
   * pull the local one; {@code null} for a barrier). Throws the operation's failure, again on
   * every later call.
   */
  public synchronized T get() {
    finish(false);
    if (error != null) {
      throw error;
    }
    return value;
  }

  /** {@link #get}. */
  public T join() {
    return get();
  }

  /** Waits for the operation and discards its result (a failure is not thrown). */
  @Override
  public synchronized void close() {
    finish(true);
  }

  private void finish(boolean discard) {
    long h = handle;
    if (h == 0) {
      return;
    }
    handle = 0;
    try {
      finish(h, discard);
    } catch (HarpException e) {
      error = e;
    } finally {
      for (Table t : tables) {
        t.changed();
      }
    }
  }

  static native boolean test(long handle);

  static native void finish(long handle, boolean discard);
}
