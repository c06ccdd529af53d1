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

/** The JNI boundary without Hadoop: engine options, tables over native memory, collectives. */
class NativeTest {
  private Worker worker;

  /** A one-worker job on loopback. */
  static Worker startSingleWorker(String job) {
    String options = "op_timeout_ms=10000\nconnect_timeout_ms=10000\nsocket_buffer=262144\n";
    long l = Native.listen("127.0.0.1", options);
    int port = Native.listenerPort(l);
    return new Worker(Native.start(l, "127.0.0.1:" + port + "\n", 0, job, "native-test-secret-16b".getBytes(StandardCharsets.UTF_8),
        options, "warn|" + job));
  }

  @BeforeEach
  void start() {
    worker = startSingleWorker("native-test");
  }

  @AfterEach
  void stop() {
    worker.close();
  }

  @Test
  void badEngineOptionsAreExceptionsNamingTheOption() {
    HarpException e = assertThrows(HarpException.class, () -> Native.listen("127.0.0.1", "chunk=lots"));
    assertTrue(e.getMessage().contains("option chunk") && e.getMessage().contains("lots"), e.getMessage());
    assertEquals(HarpException.Kind.CONFIG, e.getKind());
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
        "native-test-secret-16b".getBytes(StandardCharsets.UTF_8), o, "warn|options-test");
    new Worker(w).close();
    conf.set("harp.broadcast.chunk.bytes", "lots");
    HarpException e = assertThrows(HarpException.class, () -> Native.listen("127.0.0.1", Session.options(conf)));
    assertTrue(e.getMessage().contains("harp.broadcast.chunk.bytes") && e.getMessage().contains("lots"),
        e.getMessage());
  }

  @Test
  void tablesAreViewsOfNativeMemory() {
    Table t = worker.newTable(Combiner.SUM);
    Partition p = t.create(3, DType.F64, 4);
    p.doubles().put(new double[] {1, 2, 3, 4});
    assertArrayEquals(new double[] {1, 2, 3, 4}, t.get(3).toDoubleArray());
    t.put(1, new int[] {7, 8});
    assertArrayEquals(new int[] {1, 3}, t.ids());
    assertEquals(DType.I32, t.get(1).type());
    assertEquals(DType.F64, t.get(3).type());
    assertNull(t.get(99));
    // A view is stale once the table changes.
    Partition old = t.get(3);
    t.remove(1);
    IllegalStateException stale = assertThrows(IllegalStateException.class, old::doubles);
    assertTrue(stale.getMessage().contains("stale"));
    assertThrows(IllegalStateException.class, () -> t.get(3).ints());
    t.close();
  }

  @Test
  void keyValuePartitionsAreNotReadAsDenseArrays() {
    try (KeyValueTable kv = worker.newKeyValueTable(KeyType.STR, ValueType.scalar(DType.I64), Combiner.SUM, 1)) {
      kv.add("word", 3L);
      kv.flush();
      IllegalStateException e = assertThrows(IllegalStateException.class, () -> kv.table().get(0));
      assertTrue(e.getMessage().contains("partition 0 holds kv str") && e.getMessage().contains("KeyValueTable"),
          e.getMessage());
      assertNull(kv.table().get(1));
    }
  }

  /**
   * Entries added in many batches (more than one flush of the 1 MiB batch) wait in the engine,
   * combined, until the table is used: the sums are complete and exact, and a batch whose
   * partition meets one of another layout fails the next use with a data error naming it.
   */
  @Test
  void keyValueBatchesAreCombinedUntilTheTableIsUsed() {
    int keys = 50_000;
    try (KeyValueTable kv = worker.newKeyValueTable(KeyType.I64, ValueType.scalar(DType.I64), Combiner.SUM, 4)) {
      for (int round = 0; round < 3; round++) {
        for (long k = 0; k < keys; k++) {
          kv.add(k, k + round);
        }
      }
      long n = 0;
      boolean right = true;
      KeyValueTable.Cursor c = kv.cursor();
      while (c.next()) {
        right &= c.longValue() == 3 * c.keyLong() + 3;
        n++;
      }
      assertEquals(keys, n);
      assertTrue(right, "a sum is wrong");
    }
    Table t = worker.newTable(Combiner.SUM);
    t.put(0, new double[] {1, 2});
    KeyValueTable kv = new KeyValueTable(t, KeyType.I64, ValueType.scalar(DType.I64), 1);
    kv.add(7L, 1L);
    HarpException e = assertThrows(HarpException.class, () -> {
      kv.flush();
      t.ids();
    });
    assertEquals(HarpException.Kind.DATA, e.getKind());
    assertTrue(e.getMessage().contains("partition 0"), e.getMessage());
    assertArrayEquals(new int[] {0}, t.ids()); // the dense partition is still there
    t.close();
  }

  @Test
  void everyElementTypeReadsBackAsItself() {
    try (Table t = worker.newTable(Combiner.MAX)) {
      for (DType d : DType.values()) {
        Partition p = t.create(d.ordinal(), d, 3);
        assertEquals(3 * d.size(), p.bytes().capacity());
        assertEquals(d, t.get(d.ordinal()).type());
      }
    }
  }

  @Test
  void aSingleWorkerRunsEveryCollective() {
    Table t = worker.newTable(Combiner.SUM);
    t.put(0, new double[] {1.5, 2.5});
    worker.allreduce(null, "one", t, Options.defaults());
    for (Algorithm.Broadcast a : Algorithm.Broadcast.values()) {
      worker.broadcast(null, "one", t, Options.defaults().algorithm(a));
    }
    for (Algorithm.Reduce a : Algorithm.Reduce.values()) {
      worker.reduce(null, "one", t, Options.defaults().algorithm(a));
    }
    worker.gather(null, "one", t, Options.defaults());
    worker.scatter(null, "one", t, null, Options.defaults());
    worker.allgather(null, "one", t, Options.defaults());
    worker.allgather(null, "one", t, Options.defaults().totalPartitions(1));
    worker.reduceScatter("one", t, (id, n) -> 0);
    worker.regroup("one", t, null);
    worker.regroupPlanned(null, "one", t);
    worker.rotate("one", t, null);
    worker.barrier("one");
    try (Table global = worker.newTable(Combiner.SUM)) {
      global.put(0, new double[] {10, 20});
      worker.push("one", t, global, null);
      assertArrayEquals(new double[] {11.5, 22.5}, global.get(0).toDoubleArray());
      worker.pull("one", t, global, null);
    }
    assertArrayEquals(new double[] {11.5, 22.5}, t.get(0).toDoubleArray());
    t.close();
  }
}
