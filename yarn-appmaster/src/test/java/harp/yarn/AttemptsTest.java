package harp.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.HashMap;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.junit.jupiter.api.Test;

/** Master attempts: how many, and workers of a restarted master resuming from the last checkpoint. */
class AttemptsTest {
  @Test
  void theMasterHasTwoAttemptsByDefault() {
    assertEquals(2, LaunchSpec.maxAttempts(new Configuration(false)));
    Configuration c = new Configuration(false);
    c.setInt(LaunchSpec.AM_MAX_ATTEMPTS, 4);
    assertEquals(4, LaunchSpec.maxAttempts(c));
    c.setInt(LaunchSpec.AM_MAX_ATTEMPTS, 0);
    assertThrows(IllegalArgumentException.class, () -> LaunchSpec.maxAttempts(c));
  }

  @Test
  void workersOfALaterAttemptResumeWhenTheJobHasCheckpoints() {
    Configuration c = new Configuration(false);
    c.set("harp.checkpoint.dir", "hdfs://nn/out/_checkpoints");
    assertFalse(LaunchSpec.resumeOnRestart(c, null));
    assertFalse(LaunchSpec.resumeOnRestart(c, "1"));
    assertFalse(LaunchSpec.resumeOnRestart(c, "x"));
    assertNull(c.get("harp.resume"));
    assertTrue(LaunchSpec.resumeOnRestart(c, "2"));
    assertTrue(c.getBoolean("harp.resume", false));
    // Without checkpoints there is nothing to resume from: the job starts over.
    Configuration none = new Configuration(false);
    assertFalse(LaunchSpec.resumeOnRestart(none, "3"));
    assertNull(none.get("harp.resume"));
  }

  @Test
  void theMasterTellsItsWorkersItsAttempt() throws Exception {
    Configuration c = new Configuration(false);
    ContainerLaunchContext first = LaunchSpec.worker(c, new HashMap<>(), 0, List.of(0L), "am:1", 512, null);
    assertEquals("1", first.getEnvironment().get(LaunchSpec.ENV_AM_ATTEMPT));
    c.setInt(LaunchSpec.AM_ATTEMPT, 2);
    ContainerLaunchContext second = LaunchSpec.worker(c, new HashMap<>(), 1, List.of(0L), "am:1", 512, null);
    assertEquals("2", second.getEnvironment().get(LaunchSpec.ENV_AM_ATTEMPT));
  }
}
