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
 * {@code libharp_jni.so} in {@code java.library.path}, then the jar's own copy for this JVM's
 * platform, {@code /native/linux-x86_64/libharp_jni.so} or {@code /native/linux-aarch64/libharp_jni.so}
 * (extracted to a temporary file). On any other platform loading fails with a message naming the
 * platform found and the ones the jar carries.
 */
public final class Native {
  private Native() {}

  /** The platforms whose library the jar carries, as {@code os-arch} directory names under {@code /native/}. */
  static final String[] PLATFORMS = {"linux-x86_64", "linux-aarch64"};

  /** The file name of the library on every platform. */
  public static final String LIBRARY_FILE = "libharp_jni.so";

  /** The system property naming a library file to load instead of the jar's. */
  public static final String LIBRARY_PROPERTY = "harp.native.lib";

  /** Where the library was loaded from (a path, or the jar resource), for diagnostics. */
  static final String LOADED_FROM;

  static {
    LOADED_FROM = load();
  }

  /** Loads the library if it is not yet loaded (classes with natives call it first). */
  static void ensureLoaded() {
    // The static initializer did the work.
  }

  /**
   * The platform directory for a JVM's {@code os.name} and {@code os.arch} ({@code linux-x86_64},
   * {@code linux-aarch64}), or null when the jar carries no library for it.
   */
  static String platform(String osName, String osArch) {
    String os = osName == null ? "" : osName.trim().toLowerCase(java.util.Locale.ROOT);
    String arch = osArch == null ? "" : osArch.trim().toLowerCase(java.util.Locale.ROOT);
    if (!os.equals("linux")) {
      return null;
    }
    switch (arch) {
      case "amd64":
      case "x86_64":
      case "x86-64":
        return "linux-x86_64";
      case "aarch64":
      case "arm64":
        return "linux-aarch64";
      default:
        return null;
    }
  }

  /** The jar resource of the library for a platform of {@link #platform}. */
  static String resource(String platform) {
    return "/native/" + platform + "/" + LIBRARY_FILE;
  }

  /** Why there is no library for this JVM: the platform found, the ones supported and the way out. */
  static String unsupported(String osName, String osArch) {
    return "Harp-RS has no native library for this platform: os.name=" + osName + ", os.arch=" + osArch
        + "; the jar carries " + String.join(", ", PLATFORMS) + " (glibc 2.17 or newer)"
        + "; set -D" + LIBRARY_PROPERTY + "=/path/to/" + LIBRARY_FILE + " to use a library built for it";
  }

  private static String load() {
    String explicit = System.getProperty(LIBRARY_PROPERTY);
    if (explicit != null && !explicit.isEmpty()) {
      System.load(explicit);
      return "-D" + LIBRARY_PROPERTY + "=" + explicit;
    }
    try {
      System.loadLibrary("harp_jni");
      return System.mapLibraryName("harp_jni") + " in java.library.path=" + System.getProperty("java.library.path");
    } catch (UnsatisfiedLinkError notOnPath) {
      // fall through to the copy inside the jar
    }
    String osName = System.getProperty("os.name");
    String osArch = System.getProperty("os.arch");
    String platform = platform(osName, osArch);
    if (platform == null) {
      throw new UnsatisfiedLinkError(unsupported(osName, osArch));
    }
    String resource = resource(platform);
    try (InputStream in = Native.class.getResourceAsStream(resource)) {
      if (in == null) {
        throw new UnsatisfiedLinkError("Harp-RS native library not found: looked for " + LIBRARY_PROPERTY + " (unset), "
            + LIBRARY_FILE + " in java.library.path=" + System.getProperty("java.library.path")
            + ", and " + resource + " inside the jar");
      }
      Path tmp = Files.createTempFile("libharp_jni", ".so");
      tmp.toFile().deleteOnExit();
      Files.copy(in, tmp, StandardCopyOption.REPLACE_EXISTING);
      System.load(tmp.toAbsolutePath().toString());
      return "the jar's " + resource;
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
   * {@code error-kind}, {@code collective}, {@code key}, {@code value}, {@code app-key},
   * {@code kmeans-assign} (K-means' assignment paths).
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
