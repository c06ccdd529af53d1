package harp.yarn;

import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Groups input splits into one group per worker, balancing bytes and preferring splits whose
 * data is local to the node the group will run on. Each group gets a preferred node: the host
 * holding most of its bytes (distinct hosts for distinct groups while there are enough). With at
 * least as many splits as workers, every group gets at least one (empty splits included).
 */
public final class SplitGrouper {
  private SplitGrouper() {}

  /** A worker's share of the input. */
  public static final class Group extends Value {
    private final int worker;
    private final String preferredNode;
    private final List<Split> splits;
    private final long bytes;

    public Group(int worker, String preferredNode, List<Split> splits, long bytes) {
      this.worker = worker;
      this.preferredNode = preferredNode;
      this.splits = splits;
      this.bytes = bytes;
    }

    public int worker() {
      return worker;
    }

    public String preferredNode() {
      return preferredNode;
    }

    public List<Split> splits() {
      return splits;
    }

    public long bytes() {
      return bytes;
    }

    @Override
    Object[] fields() {
      return new Object[] {worker, preferredNode, splits, bytes};
    }

    @Override
    String[] names() {
      return new String[] {"worker", "preferredNode", "splits", "bytes"};
    }
  }

  public static List<Group> group(List<Split> splits, int workers) {
    if (workers <= 0) {
      throw new IllegalArgumentException("workers must be positive, got " + workers);
    }
    long total = splits.stream().mapToLong(Split::length).sum();
    long target = (total + workers - 1) / workers;
    // Hosts ranked by how many bytes they hold; each group is seeded on a distinct host.
    Map<String, Long> held = new HashMap<>();
    for (Split s : splits) {
      for (String h : s.hosts()) {
        held.merge(h, s.length(), Long::sum);
      }
    }
    List<String> hosts = new ArrayList<>(held.keySet());
    hosts.sort(Comparator.comparing((String h) -> -held.get(h)).thenComparing(h -> h));
    String[] node = new String[workers];
    for (int w = 0; w < workers; w++) {
      node[w] = w < hosts.size() ? hosts.get(w) : null;
    }
    List<List<Split>> groups = new ArrayList<>();
    long[] bytes = new long[workers];
    for (int w = 0; w < workers; w++) {
      groups.add(new ArrayList<>());
    }
    List<Split> order = new ArrayList<>(splits);
    order.sort(Comparator.comparingLong((Split s) -> -s.length()).thenComparingInt(Split::index));
    for (Split s : order) {
      int best = -1;
      // A local group with room first, then the least loaded group.
      for (int w = 0; w < workers; w++) {
        if (node[w] != null && s.hosts().contains(node[w]) && bytes[w] + s.length() <= target
            && (best < 0 || bytes[w] < bytes[best])) {
          best = w;
        }
      }
      if (best < 0) {
        best = 0;
        for (int w = 1; w < workers; w++) {
          if (bytes[w] < bytes[best]) {
            best = w;
          }
        }
      }
      groups.get(best).add(s);
      bytes[best] += s.length();
    }
    // Every worker is launched over at least one split: while a group is empty and another
    // holds several, the empty one takes the smallest split of the group with most (empty
    // splits, e.g. one per worker for a job with no input, all land in one group above).
    for (int w = 0; w < workers; w++) {
      if (!groups.get(w).isEmpty()) {
        continue;
      }
      int from = 0;
      for (int v = 1; v < workers; v++) {
        if (groups.get(v).size() > groups.get(from).size()) {
          from = v;
        }
      }
      List<Split> donor = groups.get(from);
      if (donor.size() < 2) {
        break; // fewer splits than workers
      }
      Split smallest = donor.stream().min(Comparator.comparingLong(Split::length).thenComparingInt(Split::index)).get();
      donor.remove(smallest);
      bytes[from] -= smallest.length();
      groups.get(w).add(smallest);
      bytes[w] += smallest.length();
    }
    List<Group> out = new ArrayList<>();
    for (int w = 0; w < workers; w++) {
      List<Split> g = groups.get(w);
      g.sort(Comparator.comparingInt(Split::index));
      out.add(new Group(w, node[w], g, bytes[w]));
    }
    return out;
  }
}
