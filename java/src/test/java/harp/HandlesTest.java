package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** Closing is idempotent, use after close is a CLOSED HarpException, closed tables are forgotten. */
class HandlesTest {
  private static void assertClosed(Executable use, String words) {
    HarpException e = assertThrows(HarpException.class, use);
    assertEquals(HarpException.Kind.CLOSED, e.getKind(), e.getMessage());
    assertTrue(e.getMessage().contains(words), e.getMessage());
  }

  @Test
  void tablesCloseOnceAndRefuseUseAfterwards() {
    try (Worker w = NativeTest.startSingleWorker("handles-tables")) {
      Table t = w.newTable(Combiner.SUM);
      t.put(0, new double[] {1});
      long h = t.handle();
      t.close();
      t.close();
      assertFalse(t.isOpen());
      assertClosed(() -> t.get(0), "table is closed");
      assertClosed(t::ids, "table is closed");
      assertClosed(() -> w.allreduce(null, "x", t, Options.defaults()), "table is closed");
      // The native side checks as well: a freed handle is closed, a second free a no-op.
      assertClosed(() -> Table.ids(h), "table handle " + h + " is closed");
      Table.free(h);
      assertClosed(() -> Table.ids(123456789L), "never valid");
      assertClosed(() -> Worker.rank(h), "closed");
    }
  }

  @Test
  void workersCloseOnceAndRefuseUseAfterwards() {
    Worker w = NativeTest.startSingleWorker("handles-workers");
    Table open = w.newTable(Combiner.SUM);
    long h = w.handle();
    try (Table other = w.newTable(Combiner.MIN)) {
      assertClosed(() -> Worker.rank(other.handle()), "is a table, not a worker");
    }
    w.close();
    w.close();
    w.abort("after close: nothing to do");
    assertFalse(open.isOpen(), "closing the worker closes its tables");
    assertClosed(() -> w.barrier("late"), "worker 0 is closed");
    assertClosed(() -> w.newTable(Combiner.SUM), "worker 0 is closed");
    assertClosed(w::poolStats, "worker 0 is closed");
    assertClosed(w::trimPool, "worker 0 is closed");
    assertClosed(() -> Worker.barrier(h, null, "late"), "worker handle " + h + " is closed");
    Worker.close(h);
    assertClosed(() -> Worker.size(987654321L), "never valid");
  }

  @Test
  void abortClosesTheTablesAndTheWorker() {
    Worker w = NativeTest.startSingleWorker("handles-abort");
    Table t = w.newTable(Combiner.SUM);
    w.abort("user code failed on purpose");
    assertFalse(t.isOpen());
    assertFalse(w.isOpen());
    w.close();
  }

  @Test
  void aWorkerRemembersOnlyItsOpenTables() {
    try (Worker w = NativeTest.startSingleWorker("handles-many")) {
      Table kept = w.newTable(Combiner.SUM);
      for (int i = 0; i < 5_000; i++) {
        Table t = w.newTable(Combiner.SUM);
        t.put(0, new double[] {i});
        t.close();
        assertEquals(1, w.openTables());
      }
      kept.close();
      assertEquals(0, w.openTables());
    }
  }
}
