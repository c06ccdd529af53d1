package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.hadoop.conf.Configuration;
import org.junit.jupiter.api.Test;

/**
 * Misuse of the Java API that used to hang, exhaust memory, lose data or give a message that
 * named nothing: each is now a clear exception, and the worker or table stays as it was.
 */
class ApiGuardsTest {
  private static HarpException harp(org.junit.jupiter.api.function.Executable call) {
    return assertThrows(HarpException.class, call);
  }

  @Test
  void labelReceiversRefusesCountsASendWouldRefuse() {
    for (int[] bad : new int[][] {{5, 3}, {0, 3}, {Integer.MAX_VALUE, Integer.MAX_VALUE}, {1, 0}}) {
      HarpException e = harp(() -> CollectiveMapper.labelReceivers("x", bad[0], bad[1]));
      assertEquals(HarpException.Kind.CONFIG, e.getKind(), e.getMessage());
      assertTrue(e.getMessage().contains("label receivers:"), e.getMessage());
    }
    assertEquals(3, CollectiveMapper.labelReceivers("x", 3, 3).length);
  }

  @Test
  void aCombinerThatUsesItsOwnTableFailsInsteadOfHanging() throws Exception {
    try (Worker w = NativeTest.startSingleWorker("guards-kv")) {
      KeyValueTable[] self = new KeyValueTable[1];
      KvCombiner peek = KvCombiner.ofDoubles("peek", (a, b) -> {
        self[0].table().ids();
        return a + b;
      });
      self[0] = w.newKeyValueTable(KeyType.I64, ValueType.scalar(DType.F64), peek, 2);
      self[0].add(1L, 1.0);
      self[0].add(1L, 2.0);
      HarpException e = harp(() -> self[0].count());
      assertTrue(e.getMessage().contains("the table is in use by this thread"), e.getMessage());
      self[0].close();
    }
  }

  @Test
  void aPartitionAJavaBufferCannotHoldIsRefusedBeforeItIsAdded() {
    try (Worker w = NativeTest.startSingleWorker("guards-big")) {
      Table t = w.newTable(Combiner.SUM);
      HarpException e = harp(() -> t.create(0, DType.I32, (1 << 29) + 1));
      assertTrue(e.getMessage().contains("a partition of 2147483652 bytes: a Java buffer holds at most"),
          e.getMessage());
      assertEquals(0, t.ids().length, "nothing was added");
      assertEquals(0, e.getRank(), "a table's errors name its worker");
      t.close();
    }
  }

  @Test
  void negativeRanksAreNamedAsGiven() {
    try (Worker w = NativeTest.startSingleWorker("guards-ranks")) {
      HarpException e = harp(() -> w.groupRank(new int[] {-5}));
      assertTrue(e.getMessage().contains("rank -5 is not a worker"), e.getMessage());
      HarpException n = harp(() -> Events.send(w.handle(), Events.TO_ONE, -1, null, 0, new byte[1], 0, 1));
      assertTrue(n.getMessage().contains("no worker -1 (the job has 1)"), n.getMessage());
    }
  }

  /** Two workers of one job on loopback, started together. */
  private static Worker[] twoWorkers(String job) throws Exception {
    String options = "op_timeout_ms=10000\nconnect_timeout_ms=10000\n";
    long[] l = {Native.listen("127.0.0.1", options), Native.listen("127.0.0.1", options)};
    String hosts = "127.0.0.1:" + Native.listenerPort(l[0]) + "\n127.0.0.1:" + Native.listenerPort(l[1]) + "\n";
    byte[] secret = "api-guards-secret-16b".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    java.util.concurrent.ExecutorService ex = java.util.concurrent.Executors.newFixedThreadPool(2);
    try {
      java.util.List<java.util.concurrent.Future<Worker>> f = new java.util.ArrayList<>();
      for (int r = 0; r < 2; r++) {
        int rank = r;
        f.add(ex.submit(() -> new Worker(Native.start(l[rank], hosts, rank, job, secret, options, "warn|" + job))));
      }
      return new Worker[] {f.get(0).get(), f.get(1).get()};
    } finally {
      ex.shutdown();
    }
  }

