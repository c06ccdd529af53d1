package harp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** {@link DynamicScheduler}, {@link StaticScheduler} and {@code doTasks}. */
class SchedulerTest {
  /** A task that counts and sums the inputs its thread ran (its per-thread state). */
  static final class Counting implements Task<Integer, Integer> {
    final int id;
    final List<Integer> seen = new ArrayList<>();

    Counting(int id) {
      this.id = id;
    }

    @Override
    public Integer run(Integer x) throws Exception {
      if (x < 0) {
        throw new java.io.IOException("negative " + x);
      }
      seen.add(x);
      return x * x;
    }
  }

  static List<Counting> tasks(int n) {
    List<Counting> ts = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      ts.add(new Counting(i));
    }
    return ts;
  }

  static List<Integer> range(int from, int to) {
    List<Integer> xs = new ArrayList<>();
    for (int i = from; i < to; i++) {
      xs.add(i);
    }
    return xs;
  }

  @Test
  @Timeout(60)
  void dynamicGivesInputOrderOrCompletionOrderAndKeepsPerThreadState() throws Exception {
    List<Counting> ts = tasks(3);
    try (DynamicScheduler<Integer, Integer> s = new DynamicScheduler<>(ts)) {
      List<Integer> want = new ArrayList<>();
      for (int x : range(0, 50)) {
        want.add(x * x);
      }
      assertEquals(want, s.runAll(range(0, 50)));
      s.submitAll(range(100, 120));
      assertEquals(20, s.pending());
      boolean[] seen = new boolean[20];
      for (DynamicScheduler.Output<Integer> o; (o = s.waitForOutput()) != null;) {
        int x = (int) o.index - 50 + 100;
        assertEquals(x * x, (int) o.get());
        assertFalse(seen[x - 100]);
        seen[x - 100] = true;
      }
      for (boolean b : seen) {
        assertTrue(b);
      }
      assertFalse(s.hasOutput());
      // A failure is that input's output; the thread goes on.
      RuntimeException e = assertThrows(RuntimeException.class, () -> s.runAll(Arrays.asList(12, -13, 14)));
      assertTrue(e.getCause().getMessage().contains("negative -13"), e.toString());
      assertEquals(Arrays.asList(4), s.runAll(Arrays.asList(2)));
    }
    int runs = 0;
    for (Counting t : ts) {
      runs += t.seen.size();
    }
    assertEquals(50 + 20 + 2 + 1, runs);
  }

  @Test
  @Timeout(60)
  void staticRunsEachInputOnItsTaskInOrder() throws Exception {
    List<Counting> ts = tasks(4);
    try (StaticScheduler<Integer, Integer> s = new StaticScheduler<>(ts)) {
      assertEquals(4, s.numTasks());
      for (int x = 0; x < 40; x++) {
        s.submit(x % 4, x);
      }
      assertThrows(IllegalArgumentException.class, () -> s.submit(4, 0));
      for (int t = 0; t < 4; t++) {
        for (int k = 0; k < 10; k++) {
          int x = k * 4 + t;
          assertEquals(x * x, (int) s.waitForOutput(t));
        }
        assertNull(s.waitForOutput(t));
      }
      s.submit(1, -13);
      RuntimeException e = assertThrows(RuntimeException.class, () -> s.waitForOutput(1));
      assertTrue(e.getCause().getMessage().contains("negative -13"), e.toString());
    }
    for (Counting t : ts) {
      List<Integer> want = new ArrayList<>();
      for (int k = 0; k < 10; k++) {
        want.add(k * 4 + t.id);
      }
      assertEquals(want, t.seen);
    }
  }

  @Test
  @Timeout(60)
  void doTasksIsInInputOrderAndRethrows() {
    List<Integer> got = CollectiveMapper.doTasks(range(0, 30), 3, x -> x + 1);
    assertEquals(range(1, 31), got);
    IllegalStateException e = assertThrows(IllegalStateException.class,
        () -> CollectiveMapper.doTasks(range(0, 5), 2, x -> {
          if (x == 3) {
            throw new IllegalStateException("three");
          }
          return x;
        }));
    assertEquals("three", e.getMessage());
  }
}
