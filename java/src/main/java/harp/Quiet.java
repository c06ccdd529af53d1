package harp;

/**
 * What {@link CollectiveMapper#runUntilQuiet} returns: {@link #events} and {@link #waves} are the
 * same on every worker.
 */
public final class Quiet {
  private final long events;
  private final long handled;
  private final long waves;

  Quiet(long[] v) {
    this.events = v[0];
    this.handled = v[1];
    this.waves = v[2];
  }

  /** Events sent by all workers during this phase (= handled by all workers). */
  public long events() {
    return events;
  }

  /** Events this worker handled during this phase. */
  public long handled() {
    return handled;
  }

  /** Detection waves rank 0 ran during this phase. */
  public long waves() {
    return waves;
  }

  @Override
  public String toString() {
    return "Quiet(events " + events + ", handled " + handled + ", waves " + waves + ")";
  }
}