  @Test
  void closeDuringACollectiveOnAnotherThreadChangesNothing() throws Exception {
    Worker[] w = twoWorkers("guards-close");
    Table t = w[0].newTable(Combiner.SUM);
    Thread first = new Thread(() -> w[0].barrier("first"));
    first.start();
    Thread.sleep(300);
    HarpException e = harp(w[0]::close);
    assertTrue(e.getMessage().contains("still in a collective on another thread"), e.getMessage());
    assertTrue(t.isOpen(), "the tables stay open");
    w[1].barrier("first");
    first.join();
    Thread other = new Thread(() -> w[1].barrier("after"));
    other.start();
    w[0].barrier("after");
    other.join();
    w[0].close();
    w[1].close();
  }

  @Test
  void abortDuringACollectiveOnAnotherThreadTakesEffectWhenItReturns() throws Exception {
    Worker[] w = twoWorkers("guards-abort");
    Thread first = new Thread(() -> w[0].barrier("first"));
    first.start();
    Thread.sleep(300);
    w[0].abort("given up on purpose");
    w[1].barrier("first");
    first.join();
    HarpException e = harp(() -> w[1].barrier("next"));
    assertTrue(e.getMessage().contains("rank 0: given up on purpose"), e.getMessage());
    w[1].close();
  }

  @Test
  void aTableOfAnotherWorkerInTheSameJvmIsRefused() throws Exception {
    Worker[] w = twoWorkers("guards-foreign");
    Table theirs = w[1].newTable(Combiner.SUM);
    HarpException e = harp(() -> w[0].allgather(null, "sums", theirs, Options.defaults()));
    assertEquals(HarpException.Kind.CONFIG, e.getKind(), e.getMessage());
    assertTrue(e.getMessage().contains("belongs to another worker of this process"), e.getMessage());
    theirs.close();
    w[0].close();
    w[1].close();
  }

  @Test
  void aLogLevelThatIsNoLevelIsRefusedNotSilent() {
    String options = "op_timeout_ms=10000\nconnect_timeout_ms=10000\n";
    long l = Native.listen("127.0.0.1", options);
    String hosts = "127.0.0.1:" + Native.listenerPort(l) + "\n";
    byte[] secret = "api-guards-secret-16b".getBytes(java.nio.charset.StandardCharsets.UTF_8);
    HarpException e = harp(() -> Native.start(l, hosts, 0, "guards-log", secret, options, "shouting|guards-log"));
    assertTrue(e.getMessage().contains("harp.log.level: 'shouting' is not a level"), e.getMessage());
    // The listener is still there: the same start with a level works.
    new Worker(Native.start(l, hosts, 0, "guards-log", secret, options, "warn,harp=info|guards-log")).close();
  }

  @Test
  void aDataErrorInACollectiveCarriesItsOperation() throws Exception {
    Worker[] w = twoWorkers("guards-data");
    Table[] t = {w[0].newTable(Combiner.SUM), w[1].newTable(Combiner.SUM)};
    t[0].put(0, new double[10]);
    t[1].put(0, new double[12]);
    HarpException[] e = new HarpException[2];
    Thread[] th = new Thread[2];
    for (int r = 0; r < 2; r++) {
      int rank = r;
      th[r] = new Thread(() -> e[rank] = assertThrows(HarpException.class,
          () -> w[rank].allreduce(null, "weights", t[rank],
              Options.defaults().algorithm(Algorithm.Allreduce.BIDIRECTIONAL_EXCHANGE))));
      th[r].start();
    }
    th[0].join();
    th[1].join();
    boolean found = false;
    for (int r = 0; r < 2; r++) {
      if (e[r].getKind() == HarpException.Kind.DATA) {
        found = true;
        assertEquals(r, e[r].getRank(), e[r].getMessage());
        assertEquals(1, e[r].getSequence(), e[r].getMessage());
        assertEquals("weights", e[r].getLabel(), e[r].getMessage());
        assertTrue(e[r].getMessage().contains("cannot combine"), e[r].getMessage());
      }
    }
    assertTrue(found, e[0].getMessage() + " / " + e[1].getMessage());
    w[0].close();
    w[1].close();
  }

  @Test
  void aBadNumberSettingNamesItsKey() {
    Configuration conf = new Configuration(false);
    conf.set("harp.progress.interval.ms", "abc");
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> ConfNumbers.getLong(conf, "harp.progress.interval.ms", 5));
    assertEquals("harp.progress.interval.ms must be a whole number, not 'abc'", e.getMessage());
  }
}
