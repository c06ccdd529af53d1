package harp.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import org.junit.jupiter.api.Test;

class SplitGrouperTest {
  @Test
  void groupsAreBalancedAndLocalWhenPossible() {
    List<Split> splits = new ArrayList<>();
    // 12 splits of 100 bytes, 4 on each of three hosts.
    for (int i = 0; i < 12; i++) {
      splits.add(new Split(i, 100, List.of("host" + (i % 3))));
    }
    List<SplitGrouper.Group> g = SplitGrouper.group(splits, 3);
    HashSet<String> nodes = new HashSet<>();
    for (SplitGrouper.Group x : g) {
      assertEquals(400, x.bytes());
      nodes.add(x.preferredNode());
      for (Split s : x.splits()) {
        assertTrue(s.hosts().contains(x.preferredNode()), "split " + s.index() + " is not local to " + x.preferredNode());
      }
    }
    assertEquals(3, nodes.size());
  }

  @Test
  void everySplitIsAssignedOnceEvenWithoutLocality() {
    List<Split> splits = new ArrayList<>();
    for (int i = 0; i < 7; i++) {
      splits.add(new Split(i, 10 + i, List.of()));
    }
    List<SplitGrouper.Group> g = SplitGrouper.group(splits, 3);
    HashSet<Integer> seen = new HashSet<>();
    long max = 0;
    long min = Long.MAX_VALUE;
    for (SplitGrouper.Group x : g) {
      for (Split s : x.splits()) {
        assertTrue(seen.add(s.index()));
      }
      max = Math.max(max, x.bytes());
      min = Math.min(min, x.bytes());
    }
    assertEquals(7, seen.size());
    assertTrue(max - min <= 16, "unbalanced: " + min + ".." + max);
    assertEquals(4, SplitGrouper.group(splits, 4).size());
  }

  /**
   * A job with no input has one empty split per worker (harp.io.WorkerInputFormat); a small
   * input may have fewer non-empty ones than workers. Every worker still gets a split.
   */
  @Test
  void everyWorkerGetsASplitWhenThereAreEnough() {
    List<Split> empty = new ArrayList<>();
    for (int i = 0; i < 5; i++) {
      empty.add(new Split(i, 0, List.of()));
    }
    List<SplitGrouper.Group> g = SplitGrouper.group(empty, 5);
    HashSet<Integer> seen = new HashSet<>();
    for (SplitGrouper.Group x : g) {
      assertEquals(1, x.splits().size(), "worker " + x.worker());
      seen.add(x.splits().get(0).index());
    }
    assertEquals(5, seen.size());

    // Two splits of data and two empty ones, all data on one host, for 4 workers.
    List<Split> mixed = List.of(new Split(0, 0, List.of()), new Split(1, 500, List.of("a")),
        new Split(2, 0, List.of()), new Split(3, 400, List.of("a")));
    g = SplitGrouper.group(mixed, 4);
    seen.clear();
    long bytes = 0;
    for (SplitGrouper.Group x : g) {
      assertEquals(1, x.splits().size(), "worker " + x.worker());
      seen.add(x.splits().get(0).index());
      bytes += x.bytes();
    }
    assertEquals(4, seen.size());
    assertEquals(900, bytes);

    // Three splits local to one host, one tiny, for 3 workers: the local rule would put two
    // in one group; each worker still gets one.
    List<Split> local = List.of(new Split(0, 100, List.of("a")), new Split(1, 100, List.of("a")),
        new Split(2, 1, List.of("a")));
    for (SplitGrouper.Group x : SplitGrouper.group(local, 3)) {
      assertEquals(1, x.splits().size(), "worker " + x.worker());
    }
  }
}
