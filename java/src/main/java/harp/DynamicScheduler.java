package harp;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * Harp's {@code DynamicScheduler} (the engine's {@code harp::sched::Dynamic}): one persistent
 * thread per {@link Task}, all taking inputs from one queue; whichever thread is free runs the
 * next input. Results come back in completion order ({@link #waitForOutput}, with the input's
 * index) or in input order ({@link #runAll}). A task that throws yields a failed output for that
 * input; its thread goes on. {@link #close} lets the threads finish the queued inputs and ends
 * them.
 */
public final class DynamicScheduler<I, O> implements AutoCloseable {
  /** One input's result: its index (0, 1, … in submission order) and value or failure. */
  public static final class Output<O> {
    public final long index;
    private final O value;
    private final Throwable error;

    Output(long index, O value, Throwable error) {
      this.index = index;
      this.value = value;
      this.error = error;
    }

    /** Whether the task failed. */
    public boolean failed() {
      return error != null;
    }

    /** The value; a failure is rethrown (a checked one wrapped in a RuntimeException). */
    public O get() {
      if (error instanceof RuntimeException) {
        throw (RuntimeException) error;
      }
      if (error instanceof Error) {
        throw (Error) error;
      }
      if (error != null) {
        throw new RuntimeException(error);
      }
      return value;
    }
  }

  private static final Object STOP = new Object();
  private final BlockingQueue<Object[]> inputs = new LinkedBlockingQueue<>();
  private final BlockingQueue<Output<O>> outputs = new LinkedBlockingQueue<>();
  private final List<Thread> threads = new ArrayList<>();
  private long submitted;
  private long received;

  /** One thread per task. */
  public DynamicScheduler(List<? extends Task<I, O>> tasks) {
    if (tasks.isEmpty()) {
      throw new IllegalArgumentException("a scheduler needs at least one task");
    }
    for (int t = 0; t < tasks.size(); t++) {
      Task<I, O> task = tasks.get(t);
      Thread th = new Thread(() -> serve(task), "harp-dynamic-" + t);
      th.setDaemon(true);
      threads.add(th);
      th.start();
    }
  }

  @SuppressWarnings("unchecked")
  private void serve(Task<I, O> task) {
    while (true) {
      Object[] in;
      try {
        in = inputs.take();
      } catch (InterruptedException e) {
        return;
      }
      if (in[1] == STOP) {
        return;
      }
      long i = (Long) in[0];
      try {
        outputs.add(new Output<>(i, task.run((I) in[1]), null));
      } catch (Throwable e) {
        outputs.add(new Output<>(i, null, e));
      }
    }
  }

  /** Queues {@code input}; returns its index. */
  public synchronized long submit(I input) {
    inputs.add(new Object[] {submitted, input});
    return submitted++;
  }

  /** Queues every input, in order. */
  public void submitAll(Collection<? extends I> all) {
    for (I in : all) {
      submit(in);
    }
  }

  /** Whether a result is ready to take without waiting. */
  public boolean hasOutput() {
    return !outputs.isEmpty();
  }

  /** The number of submitted inputs whose results have not been taken. */
  public synchronized long pending() {
    return submitted - received;
  }

  /**
   * The next result to complete; {@code null} when every submitted input's result has been
   * taken. Blocks until one completes.
   */
  public Output<O> waitForOutput() throws InterruptedException {
    synchronized (this) {
      if (submitted == received) {
        return null;
      }
      received++;
    }
    return outputs.take();
  }

  /**
   * Runs every input and returns the results in input order; the first failure (in input order)
   * is rethrown once every input has run. Results not taken before are discarded.
   */
  @SuppressWarnings("unchecked")
  public List<O> runAll(List<? extends I> all) {
    try {
      while (waitForOutput() != null) {
        // discard
      }
      long first;
      synchronized (this) {
        first = submitted;
      }
      submitAll(all);
      Object[] slots = new Object[all.size()];
      for (Output<O> o; (o = waitForOutput()) != null;) {
        slots[(int) (o.index - first)] = o;
      }
      List<O> out = new ArrayList<>(all.size());
      for (Object s : slots) {
        out.add(((Output<O>) s).get());
      }
      return out;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RuntimeException(e);
    }
  }

  /** Lets the threads finish the queued inputs, then ends them. */
  @Override
  public void close() {
    for (int t = 0; t < threads.size(); t++) {
      inputs.add(new Object[] {-1L, STOP});
    }
    joinAll(threads);
  }

  /** Waits for every thread to end (an interrupt stops the wait). */
  static void joinAll(List<Thread> threads) {
    try {
      for (Thread th : threads) {
        th.join();
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
