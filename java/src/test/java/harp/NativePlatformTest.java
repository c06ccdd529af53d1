package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/** Which native library the jar loads on which platform, and the error on the others. */
class NativePlatformTest {
  @Test
  void linuxOnX86AndArmPicksTheJarsLibrary() {
    assertEquals("linux-x86_64", Native.platform("Linux", "amd64"));
    assertEquals("linux-x86_64", Native.platform("Linux", "x86_64"));
    assertEquals("linux-aarch64", Native.platform("Linux", "aarch64"));
    assertEquals("linux-aarch64", Native.platform("Linux", "arm64"));
    assertEquals("/native/linux-aarch64/libharp_jni.so", Native.resource("linux-aarch64"));
  }

  @Test
  void otherPlatformsHaveNone() {
    assertNull(Native.platform("Linux", "riscv64"));
    assertNull(Native.platform("Linux", "ppc64le"));
    assertNull(Native.platform("Linux", "x86"));
    assertNull(Native.platform("Mac OS X", "aarch64"));
    assertNull(Native.platform("Windows 10", "amd64"));
    assertNull(Native.platform(null, null));
    String m = Native.unsupported("Mac OS X", "aarch64");
    assertTrue(m.contains("os.name=Mac OS X") && m.contains("os.arch=aarch64"), m);
    assertTrue(m.contains("linux-x86_64, linux-aarch64") && m.contains("harp.native.lib"), m);
  }

  @Test
  void theSelfCheckRunsHere() {
    String ok = SelfCheck.run();
    assertTrue(ok.startsWith("ok " + Native.platform(System.getProperty("os.name"), System.getProperty("os.arch"))),
        ok);
  }

  /** A JVM that reports another architecture gets one clear message, not a crash or a wrong library. */
  @Test
  void aJvmOnAnUnsupportedPlatformFailsNamingIt() throws Exception {
    File jar = new File(Native.class.getProtectionDomain().getCodeSource().getLocation().toURI());
    Path empty = Files.createTempDirectory("no-native");
    Process p = new ProcessBuilder(System.getProperty("java.home") + File.separator + "bin" + File.separator + "java",
        "-Dos.arch=riscv64", "-Djava.library.path=" + empty, "-cp", jar.getPath(), "harp.SelfCheck")
        .redirectErrorStream(true).start();
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (InputStream in = p.getInputStream()) {
      byte[] b = new byte[8192];
      for (int n; (n = in.read(b)) > 0;) {
        out.write(b, 0, n);
      }
    }
    assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the child JVM did not end");
    String said = new String(out.toByteArray(), StandardCharsets.UTF_8);
    assertEquals(1, p.exitValue(), said);
    assertTrue(said.contains("no native library for this platform") && said.contains("os.arch=riscv64")
        && said.contains("the jar carries linux-x86_64, linux-aarch64"), said);
    Files.delete(empty);
  }
}
