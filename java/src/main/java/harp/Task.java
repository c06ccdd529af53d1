package harp;

/**
 * The work of one scheduler thread ({@link DynamicScheduler}, {@link StaticScheduler}): one
 * object per thread, so its fields are that thread's state (partial sums, a random generator)
 * for the scheduler's life.
 */
@FunctionalInterface
public interface Task<I, O> {
  O run(I input) throws Exception;
}
