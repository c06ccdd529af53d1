package harp.yarn;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;

/**
 * The application master's decisions, independent of YARN's client classes (which talk to it
 * through {@link ResourceManager} and {@link NodeManager}, so that fakes can drive it in tests):
 *
 * <ul>
 *   <li>placement: worker w is requested on its split group's preferred node when usable, else on
 *       the usable node with the fewest workers; never more than {@code workersPerNode} workers on
 *       one node (a container on a full node, or beyond the request, is released);
 *   <li>gang start: no worker is launched before all N containers are held; if they are not held
 *       within the gang timeout, everything is released and the job fails with a diagnostic;
 *   <li>rendezvous: each launched worker registers its host:port; when all have, every worker
 *       gets the full roster (rank order) and the job secret;
 *   <li>failure: any worker failing or lost stops every other worker at once and fails the job
 *       with the failing rank's diagnostics; success of all commits the output and cleans up.
 * </ul>
 */
public final class GangMaster {
  /** The ResourceManager side (AMRMClientAsync in the real master). */
  public interface ResourceManager {
    /** Asks for one container for {@code worker} on {@code node} exactly (no relaxed locality). */
    void request(int worker, String node, int memoryMb, int vcores);

    void release(String containerId);

    /** Unregisters the application with its final state. */
    void finish(boolean succeeded, String diagnostics);
  }

  /** The NodeManager side (NMClientAsync in the real master). */
  public interface NodeManager {
    void launch(String containerId, String node, int rank);

    void stop(String containerId);
  }

  /** The job's OutputCommitter and staging directory. */
  public interface Committer {
    void commit() throws Exception;

    void abort();

    void cleanupStaging();
  }

  public record Container(String id, String node) {}

  /** The roster handed to every worker once all have registered. */
  public record Roster(List<String> hosts, String secret) {}

  enum State { PLACING, STARTING, RUNNING, SUCCEEDED, FAILED }

  private final AmConfig cfg;
  private final ResourceManager rm;
  private final NodeManager nm;
  private final Committer committer;
  private final String secret;
  private int n;
  private int usable;
  private long deadline;
  private State state = State.PLACING;
  private final Map<Integer, String> wanted = new HashMap<>();
  private final Map<Integer, Container> held = new TreeMap<>();
  private final Map<String, Integer> onNode = new HashMap<>();
  private final Map<Integer, String> registered = new TreeMap<>();
  private final Map<Integer, Boolean> finished = new HashMap<>();
  private String diagnostics = "";

  public GangMaster(AmConfig cfg, ResourceManager rm, NodeManager nm, Committer committer, String secret) {
    this.cfg = cfg;
    this.rm = rm;
    this.nm = nm;
    this.committer = committer;
    this.secret = secret;
  }

  public synchronized State state() {
    return state;
  }

  public synchronized String diagnostics() {
    return diagnostics;
  }

  /** Job progress for YARN: placement up to 5 %, registration up to 10 %, then finished workers. */
  public synchronized float progress() {
    if (n == 0) {
      return 0f;
    }
    return switch (state) {
      case PLACING -> 0.05f * held.size() / n;
      case STARTING -> 0.05f + 0.05f * registered.size() / n;
      case RUNNING -> 0.1f + 0.9f * finished.size() / n;
      case SUCCEEDED -> 1f;
      case FAILED -> 0.1f;
    };
  }

  /** Starts placing {@code groups.size()} workers on {@code usableNodes} at time {@code now}. */
  public synchronized void start(long now, List<String> usableNodes, List<SplitGrouper.Group> groups) {
    n = groups.size();
    usable = usableNodes.size();
    deadline = now + cfg.gangTimeoutMs;
    if (n == 0) {
      fail("the job has no workers");
      return;
    }
    if ((long) usable * cfg.workersPerNode < n) {
      fail(n + " workers need " + ((n + cfg.workersPerNode - 1) / cfg.workersPerNode) + " nodes at "
          + cfg.workersPerNode + " worker(s) per node, but the cluster has " + usable + " usable nodes"
          + (cfg.workersPerNode == 1 ? " (" + AmConfig.WORKERS_PER_NODE + " allows more per node)" : ""));
      return;
    }
    Map<String, Integer> targeted = new HashMap<>();
    for (SplitGrouper.Group g : groups) {
      String node = g.preferredNode();
      if (node == null || !usableNodes.contains(node) || targeted.getOrDefault(node, 0) >= cfg.workersPerNode) {
        node = null;
        for (String u : usableNodes) {
          if (targeted.getOrDefault(u, 0) < cfg.workersPerNode
              && (node == null || targeted.getOrDefault(u, 0) < targeted.getOrDefault(node, 0))) {
            node = u;
          }
        }
      }
      targeted.merge(node, 1, Integer::sum);
      wanted.put(g.worker(), node);
      rm.request(g.worker(), node, cfg.memoryMb, cfg.vcores);
    }
  }

