package harp.yarn;

import java.io.IOException;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * A default file system that is not the local one, as HDFS is on a real cluster: scheme
 * {@code elsewhere}, absolute paths on the local disk, but the working directory is
 * {@code /user/<name>} (like HDFS's home directory), not the process's current directory. A
 * relative path such as {@code job.split} therefore does NOT name the container's localized
 * file, which is the mistake the fake cluster must catch.
 */
public class ElsewhereFileSystem extends RawLocalFileSystem {
  public static final String SCHEME = "elsewhere";
  private static final URI NAME = URI.create(SCHEME + ":///");

  /** Makes {@code conf}'s default file system this one. */
  public static void install(Configuration conf) {
    conf.set("fs." + SCHEME + ".impl", ElsewhereFileSystem.class.getName());
    conf.setBoolean("fs." + SCHEME + ".impl.disable.cache", true);
    conf.set("fs.defaultFS", NAME.toString());
  }

  @Override
  public URI getUri() {
    return NAME;
  }

  @Override
  public String getScheme() {
    return SCHEME;
  }

  @Override
  public void initialize(URI uri, Configuration conf) throws IOException {
    super.initialize(uri, conf);
    setWorkingDirectory(new Path("/user/" + System.getProperty("user.name") + "/harp-elsewhere-home"));
  }

  @Override
  protected Path getInitialWorkingDirectory() {
    return new Path("/user/" + System.getProperty("user.name") + "/harp-elsewhere-home");
  }
}
