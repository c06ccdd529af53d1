package harp.mapred;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;

/** The engine's option table as the build copied it for Java (harp options --properties). */
class EngineOptionsTest {
  @Test
  void javaKeysAndDefaultsComeFromTheEngineTable() {
    assertEquals("harp.connect.timeout.ms", EngineOptions.javaKey("connect_timeout_ms"));
    assertEquals("harp.collective.timeout.ms", EngineOptions.javaKey("op_timeout_ms"));
    assertEquals("60000", EngineOptions.defaultValue("connect_timeout_ms"));
    Configuration conf = new Configuration(false);
    assertEquals(60_000, EngineOptions.millis(conf, "connect_timeout_ms"));
    conf.setLong("harp.connect.timeout.ms", 1234);
    assertEquals(1234, EngineOptions.millis(conf, "connect_timeout_ms"));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> EngineOptions.javaKey("no_such_option"));
    assertTrue(e.getMessage().contains("no_such_option"), e.getMessage());
  }
}
