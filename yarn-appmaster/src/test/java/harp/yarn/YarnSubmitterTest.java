package harp.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.InputStream;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The client's choices that do not need a cluster. */
class YarnSubmitterTest {
  /** The jar on the test classpath that holds our classes (target/java/harp-rs-examples.jar). */
  static File harpJar() throws Exception {
    for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
      File f = new File(e);
      if (f.isFile() && f.getName().endsWith(".jar")) {
        try (JarFile j = new JarFile(f)) {
          if (j.getEntry("harp/yarn/AppMaster.class") != null) {
            return f;
          }
        }
      }
    }
    throw new AssertionError("no jar with harp/yarn/AppMaster.class on the classpath");
  }

  /**
   * Under {@code hadoop jar}, RunJar unpacks the job jar and puts the directory first on the
   * classpath, then the jar: our classes load from the directory, yet the jar must be found.
   */
  @Test
  void theJarIsFoundWhenRunJarLoadsOurClassesFromTheUnpackedDirectory(@TempDir Path tmp) throws Exception {
    File jar = harpJar();
    Path unjar = Files.createDirectories(tmp.resolve("hadoop-unjar123"));
    try (JarFile j = new JarFile(jar)) {
      for (JarEntry e : java.util.Collections.list(j.entries())) {
        Path to = unjar.resolve(e.getName());
        if (e.isDirectory()) {
          Files.createDirectories(to);
        } else {
          Files.createDirectories(to.getParent());
          try (InputStream in = j.getInputStream(e)) {
            Files.copy(in, to);
          }
        }
      }
    }
    List<URL> urls = new ArrayList<>();
    urls.add(unjar.toUri().toURL());
    urls.add(jar.toURI().toURL());
    for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
      if (!new File(e).equals(jar)) {
        urls.add(new File(e).toURI().toURL());
      }
    }
    try (URLClassLoader runJar = new URLClassLoader(urls.toArray(new URL[0]), ClassLoader.getPlatformClassLoader())) {
      Class<?> am = Class.forName("harp.yarn.AppMaster", false, runJar);
      assertEquals(unjar.toFile().getCanonicalFile(),
          new File(am.getProtectionDomain().getCodeSource().getLocation().toURI()).getCanonicalFile(),
          "the class must come from the unpacked directory, as under RunJar");
      var m = Class.forName("harp.yarn.YarnSubmitter", false, runJar).getDeclaredMethod("ourJar");
      m.setAccessible(true);
      File found = (File) m.invoke(null);
      assertEquals(jar.getCanonicalFile(), found.getCanonicalFile());
    }
  }

  @Test
  void aClasspathWithoutOurJarIsAClearError(@TempDir Path tmp) throws Exception {
    Path dir = Files.createDirectories(tmp.resolve("classes/harp/yarn"));
    try (InputStream in = AppMaster.class.getResourceAsStream("AppMaster.class")) {
      Files.copy(in, dir.resolve("AppMaster.class"));
    }
    try (URLClassLoader l = new URLClassLoader(new URL[] {tmp.resolve("classes").toUri().toURL()}, null)) {
      Class<?> am = Class.forName("harp.yarn.AppMaster", false, l);
      java.io.IOException e = org.junit.jupiter.api.Assertions.assertThrows(java.io.IOException.class,
          () -> YarnSubmitter.containingJar(am));
      assertTrue(e.getMessage().contains("no jar on the classpath contains the Harp-RS classes"), e.getMessage());
    }
  }
}
