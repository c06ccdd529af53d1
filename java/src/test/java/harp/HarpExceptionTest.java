package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Engine errors, panics and bad names become one HarpException with kind, rank, op and message. */
class HarpExceptionTest {
  private Worker worker;

  @BeforeEach
  void start() {
    worker = NativeTest.startSingleWorker("errors-test");
  }

  @AfterEach
  void stop() {
    worker.close();
  }

  @Test
  void anEngineErrorKeepsItsKindAndMessage() {
    HarpException e = assertThrows(HarpException.class, () -> Native.selfTest(0));
    assertEquals(HarpException.Kind.DATA, e.getKind());
    assertEquals("engine error number 42", e.getMessage());
    assertEquals(-1, e.getRank());
    assertEquals("", e.getOperation());
    assertEquals("", e.getNativeBacktrace());
    assertEquals(2, Native.selfTest(2));
  }

  @Test
  void aCommunicationErrorNamesRankOperationSequenceAndLabel() {
    HarpException e = assertThrows(HarpException.class, () -> Native.selfTest(3));
    assertEquals(HarpException.Kind.PEER_LOST, e.getKind());
    assertEquals(3, e.getRank());
    assertEquals("allreduce", e.getOperation());
    assertEquals(12, e.getSequence());
    assertEquals("sums", e.getLabel());
    assertTrue(e.getMessage().startsWith("rank 3: allreduce #12 'sums': rank 1 is gone"), e.getMessage());
  }

  @Test
  void aPanicIsAnExceptionWithItsMessageAndTheRustBacktrace() {
    HarpException e = assertThrows(HarpException.class, () -> Native.selfTest(1));
    assertEquals(HarpException.Kind.PANIC, e.getKind());
    assertTrue(e.getMessage().contains("deliberate panic number 7"), e.getMessage());
    assertTrue(e.getMessage().contains("native.rs"), "the panic's location: " + e.getMessage());
    assertTrue(e.getNativeBacktrace().contains("Java_harp_Native_selfTest"), e.getNativeBacktrace());
    // The JVM and the library are fine afterwards, and the next panic has its own backtrace.
    assertEquals(2, Native.selfTest(2));
    HarpException again = assertThrows(HarpException.class, () -> Native.selfTest(1));
    assertTrue(!again.getNativeBacktrace().isEmpty());
  }

  @Test
  void anErrorInACollectiveNamesTheWorkerTheCollectiveAndItsLabel() {
    try (Table t = worker.newTable(Combiner.SUM)) {
      t.put(0, new double[] {1});
      HarpException e = assertThrows(HarpException.class,
          () -> worker.broadcast(null, "bad-root", t,
              Options.defaults().root(5).algorithm(Algorithm.Broadcast.CHAIN)));
      assertEquals(HarpException.Kind.CONFIG, e.getKind());
      assertEquals(0, e.getRank());
      assertEquals("broadcast", e.getOperation());
      assertEquals("bad-root", e.getLabel());
      assertTrue(e.getMessage().contains("root 5"), e.getMessage());
      // The worker refuses further collectives, naming the one refused and the first failure.
      HarpException p = assertThrows(HarpException.class, () -> worker.allreduce(null, "next", t, Options.defaults()));
      assertEquals(HarpException.Kind.POISONED, p.getKind());
      assertEquals(0, p.getRank());
      assertEquals("allreduce", p.getOperation());
      assertEquals("next", p.getLabel());
      assertTrue(p.getMessage().contains("root 5"), p.getMessage());
    }
  }

  @Test
  void aBadNameIsAConfigErrorNamingIt() {
    HarpException e = assertThrows(HarpException.class,
        () -> Worker.allreduce(worker.handle(), null, "named", 0, "fastest"));
    assertEquals(HarpException.Kind.CONFIG, e.getKind());
    assertEquals(0, e.getRank());
    assertEquals("allreduce", e.getOperation());
    assertEquals("named", e.getLabel());
    assertTrue(e.getMessage().contains("unknown allreduce algorithm 'fastest'"), e.getMessage());
    e = assertThrows(HarpException.class, () -> Table.open(worker.handle(), "average"));
    assertEquals(HarpException.Kind.CONFIG, e.getKind());
    assertEquals(0, e.getRank());
    assertTrue(e.getMessage().contains("unknown combiner \"average\""), e.getMessage());
    e = assertThrows(HarpException.class, () -> Native.canonicalName("dtype", "f16"));
    assertEquals(HarpException.Kind.CONFIG, e.getKind());
    assertTrue(e.getMessage().contains("f16"), e.getMessage());
    e = assertThrows(HarpException.class, () -> Native.names("colours"));
    assertTrue(e.getMessage().contains("unknown vocabulary"), e.getMessage());
  }

  @Test
  void errorsFoundInJavaCarryTheirKind() {
    HarpException e = new HarpException("no staging directory", 4, "start-up");
    assertEquals(HarpException.Kind.JAVA, e.getKind());
    assertEquals(4, e.getRank());
    assertEquals("start-up", e.getOperation());
    assertEquals(-1, e.getSequence());
    HarpException s = new HarpException(HarpException.Kind.STARTUP, 2, "start-up", "only 2 of 3 workers started");
    assertEquals(HarpException.Kind.STARTUP, s.getKind());
    assertEquals(2, s.getRank());
    assertEquals("only 2 of 3 workers started", s.getMessage());
    assertEquals("", s.getNativeBacktrace());
  }
}
