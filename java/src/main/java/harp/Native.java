package harp;

import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * The native methods of the Harp-RS engine (library {@code harp_jni}). Internal: use
 * {@link CollectiveMapper} and {@link Table}. Every method throws {@link HarpException} on
 * failure; handles are checked on the native side (a closed or stale handle is an exception).
 *
 * <p>Loading order: the system property {@code harp.native.lib} (an absolute path), then
 * {@code java.library.path}, then {@code /native/libharp_jni.so} inside the jar (extracted to a
 * temporary file). The contract of each method is in {@code docs/jni-contract.md}.
 */
public final class Native {
  private Native() {}

  static final int OP_BARRIER = 1, OP_BROADCAST = 2, OP_REDUCE = 3, OP_GATHER = 4, OP_SCATTER = 5,
      OP_ALLGATHER = 6, OP_ALLREDUCE = 7, OP_REDUCE_SCATTER = 8, OP_REGROUP = 9, OP_PUSH = 10,
      OP_PULL = 11, OP_ROTATE = 12;

  static {
    load();
  }

  private static void load() {
    String explicit = System.getProperty("harp.native.lib");
    if (explicit != null && !explicit.isEmpty()) {
      System.load(explicit);
      return;
    }
    try {
      System.loadLibrary("harp_jni");
      return;
    } catch (UnsatisfiedLinkError notOnPath) {
      // fall through to the copy inside the jar
    }
    String resource = "/native/libharp_jni.so";
    try (InputStream in = Native.class.getResourceAsStream(resource)) {
      if (in == null) {
        throw new UnsatisfiedLinkError("Harp-RS native library not found: looked for harp.native.lib (unset), "
            + "libharp_jni.so in java.library.path=" + System.getProperty("java.library.path")
            + ", and " + resource + " inside the jar");
      }
      Path tmp = Files.createTempFile("libharp_jni", ".so");
      tmp.toFile().deleteOnExit();
      Files.copy(in, tmp, StandardCopyOption.REPLACE_EXISTING);
      System.load(tmp.toAbsolutePath().toString());
    } catch (IOException e) {
      throw new UnsatisfiedLinkError("cannot extract " + resource + ": " + e);
    }
  }

  /**
   * Binds host:0 with the socket options in {@code options} ({@code key=value} lines, see
   * {@link Session#options}); returns a listener handle.
   */
  static native long listen(String host, String options);

  static native int listenerPort(long listener);

  /** Connects, authenticates and handshakes; consumes the listener; returns a worker handle. */
  static native long start(long listener, String hosts, int rank, String job, byte[] secret,
      String options, String log);

  static native void close(long worker);

  static native void abort(long worker, String reason);

  static native int rank(long worker);

  static native int size(long worker);

  static native long poolStats(long worker);

  static native long tableNew(long worker, int combiner);

  static native ByteBuffer tableCreate(long table, int pid, int dtype, int length);

  static native ByteBuffer tableGet(long table, int pid);

  static native int tableType(long table, int pid);

  static native int[] tableIds(long table);

  static native boolean tableRemove(long table, int pid);

  static native void tableClear(long table);

  static native void tableFree(long table);

  static native void collective(long worker, int op, String label, long table, long table2, int root,
      int algo, int total, int[] ids, int[] owners);

  /**
   * Runs the engine's K-means loop on {@code worker} as described by {@code spec} ({@code key=value}
   * lines, see {@link KMeans}); {@code progress} (may be null) gets {@code iteration(int, double,
   * double, double)} after every iteration. Returns the encoded outcome (see {@link KMeans.Result}).
   */
  static native double[] kmeans(long worker, String spec, Object progress);

  /** For tests of the error mapping: 0 engine error, 1 panic, 2 returns 2. */
  static native int selfTest(int kind);
}
