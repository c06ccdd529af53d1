package harp;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Loads the Harp-RS engine (library {@code harp_jni}) and starts workers; also the vocabularies
 * shared with the engine and the self-test of the error mapping. Internal: use
 * {@link CollectiveMapper} and {@link Table}. Every method throws {@link HarpException} on
 * failure. The natives of each class are in {@code rust/harp-jni/src/} (this one's in
 * {@code native.rs}); the contract of each method is in {@code docs/jni-contract.md}.
 *
 * <p>Loading order: the system property {@code harp.native.lib} (an absolute path), then
 * {@code java.library.path}, then {@code /native/libharp_jni.so} inside the jar (extracted to a
 * temporary file).
 */
public final class Native {
  private Native() {}

  static {
    load();
  }

  /** Loads the library if it is not yet loaded (classes with natives call it first). */
  static void ensureLoaded() {
    // The static initializer did the work.
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

  /**
   * Connects, authenticates and handshakes; consumes the listener; returns a worker handle (wrap
   * it in a {@link Worker}).
   */
  static native long start(long listener, String hosts, int rank, String job, byte[] secret,
      String options, String log);

  /**
   * The engine's names of one vocabulary, one per line: {@code dtype}, {@code combiner},
   * {@code broadcast}, {@code allreduce}, {@code reduce} (the algorithms offered to Java),
   * {@code error-kind}, {@code collective}.
   */
  static native String names(String vocabulary);

  /** {@code name} read by the engine's parser for {@code vocabulary} and printed back by the engine. */
  static native String canonicalName(String vocabulary, String name);

  /**
   * For tests of the error mapping: 0 an engine error, 1 a panic, 2 returns 2, 3 a communication
   * error of rank 3 in {@code allreduce #12 'sums'}.
   */
  static native int selfTest(int kind);
}
