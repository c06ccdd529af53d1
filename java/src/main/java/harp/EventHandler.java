package harp;

/**
 * What {@link CollectiveMapper#runUntilQuiet} calls on the mapper's own thread: {@link #onEvent}
 * for each event taken, and {@link #idle} whenever nothing is queued, before the worker counts as
 * idle. Both may send events ({@link CollectiveMapper#sendEvent} and the others), never call
 * collectives. Anything they throw fails {@code runUntilQuiet} on this worker and then on every
 * worker (the exception is the {@link HarpException}'s cause here).
 */
@FunctionalInterface
public interface EventHandler {
  /** Handles one event. */
  void onEvent(Event event) throws Exception;

  /**
   * Called when no event is queued, before this worker counts as idle: the place to send what
   * the handled events produced, batched. The worker is idle once this returns and nothing new
   * is queued.
   */
  default void idle() throws Exception {}

  /**
   * Whether the handler has work of its own left that no event brings (e.g. input still to read
   * in {@link #idle}, a part at a time): while it returns true, {@code runUntilQuiet} keeps
   * calling {@link #idle} (taking queued events in between) and the worker does not count as idle.
   * {@code idle} is called again only once this worker's held sends have gone (docs/events.md).
   */
  default boolean busy() throws Exception {
    return false;
  }
}
