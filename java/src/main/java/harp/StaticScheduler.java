package harp;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * Harp's {@code StaticScheduler} (the engine's {@code harp::sched::Static}): one persistent
 * thread per {@link Task}, each with an input and an output queue of its own. The caller says
 * which thread runs an input ({@link #submit}) and takes each thread's results in that thread's
 * input order ({@link #waitForOutput}). {@link #close} lets the threads finish the queued inputs
 * and ends them.
 */
public final class StaticScheduler<I, O> implements AutoCloseable {
  private static final Object STOP = new Object();
  private final List<BlockingQueue<Object>> inputs = new ArrayList<>();
  private final List<BlockingQueue<DynamicScheduler.Output<O>>> outputs = new ArrayList<>();
  private final List<Thread> threads = new ArrayList<>();
  private final long[] pending;

  /** One thread per task. */
  public StaticScheduler(List<? extends Task<I, O>> tasks) {
    if (tasks.isEmpty()) {
      throw new IllegalArgumentException("a scheduler needs at least one task");
    }
    pending = new long[tasks.size()];
    for (int t = 0; t < tasks.size(); t++) {
      BlockingQueue<Object> in = new LinkedBlockingQueue<>();
      BlockingQueue<DynamicScheduler.Output<O>> out = new LinkedBlockingQueue<>();
      inputs.add(in);
      outputs.add(out);
      Task<I, O> task = tasks.get(t);
      Thread th = new Thread(() -> serve(task, in, out), "harp-static-" + t);
      th.setDaemon(true);
      threads.add(th);
      th.start();
    }
  }

  @SuppressWarnings("unchecked")
  private void serve(Task<I, O> task, BlockingQueue<Object> in, BlockingQueue<DynamicScheduler.Output<O>> out) {
    for (long i = 0;; i++) {
      Object x;
      try {
        x = in.take();
      } catch (InterruptedException e) {
        return;
      }
      if (x == STOP) {
        return;
      }
      try {
        out.add(new DynamicScheduler.Output<>(i, task.run((I) x), null));
      } catch (Throwable e) {
        out.add(new DynamicScheduler.Output<>(i, null, e));
      }
    }
  }

  /** The number of threads (tasks). */
  public int numTasks() {
    return threads.size();
  }

  /** Queues {@code input} for task {@code task}. */
  public synchronized void submit(int task, I input) {
    check(task);
    inputs.get(task).add(input);
    pending[task]++;
  }

  /** Whether task {@code task} has a result ready to take without waiting. */
  public boolean hasOutput(int task) {
    check(task);
    return !outputs.get(task).isEmpty();
  }

  /**
   * Task {@code task}'s next result, in its input order; {@code null} when it has none pending.
   * Blocks until it completes; a failure is rethrown.
   */
  public O waitForOutput(int task) throws InterruptedException {
    synchronized (this) {
      check(task);
      if (pending[task] == 0) {
        return null;
      }
      pending[task]--;
    }
    return outputs.get(task).take().get();
  }

  private void check(int task) {
    if (task < 0 || task >= threads.size()) {
      throw new IllegalArgumentException("task " + task + ": the scheduler has " + threads.size() + " tasks");
    }
  }

  /** Lets the threads finish the queued inputs, then ends them. */
  @Override
  public void close() {
    for (BlockingQueue<Object> in : inputs) {
      in.add(STOP);
    }
    DynamicScheduler.joinAll(threads);
  }
}
