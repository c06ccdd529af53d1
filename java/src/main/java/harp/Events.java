package harp;

import java.nio.ByteBuffer;

/**
 * The engine's events for a {@link Worker} (natives in {@code rust/harp-jni/src/events.rs}).
 * Internal: use {@link CollectiveMapper}'s {@code sendEvent}, {@code getEvent},
 * {@code runUntilQuiet}, … A direct buffer is sent from its own memory; an array is copied once.
 */
final class Events {
  static {
    Native.ensureLoaded();
  }

  private Events() {}

  static final int TO_ONE = 0;
  static final int TO_ALL = 1;
  static final int LABELED = 2;

  /** Sends {@code payload[offset, offset+length)}. */
  static int[] send(long worker, int mode, int dst, String label, int copies, byte[] payload, int offset, int length) {
    if (payload == null) {
      throw new NullPointerException("payload");
    }
    return send(worker, mode, dst, label, copies, payload, null, offset, length);
  }

  /** Sends the buffer's remaining bytes (its position and limit are left as they are). */
  static int[] send(long worker, int mode, int dst, String label, int copies, ByteBuffer payload) {
    if (payload.isDirect()) {
      return send(worker, mode, dst, label, copies, null, payload.slice(), 0, payload.remaining());
    }
    if (payload.hasArray()) {
      return send(worker, mode, dst, label, copies, payload.array(), null, payload.arrayOffset() + payload.position(),
          payload.remaining());
    }
    byte[] copy = new byte[payload.remaining()];
    payload.duplicate().get(copy);
    return send(worker, mode, dst, label, copies, copy, null, 0, copy.length);
  }

  /**
   * Receives the callbacks of {@link #runUntilQuiet} and keeps what the user's handler threw:
   * each returns null, or the description of the throwable (which ends the phase with an error).
   */
  static final class Adapter {
    private final EventHandler handler;
    Throwable thrown;

    Adapter(EventHandler handler) {
      this.handler = handler;
    }

    String event(int source, String label, byte[] payload) {
      try {
        handler.onEvent(new Event(source, label, payload));
        return null;
      } catch (Throwable t) {
        thrown = t;
        return t.toString();
      }
    }

    String idle() {
      try {
        handler.idle();
        return null;
      } catch (Throwable t) {
        thrown = t;
        return t.toString();
      }
    }

    /** 1: busy, 0: not, -1: the handler threw ({@link #describe} says what). */
    int busy() {
      try {
        return handler.busy() ? 1 : 0;
      } catch (Throwable t) {
        thrown = t;
        return -1;
      }
    }

    String describe() {
      return thrown == null ? null : thrown.toString();
    }
  }

  static Quiet runUntilQuiet(long worker, EventHandler handler) {
    Adapter a = new Adapter(handler);
    try {
      return new Quiet(runUntilQuiet(worker, a));
    } catch (HarpException e) {
      if (a.thrown != null && e.getCause() == null) {
        e.initCause(a.thrown);
      }
      throw e;
    }
  }

  /** mode {@link #TO_ONE}, {@link #TO_ALL} or {@link #LABELED}; returns the receivers when labeled. */
  static native int[] send(long worker, int mode, int dst, String label, int copies, byte[] array, ByteBuffer direct,
      int offset, int length);

  /** The next event, or null: without waiting ({@code timeoutMs} &lt; 0) or waiting that long. */
  static native Event take(long worker, long timeoutMs);

  static native int[] labelReceivers(String label, int copies, int workers);

  /** {@code [queued bytes now, most bytes ever queued from one sender]}. */
  static native long[] stats(long worker);

  /** {@code [events, handled, waves]}. */
  static native long[] runUntilQuiet(long worker, Adapter adapter);
}
