package harp;

import java.nio.ByteBuffer;

/**
 * An event received from a worker (possibly this one): its sender, its label (null when it was
 * not sent labeled) and its payload. Events from one sender arrive in the order it sent them.
 * The payload was copied once from the engine's receive buffer into this event's own array.
 */
public final class Event {
  private final int source;
  private final String label;
  private final byte[] payload;

  /** Called by the native side ({@code rust/harp-jni/src/events.rs}). */
  Event(int source, String label, byte[] payload) {
    this.source = source;
    this.label = label;
    this.payload = payload;
  }

  /** The sender's rank. */
  public int getSource() {
    return source;
  }

  /** The label it was sent with ({@link CollectiveMapper#sendLabeled}), or null. */
  public String getLabel() {
    return label;
  }

  /** The payload: this event's own array (not a copy). */
  public byte[] getBytes() {
    return payload;
  }

  /** The payload as a read-only buffer over {@link #getBytes()} (position 0, no copy). */
  public ByteBuffer getPayload() {
    return ByteBuffer.wrap(payload).asReadOnlyBuffer();
  }

  @Override
  public String toString() {
    return "Event(from " + source + (label == null ? "" : ", label '" + label + "'") + ", " + payload.length + " bytes)";
  }
}
