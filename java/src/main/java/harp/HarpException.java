package harp;

/**
 * A failure in the Harp-RS engine or at its boundary: a collective that failed (a peer died,
 * went silent or called another operation), bad input or arguments, a closed handle, or a Rust
 * panic. {@link #getKind()} says which, in a stable vocabulary shared with the engine; the rank,
 * the operation (collective, sequence number, label) and, for a panic, the Rust backtrace are
 * kept when known. When a {@link KvCombiner} threw, that exception is the {@link #getCause()
 * cause}.
 */
public class HarpException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** What failed. Each constant's {@link #wireName()} is the engine's name for it. */
  public enum Kind {
    /** A live peer did not send what a collective needs within the timeout. */
    TIMEOUT("timeout"),
    /** A peer sent nothing at all (not even heartbeats) for half the timeout. */
    SILENT("silent"),
    /** A peer's connection broke (it died, was killed or left the job). */
    PEER_LOST("peer-lost"),
    /** Two workers called different collectives (or algorithms) at the same position. */
    OP_MISMATCH("op-mismatch"),
    /** The worker failed earlier and refuses further collectives. */
    POISONED("poisoned"),
    /** Malformed bytes on the wire or a failed handshake. */
    PROTOCOL("protocol"),
    /** Start-up failed (connect, authentication, handshake). */
    STARTUP("startup"),
    /** Malformed input data (the file and line are in the message). */
    INPUT("input"),
    /** Partitions could not be combined, or a table operation was invalid. */
    DATA("data"),
    /** Bad arguments, options or names. */
    CONFIG("config"),
    /** An I/O operation of the engine failed. */
    IO("io"),
    /** A Rust panic (a bug): see {@link #getNativeBacktrace()}. */
    PANIC("panic"),
    /** A worker or table used after it was closed (or a handle that was never valid). */
    CLOSED("closed"),
    /** A JNI call itself failed. */
    JNI("jni"),
    /** Found by the Java side of the API, before or without the engine. */
    JAVA("java");

    private final String wireName;

    Kind(String wireName) {
      this.wireName = wireName;
    }

    /** The engine's name of this kind ({@code peer-lost}, …). */
    public String wireName() {
      return wireName;
    }

    /** The kind the engine calls {@code name}. */
    public static Kind fromWireName(String name) {
      for (Kind k : values()) {
        if (k.wireName.equals(name)) {
          return k;
        }
      }
      throw new IllegalArgumentException("unknown error kind '" + name + "'");
    }
  }

  private final Kind kind;
  private final int rank;
  private final String operation;
  private final long sequence;
  private final String label;
  private final String nativeBacktrace;

  /** A failure found by the Java side ({@link Kind#JAVA}) while {@code rank} ran {@code operation}. */
  public HarpException(String message, int rank, String operation) {
    this(Kind.JAVA, rank, operation, -1, "", message, "");
  }

  /** A failure of kind {@code kind} found by the Java side, outside any worker or operation. */
  public HarpException(Kind kind, String message) {
    this(kind, -1, "", -1, "", message, "");
  }

  /**
   * A failure of kind {@code kind} found by the Java side while worker {@code rank} ran
   * {@code operation} (e.g. {@link Kind#STARTUP} during the rendezvous).
   */
  public HarpException(Kind kind, int rank, String operation, String message) {
    this(kind, rank, operation, -1, "", message, "");
  }

  HarpException(Kind kind, int rank, String operation, long sequence, String label, String message,
      String nativeBacktrace) {
    super(message);
    this.kind = kind;
    this.rank = rank;
    this.operation = operation == null ? "" : operation;
    this.sequence = sequence;
    this.label = label == null ? "" : label;
    this.nativeBacktrace = nativeBacktrace == null ? "" : nativeBacktrace;
  }

  /** Called by the native side (harp-jni's errors.rs): the kind travels as its name. */
  HarpException(String kind, int rank, String operation, long sequence, String label, String message,
      String nativeBacktrace) {
    this(Kind.fromWireName(kind), rank, operation, sequence, label, message, nativeBacktrace);
  }

  /** What failed. */
  public Kind getKind() {
    return kind;
  }

  /** The rank of the worker that reported the failure, or -1 when unknown. */
  public int getRank() {
    return rank;
  }

  /** The collective that failed ({@code allreduce}, …, the engine's names), or "" when none. */
  public String getOperation() {
    return operation;
  }

  /** The failed collective's sequence number on its worker (1, 2, …), or -1 when unknown. */
  public long getSequence() {
    return sequence;
  }

  /** The label the caller gave the failed collective, or "" when none. */
  public String getLabel() {
    return label;
  }

  /** For {@link Kind#PANIC}: the Rust backtrace of the panic (else ""). */
  public String getNativeBacktrace() {
    return nativeBacktrace;
  }
}