  /** A container was granted. */
  public synchronized void onAllocated(Container c) {
    if (state != State.PLACING) {
      rm.release(c.id());
      return;
    }
    Integer rank = null;
    for (Map.Entry<Integer, String> e : wanted.entrySet()) {
      if (!held.containsKey(e.getKey()) && e.getValue().equals(c.node())) {
        rank = e.getKey();
        break;
      }
    }
    if (rank == null || onNode.getOrDefault(c.node(), 0) >= cfg.workersPerNode) {
      rm.release(c.id());
      return;
    }
    held.put(rank, c);
    onNode.merge(c.node(), 1, Integer::sum);
    if (held.size() == n) {
      state = State.STARTING;
      for (Map.Entry<Integer, Container> e : held.entrySet()) {
        nm.launch(e.getValue().id(), e.getValue().node(), e.getKey());
      }
    }
  }

  /** Time passes: the gang deadline (placement and registration) is checked. */
  public synchronized void onTick(long now) {
    if ((state == State.PLACING || state == State.STARTING) && now >= deadline) {
      long secs = cfg.gangTimeoutMs / 1000;
      if (state == State.PLACING) {
        fail("only " + held.size() + " of " + n + " workers could be placed after " + secs + " s (cluster has "
            + usable + " usable nodes)");
      } else {
        fail("only " + registered.size() + " of " + n + " workers registered within " + secs + " s of being launched");
      }
    }
  }

  /** Worker {@code rank} listens on {@code hostPort}; returns the roster once all have registered. */
  public synchronized Optional<Roster> onRegistered(int rank, String hostPort) {
    if (state != State.STARTING || !held.containsKey(rank) || registered.containsKey(rank)) {
      return Optional.empty();
    }
    registered.put(rank, hostPort);
    if (registered.size() < n) {
      return Optional.empty();
    }
    state = State.RUNNING;
    return Optional.of(new Roster(new ArrayList<>(registered.values()), secret));
  }

  /** A container ended (exit status 0 = success; anything else, including lost, a failure). */
  public synchronized void onCompleted(String containerId, int exitStatus, String why) {
    Integer rank = null;
    for (Map.Entry<Integer, Container> e : held.entrySet()) {
      if (e.getValue().id().equals(containerId)) {
        rank = e.getKey();
      }
    }
    if (rank == null || state == State.SUCCEEDED || state == State.FAILED) {
      return;
    }
    if (exitStatus != 0) {
      Container c = held.get(rank);
      finished.put(rank, false); // already gone: nothing to stop
      fail("worker " + rank + " (container " + c.id() + " on " + c.node() + ") failed with exit status " + exitStatus
          + (why == null || why.isEmpty() ? "" : ": " + why));
      return;
    }
    finished.put(rank, true);
    if (state != State.RUNNING) {
      fail("worker " + rank + " exited before the job started (before every worker had registered)");
      return;
    }
    if (finished.size() == n) {
      try {
        committer.commit();
      } catch (Exception e) {
        fail("committing the output failed: " + e);
        return;
      }
      committer.cleanupStaging();
      state = State.SUCCEEDED;
      rm.finish(true, "");
    }
  }

  /** The job is given up from outside (the ResourceManager asks the master to shut down, say). */
  public synchronized void abort(String why) {
    if (state != State.SUCCEEDED && state != State.FAILED) {
      fail(why);
    }
  }

  private void fail(String why) {
    diagnostics = why;
    State was = state;
    state = State.FAILED;
    for (Map.Entry<Integer, Container> e : held.entrySet()) {
      if (finished.containsKey(e.getKey())) {
        continue;
      }
      if (was == State.PLACING) {
        rm.release(e.getValue().id());
      } else {
        nm.stop(e.getValue().id());
      }
    }
    committer.abort();
    committer.cleanupStaging();
    rm.finish(false, why);
  }
}
