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
}
