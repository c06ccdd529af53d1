package harp.mapred;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.lang.reflect.InvocationTargetException;
import java.net.URL;
import java.net.URLClassLoader;
import java.util.Collections;
import java.util.Enumeration;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.protocol.ClientProtocol;
import org.apache.hadoop.mapreduce.protocol.ClientProtocolProvider;
import org.junit.jupiter.api.Test;

/** How the map-collective provider picks a cluster: java/ alone runs jobs locally, YARN plugs in. */
class ClusterSubmitterTest {
  private static final String SERVICES = "META-INF/services/" + ClusterSubmitter.class.getName();

  private static Configuration job(boolean withResourceManager) {
    Configuration conf = new Configuration();
    conf.set("mapreduce.framework.name", MapCollectiveClientProtocolProvider.FRAMEWORK);
    if (withResourceManager) {
      conf.set("yarn.resourcemanager.address", "rm.example:8032");
    }
    return conf;
  }

  private static ClusterSubmitter named(String name) {
    return new ClusterSubmitter() {
      @Override
      public String name() {
        return name;
      }

      @Override
      public ClientProtocol create(Configuration conf) {
        throw new UnsupportedOperationException();
      }
    };
  }

  @Test
  void theYarnSubmitterIsChosenOnlyWhenAResourceManagerIsConfigured() throws IOException {
    ClusterSubmitter yarn = named("yarn");
    List<ClusterSubmitter> found = List.of(named("other"), yarn);
    assertSame(yarn, MapCollectiveClientProtocolProvider.select(job(true), found));
    assertNull(MapCollectiveClientProtocolProvider.select(job(false), found));
    assertNull(MapCollectiveClientProtocolProvider.select(job(false), List.of()));
    Configuration local = job(true);
    local.setBoolean(MapCollectiveClientProtocolProvider.LOCAL, true);
    assertNull(MapCollectiveClientProtocolProvider.select(local, found));
  }

  /** A local job runs its workers as threads of this JVM: more than 256 is refused before any split is written. */
  @Test
  void aLocalJobWithTooManyWorkersIsRefusedNamingTheKey() throws IOException {
    Configuration conf = job(false);
    conf.setInt(MapCollectiveClientProtocolProvider.WORKERS, 1_000_000);
    IOException e = assertThrows(IOException.class, () -> new MapCollectiveClientProtocolProvider().create(conf));
    assertTrue(e.getMessage().startsWith("harp.workers = 1000000: a local map-collective job")
        && e.getMessage().contains("at most 256"), e.getMessage());
    conf.setInt(MapCollectiveClientProtocolProvider.WORKERS, 256);
    assertNotNull(new MapCollectiveClientProtocolProvider().create(conf));
  }

  /**
   * A local job's client looks at the job's status every 20 ms instead of Hadoop's 1 s (5 s
   * without progress output), so that the job's end is seen at once; a value the job sets stays.
   */
  @Test
  void aLocalJobIsPolledOftenUnlessTheJobSaysOtherwise() throws IOException {
    String progress = MapCollectiveClientProtocolProvider.PROGRESS_POLL;
    String completion = MapCollectiveClientProtocolProvider.COMPLETION_POLL;
    // A JobConf reads mapred-default.xml: Hadoop's defaults are there, and count as unset.
    Configuration conf = new org.apache.hadoop.mapred.JobConf(job(false));
    assertEquals(1000, conf.getInt(progress, 0));
    assertTrue(MapCollectiveClientProtocolProvider.onlyDefault(conf, progress));
    assertNotNull(new MapCollectiveClientProtocolProvider().create(conf));
    assertEquals(MapCollectiveClientProtocolProvider.LOCAL_POLL_MS, conf.getInt(progress, 0));
    assertEquals(MapCollectiveClientProtocolProvider.LOCAL_POLL_MS, conf.getInt(completion, 0));
    Configuration set = new org.apache.hadoop.mapred.JobConf(job(false));
    set.setInt(progress, 700);
    assertNotNull(new MapCollectiveClientProtocolProvider().create(set));
    assertEquals(700, set.getInt(progress, 0));
    assertEquals(MapCollectiveClientProtocolProvider.LOCAL_POLL_MS, set.getInt(completion, 0));
  }

  @Test
  void aResourceManagerWithoutTheYarnSubmitterIsAClearError() {
    IOException e = assertThrows(IOException.class,
        () -> MapCollectiveClientProtocolProvider.select(job(true), List.of(named("other"))));
    assertTrue(e.getMessage().contains("no YARN submitter") && e.getMessage().contains(SERVICES)
        && e.getMessage().contains("harp.local=true"), e.getMessage());
  }

  /** Loads harp.* classes itself (child first) and hides harp.yarn.* and its service entry. */
  static final class WithoutYarn extends URLClassLoader {
    WithoutYarn(URL jar) {
      super(new URL[] {jar}, ClusterSubmitterTest.class.getClassLoader());
    }

    @Override
    protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
      if (name.startsWith("harp.yarn.")) {
        throw new ClassNotFoundException(name + " is hidden");
      }
      if (!name.startsWith("harp.")) {
        return super.loadClass(name, resolve);
      }
      synchronized (getClassLoadingLock(name)) {
        Class<?> c = findLoadedClass(name);
        return c != null ? c : findClass(name);
      }
    }

    @Override
    public URL getResource(String name) {
      return name.equals(SERVICES) ? null : super.getResource(name);
    }

    @Override
    public Enumeration<URL> getResources(String name) throws IOException {
      return name.equals(SERVICES) ? Collections.emptyEnumeration() : super.getResources(name);
    }
  }

  @Test
  void localModeRunsWithoutTheYarnClasses() throws Exception {
    URL jar = MapCollectiveClientProtocolProvider.class.getProtectionDomain().getCodeSource().getLocation();
    try (WithoutYarn loader = new WithoutYarn(jar)) {
      assertThrows(ClassNotFoundException.class, () -> loader.loadClass("harp.yarn.YarnSubmitter"));
      Class<?> c = loader.loadClass(MapCollectiveClientProtocolProvider.class.getName());
      assertSame(loader, c.getClassLoader());
      ClientProtocolProvider p = (ClientProtocolProvider) c.getConstructor().newInstance();
      ClientProtocol local = p.create(job(false));
      assertNotNull(local);
      assertEquals("local", local.getNewJobID().getJtIdentifier().replaceAll("[0-9]", ""));
      IOException e = assertThrows(IOException.class, () -> p.create(job(true)));
      assertTrue(e.getMessage().contains("no YARN submitter"), e.getMessage());
    } catch (InvocationTargetException e) {
      throw (Exception) e.getCause();
    }
  }
}
