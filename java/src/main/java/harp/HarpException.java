package harp;

/**
 * A failure in the Harp-RS engine: a collective that failed (a peer died, went silent or called
 * another operation), bad input, or a Rust panic. Carries the worker's rank and the operation when
 * known.
 */
public class HarpException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final int rank;
  private final String operation;

  /** Decodes the native side's "rank TAB operation TAB message" form. */
  public HarpException(String encoded) {
    this(decodeMessage(encoded), decodeRank(encoded), decodeOp(encoded));
  }

  public HarpException(String message, int rank, String operation) {
    super(message);
    this.rank = rank;
    this.operation = operation == null ? "" : operation;
  }

  /** The rank of the worker that reported the failure, or -1 when unknown. */
  public int getRank() {
    return rank;
  }

  /** The collective that failed ("allreduce", …), or "" when none. */
  public String getOperation() {
    return operation;
  }

  private static String[] parts(String s) {
    String[] p = s == null ? new String[0] : s.split("\t", 3);
    return p.length == 3 ? p : null;
  }

  private static String decodeMessage(String s) {
    String[] p = parts(s);
    return p == null ? s : p[2];
  }

  private static int decodeRank(String s) {
    String[] p = parts(s);
    try {
      return p == null ? -1 : Integer.parseInt(p[0]);
    } catch (NumberFormatException e) {
      return -1;
    }
  }

  private static String decodeOp(String s) {
    String[] p = parts(s);
    return p == null ? "" : p[1];
  }
}
