package harp;

import java.nio.charset.StandardCharsets;

/**
 * Checks that the engine loads and works on this JVM and platform, without Hadoop:
 * {@code java -cp harp-rs.jar harp.SelfCheck}. Loads the native library as a job would
 * ({@link Native}), starts a one-worker job on loopback, allreduces a small table and checks the
 * result. Prints one line {@code ok PLATFORM …} and exits 0, or prints the error and exits 1.
 */
public final class SelfCheck {
  private SelfCheck() {}

  /** Runs the check; returns the {@code ok …} line or throws. */
  public static String run() {
    String platform = Native.platform(System.getProperty("os.name"), System.getProperty("os.arch"));
    String options = "op_timeout_ms=30000\nconnect_timeout_ms=30000\n";
    long listener = Native.listen("127.0.0.1", options);
    int port = Native.listenerPort(listener);
    try (Worker w = new Worker(Native.start(listener, "127.0.0.1:" + port + "\n", 0, "self-check",
        "harp-self-check-secret".getBytes(StandardCharsets.UTF_8), options, "warn|self-check"))) {
      Table t = w.newTable(Combiner.SUM);
      t.put(7, new double[] {1.5, -2.25, 1e300});
      w.allreduce(null, "self-check", t, Options.defaults());
      double[] got = t.get(7).toDoubleArray();
      if (got.length != 3 || got[0] != 1.5 || got[1] != -2.25 || got[2] != 1e300) {
        throw new IllegalStateException("allreduce on one worker changed the data: " + java.util.Arrays.toString(got));
      }
    }
    return "ok " + (platform == null ? "(platform not in the jar)" : platform) + " java " + System.getProperty("java.version")
        + " (" + System.getProperty("java.vm.name") + ", " + System.getProperty("os.arch") + "), library from "
        + Native.LOADED_FROM;
  }

  /** {@code java -cp harp-rs.jar harp.SelfCheck}. */
  public static void main(String[] args) {
    try {
      System.out.println(run());
    } catch (Throwable e) {
      System.out.println("failed: " + e);
      System.exit(1);
    }
  }
}
