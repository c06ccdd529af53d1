package harp.mapred;

import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;
import org.apache.hadoop.conf.Configuration;

/**
 * The engine's option table as the Java side sees it: each engine option's Java job key and
 * default, from {@code /harp/engine-options.properties}, which java/build.sh generates with
 * {@code harp options --properties} from the one table in rust/harp/src/config.rs (so no key or
 * default is repeated here). Options are named by their engine key ({@code connect_timeout_ms}).
 */
public final class EngineOptions {
  static final String RESOURCE = "/harp/engine-options.properties";
  private static final Properties TABLE = load();

  private EngineOptions() {}

  private static Properties load() {
    Properties p = new Properties();
    try (InputStream in = EngineOptions.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException(RESOURCE + " is missing from the classpath: build harp-rs.jar with java/build.sh");
      }
      p.load(in);
    } catch (IOException e) {
      throw new IllegalStateException("cannot read " + RESOURCE + ": " + e, e);
    }
    return p;
  }

  private static String entry(String engineKey, String what) {
    String v = TABLE.getProperty(engineKey + "." + what);
    if (v == null) {
      throw new IllegalArgumentException("the engine has no option " + engineKey + " (" + RESOURCE + ")");
    }
    return v;
  }

  /** The Java job key of the engine option {@code engineKey}. */
  public static String javaKey(String engineKey) {
    return entry(engineKey, "java");
  }

  /** The engine's default of {@code engineKey}, in the engine's unit (empty when unset). */
  public static String defaultValue(String engineKey) {
    return entry(engineKey, "default");
  }

  /** The value of a duration option in this job, in milliseconds (the engine's default if unset). */
  public static long millis(Configuration conf, String engineKey) {
    return harp.ConfNumbers.getLong(conf, javaKey(engineKey), Long.parseLong(defaultValue(engineKey)));
  }
}
