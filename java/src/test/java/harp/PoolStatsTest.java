package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/** The four counters poolStats promises follow the buffers of a table. */
class PoolStatsTest {
  @Test
  void countersFollowAllocationReleaseAndReuse() {
    try (Worker w = NativeTest.startSingleWorker("pool-stats")) {
      PoolStats before = w.poolStats();
      Table t = w.newTable(Combiner.SUM);
      t.create(0, DType.F64, 100_000);
      PoolStats held = w.poolStats();
      assertEquals(before.allocations() + 1, held.allocations(), held.toString());
      assertTrue(held.bytesInUse() >= before.bytesInUse() + 800_000, held.toString());
      t.close();
      PoolStats released = w.poolStats();
      assertEquals(before.bytesInUse(), released.bytesInUse(), released.toString());
      assertTrue(released.bytesHeld() >= before.bytesHeld() + 800_000, released.toString());
      assertEquals(before.releasesKept() + 1, released.releasesKept(), released.toString());
      try (Table again = w.newTable(Combiner.SUM)) {
        again.create(0, DType.F64, 100_000);
        PoolStats reused = w.poolStats();
        assertEquals(held.allocations(), reused.allocations(), "served from the free list: " + reused);
        assertEquals(released.reuses() + 1, reused.reuses(), reused.toString());
        assertEquals(released.bytesHeld() - (held.bytesInUse() - before.bytesInUse()), reused.bytesHeld(),
            reused.toString());
      }
      assertTrue(w.poolStats().bytesHeld() >= 800_000, w.poolStats().toString());
      w.trimPool();
      PoolStats trimmed = w.poolStats();
      assertEquals(0, trimmed.bytesHeld(), "trimPool frees every kept buffer: " + trimmed);
      assertEquals(before.bytesInUse(), trimmed.bytesInUse(), trimmed.toString());
    }
  }
}
