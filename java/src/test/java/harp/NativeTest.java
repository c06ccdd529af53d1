package harp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** The JNI boundary without Hadoop: error mapping, handles, tables over native memory. */
class NativeTest {
  private long worker;

  @BeforeEach
  void startSingleWorker() {
    String options = "op_timeout_ms=10000\nconnect_timeout_ms=10000\nsocket_buffer=262144\n";
    long l = Native.listen("127.0.0.1", options);
    int port = Native.listenerPort(l);
    worker = Native.start(l, "127.0.0.1:" + port + "\n", 0, "native-test", "s".getBytes(StandardCharsets.UTF_8),
        options, "warn|native-test");
  }

  @Test
  void badEngineOptionsAreExceptionsNamingTheOption() {
    HarpException e = assertThrows(HarpException.class, () -> Native.listen("127.0.0.1", "chunk=lots"));
    assertTrue(e.getMessage().contains("option chunk") && e.getMessage().contains("lots"), e.getMessage());
    e = assertThrows(HarpException.class, () -> Native.listen("127.0.0.1", "tcp_congestion=nosuchcc"));
    assertTrue(e.getMessage().contains("nosuchcc") && e.getMessage().contains("allowed here"), e.getMessage());
    e = assertThrows(HarpException.class, () -> Native.listen("127.0.0.1", "socket_bufer=1"));
    assertTrue(e.getMessage().contains("unknown option"), e.getMessage());
  }

  @Test
  void jobConfigurationBecomesEngineOptions() {
    org.apache.hadoop.conf.Configuration conf = new org.apache.hadoop.conf.Configuration(false);
    conf.set("harp.collective.timeout.ms", "5000");
    conf.set("harp.socket.buffer.bytes", "1048576");
    conf.set("harp.tcp.congestion", " reno ");
    conf.set("harp.workers", "3");
    conf.set("mapreduce.job.maps", "3");
    String o = Session.options(conf);
    assertEquals("harp.collective.timeout.ms=5000\nharp.socket.buffer.bytes=1048576\nharp.tcp.congestion=reno\n"
        + "harp.workers=3\n", o);
    // The engine takes its keys and ignores the Java layer's.
    long l = Native.listen("127.0.0.1", o);
    long w = Native.start(l, "127.0.0.1:" + Native.listenerPort(l) + "\n", 0, "options-test",
        "s".getBytes(StandardCharsets.UTF_8), o, "warn|options-test");
    Native.close(w);
    conf.set("harp.broadcast.chunk.bytes", "lots");
    HarpException e = assertThrows(HarpException.class, () -> Native.listen("127.0.0.1", Session.options(conf)));
    assertTrue(e.getMessage().contains("harp.broadcast.chunk.bytes") && e.getMessage().contains("lots"),
        e.getMessage());
  }

  @AfterEach
  void stop() {
    if (worker != 0) {
      Native.close(worker);
    }
  }

  @Test
  void rustErrorsBecomeHarpExceptionsWithTheirMessage() {
    HarpException e = assertThrows(HarpException.class, () -> Native.selfTest(0));
    assertEquals("engine error number 42", e.getMessage());
    assertEquals(-1, e.getRank());
    assertEquals(2, Native.selfTest(2));
  }

  @Test
  void rustPanicsBecomeHarpExceptionsAndKeepTheFormattedMessage() {
    HarpException e = assertThrows(HarpException.class, () -> Native.selfTest(1));
    assertTrue(e.getMessage().contains("deliberate panic number 7"), e.getMessage());
    // The JVM is fine afterwards.
    assertEquals(2, Native.selfTest(2));
  }

  @Test
  void closedAndStaleHandlesAreExceptionsNotCrashes() {
    long t = Native.tableNew(worker, Combiner.SUM.code);
    Native.tableFree(t);
    HarpException e = assertThrows(HarpException.class, () -> Native.tableFree(t));
    assertTrue(e.getMessage().contains("closed"), e.getMessage());
    assertThrows(HarpException.class, () -> Native.tableIds(t));
    assertThrows(HarpException.class, () -> Native.rank(123456789L));
    long w = worker;
    Native.close(w);
    worker = 0;
    assertThrows(HarpException.class, () -> Native.close(w));
    assertThrows(HarpException.class, () -> Native.tableNew(w, 0));
  }

  @Test
  void tablesAreViewsOfNativeMemory() {
    Table t = new Table(worker, Combiner.SUM);
    Partition p = t.create(3, DType.F64, 4);
    p.doubles().put(new double[] {1, 2, 3, 4});
    assertArrayEquals(new double[] {1, 2, 3, 4}, t.get(3).toDoubleArray());
    t.put(1, new int[] {7, 8});
    assertArrayEquals(new int[] {1, 3}, t.ids());
    assertEquals(DType.I32, t.get(1).type());
    assertNull(t.get(99));
    // A view is stale once the table changes.
    Partition old = t.get(3);
    t.remove(1);
    IllegalStateException stale = assertThrows(IllegalStateException.class, old::doubles);
    assertTrue(stale.getMessage().contains("stale"));
    assertThrows(IllegalStateException.class, () -> t.get(3).ints());
    t.close();
    assertThrows(IllegalStateException.class, t::close);
    assertThrows(IllegalStateException.class, () -> t.get(3));
  }

  @Test
  void aSingleWorkerRunsEveryCollective() {
    Table t = new Table(worker, Combiner.SUM);
    t.put(0, new double[] {1.5, 2.5});
    Native.collective(worker, Native.OP_ALLREDUCE, "one", t.handle(), 0, 0, 0, 0, null, null);
    Native.collective(worker, Native.OP_BROADCAST, "one", t.handle(), 0, 0, 1, 0, null, null);
    Native.collective(worker, Native.OP_BARRIER, "one", 0, 0, 0, 0, 0, null, null);
    assertArrayEquals(new double[] {1.5, 2.5}, t.get(0).toDoubleArray());
    HarpException e = assertThrows(HarpException.class,
        () -> Native.collective(worker, Native.OP_BROADCAST, "bad-root", t.handle(), 0, 5, 1, 0, null, null));
    assertTrue(e.getMessage().contains("root 5"), e.getMessage());
    t.close();
  }
}
