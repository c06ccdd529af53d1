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
 *       gets the full roster (rank order, each with its node's rack);
 *   <li>failure: when a worker fails, the master waits up to the failure grace for the other
 *       endings and the workers' own failure reports, then blames the worker that failed first:
 *       one that died without a report (killed, crashed) before one that reported an error (its
 *       peers report the dead one as gone, and their exits may reach the master first); every
 *       other worker is stopped and the job fails with the blamed rank, host, exit status, its
 *       report or stderr tail, and what the others reported; success of all commits the output
 *       and cleans up.
 *   <li>the workers' own signed reports count: a worker that reported its result (DONE) is done,
 *       whatever YARN later says of its container (its NodeManager may have died while the
 *       container ran on); a worker whose NodeManager cannot be reached and that has not reported
 *       its result within the node-loss timeout is failed, without waiting for YARN's lost-node
 *       expiry (10 minutes by default).
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

    /** Unregisters the application as killed. */
    default void finishKilled(String diagnostics) {
      finish(false, diagnostics);
    }
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

  public static final class Container extends Value {
    private final String id;
    private final String node;

    public Container(String id, String node) {
      this.id = id;
      this.node = node;
    }

    public String id() {
      return id;
    }

    public String node() {
      return node;
    }

    @Override
    Object[] fields() {
      return new Object[] {id, node};
    }

    @Override
    String[] names() {
      return new String[] {"id", "node"};
    }
  }

  /** The roster handed to every worker once all have registered: "host:port rack" in rank order. */
  public static final class Roster extends Value {
    private final List<String> hosts;

    public Roster(List<String> hosts) {
      this.hosts = hosts;
    }

    public List<String> hosts() {
      return hosts;
    }

    @Override
    Object[] fields() {
      return new Object[] {hosts};
    }

    @Override
    String[] names() {
      return new String[] {"hosts"};
    }
  }

  /** A worker's failed ending as the master saw it, in order of arrival. */
  private static final class Failure extends Value {
    private final int rank;
    private final int exitStatus;
    private final String why;

    Failure(int rank, int exitStatus, String why) {
      this.rank = rank;
      this.exitStatus = exitStatus;
      this.why = why;
    }

    public int rank() {
      return rank;
    }

    public int exitStatus() {
      return exitStatus;
    }

    public String why() {
      return why;
    }

    @Override
    Object[] fields() {
      return new Object[] {rank, exitStatus, why};
    }

    @Override
    String[] names() {
      return new String[] {"rank", "exitStatus", "why"};
    }
  }

  enum State { PLACING, STARTING, RUNNING, SUCCEEDED, FAILED }

  private final AmConfig cfg;
  private final ResourceManager rm;
  private final NodeManager nm;
  private final Committer committer;
  private int n;
  private int usable;
  /** The usable nodes while the gang is placed (a node the ResourceManager reports lost leaves). */
  private List<String> usableNodes = new ArrayList<>();
  private long deadline;
  private State state = State.PLACING;
  private final Map<Integer, String> wanted = new HashMap<>();
  private final Map<Integer, Container> held = new TreeMap<>();
  private final Map<String, Integer> onNode = new HashMap<>();
  private final Map<Integer, String> registered = new TreeMap<>();
  private final Map<Integer, Boolean> finished = new HashMap<>();
  private final Map<String, String> rackOf = new HashMap<>();
  private final Map<Integer, long[]> progressOf = new HashMap<>();
  /** Failed endings in order of arrival, and the workers' own failure reports in order of arrival. */
  private final List<Failure> failures = new ArrayList<>();
  private final Map<Integer, String> reports = new java.util.LinkedHashMap<>();
  /** Workers whose NodeManager could not be reached: when they are failed unless they report. */
  private final Map<Integer, Long> unreachableUntil = new TreeMap<>();
  /** Exit status of a failure that has none (the worker's node was lost). */
  static final int NO_EXIT_STATUS = Integer.MIN_VALUE;
  private long lastTick;
  /** When the blame is decided (set by the first failure); 0 while nothing failed. */
  private long decideAt;
  private float lastProgress;
  private boolean killed;
  private String diagnostics = "";

  public GangMaster(AmConfig cfg, ResourceManager rm, NodeManager nm, Committer committer) {
    this.cfg = cfg;
    this.rm = rm;
    this.nm = nm;
    this.committer = committer;
  }

  public synchronized State state() {
    return state;
  }

  public synchronized String diagnostics() {
    return diagnostics;
  }

  /**
   * Job progress for YARN: placement up to 5 %, registration up to 10 %, then the mean of the
   * workers' own progress (what they report, e.g. "iteration 3 of 10"; 1 for a finished worker).
   * A failed job keeps the progress it had.
   */
  public synchronized float progress() {
    if (n == 0) {
      return 0f;
    }
    float p;
    switch (state) {
      case PLACING:
        p = 0.05f * held.size() / n;
        break;
      case STARTING:
        p = 0.05f + 0.05f * registered.size() / n;
        break;
      case RUNNING: {
        double sum = 0;
        for (int r = 0; r < n; r++) {
          long[] dt = progressOf.get(r);
          sum += finished.getOrDefault(r, false) ? 1.0
              : dt == null || dt[1] <= 0 ? 0.0 : Math.min(1.0, Math.max(0.0, (double) dt[0] / dt[1]));
        }
        p = (float) (0.1 + 0.9 * sum / n);
        break;
      }
      case SUCCEEDED:
        p = 1f;
        break;
      case FAILED:
        p = lastProgress;
        break;
      default:
        throw new IllegalStateException("unknown state " + state);
    }
    lastProgress = p;
    return p;
  }

  /** Worker {@code rank} says it has done {@code done} of {@code total} (steps, iterations). */
  public synchronized void onProgress(int rank, long done, long total) {
    if (rank >= 0 && rank < n && total > 0) {
      progressOf.put(rank, new long[] {done, total});
    }
  }

  /** Worker {@code rank} says it is failing with {@code message} (before its container ends). */
  public synchronized void onFailureReport(int rank, String message) {
    if (rank < 0 || rank >= n || state == State.SUCCEEDED || state == State.FAILED || reports.containsKey(rank)) {
      return;
    }
    reports.put(rank, message);
    if (decideAt == 0) {
      decideAt = lastTick + cfg.failureGraceMs;
    }
  }

  /**
   * Worker {@code rank} says it has finished: its task output is committed and its counters are
   * written. It counts as ended successfully, whatever its container does afterwards.
   */
  public synchronized void onDoneReport(int rank) {
    if (rank < 0 || rank >= n || state != State.RUNNING || finished.containsKey(rank)) {
      return;
    }
    unreachableUntil.remove(rank);
    ended(rank);
  }

  /**
   * The NodeManager of {@code node} could not be reached at {@code now}: its workers that have not
   * reported their result are failed if they have not done so {@link AmConfig#nodeLostMs} later.
   */
  public synchronized void onNodeUnreachable(String node, long now) {
    if (state != State.RUNNING && state != State.STARTING) {
      return;
    }
    for (Map.Entry<Integer, Container> e : held.entrySet()) {
      if (e.getValue().node().equals(node) && !finished.containsKey(e.getKey())) {
        unreachableUntil.putIfAbsent(e.getKey(), now + cfg.nodeLostMs);
      }
    }
  }

  /** The NodeManager of {@code node} answered again: its workers are no longer suspected. */
  public synchronized void onNodeReachable(String node) {
    for (Map.Entry<Integer, Container> e : held.entrySet()) {
      if (e.getValue().node().equals(node)) {
        unreachableUntil.remove(e.getKey());
      }
    }
  }

  /** Starts placing {@code groups.size()} workers on {@code usableNodes} at time {@code now}. */
  public synchronized void start(long now, List<String> usableNodes, List<SplitGrouper.Group> groups) {
    start(now, usableNodes, java.util.Collections.<String, String>emptyMap(), groups);
  }

  /**
   * Starts placing {@code groups.size()} workers on {@code usableNodes} (duplicates, as a
   * ResourceManager lists a restarted NodeManager twice, count once), whose racks are in
   * {@code racks} (node to rack name; missing nodes are in {@code /default-rack}).
   */
  public synchronized void start(long now, List<String> usableNodes, Map<String, String> racks,
      List<SplitGrouper.Group> groups) {
    usableNodes = new ArrayList<>(new java.util.LinkedHashSet<>(usableNodes));
    usableNodes.removeIf(x -> x == null || x.isEmpty());
    this.usableNodes = usableNodes;
    rackOf.putAll(racks);
    n = groups.size();
    usable = usableNodes.size();
    lastTick = now;
    deadline = now + cfg.gangTimeoutMs;
    if (n == 0) {
      fail("the job has no workers");
      return;
    }
    if ((long) usable * cfg.workersPerNode < n) {
      fail(tooFewNodes() + (cfg.workersPerNode == 1 ? " (" + AmConfig.WORKERS_PER_NODE + " allows more per node)" : ""));
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
      if (node == null) {
        fail("cannot place worker " + g.worker() + ": every one of the " + usable + " usable nodes already has "
            + cfg.workersPerNode + " worker(s)");
        return;
      }
      targeted.merge(node, 1, Integer::sum);
      wanted.put(g.worker(), node);
      rm.request(g.worker(), node, cfg.memoryMb, cfg.vcores);
    }
  }

  /**
   * The ResourceManager reports {@code node} unusable (lost, unhealthy, decommissioned) while the
   * gang is placed: workers still waiting for a container there are asked for on another usable
   * node (the fewest workers first); if none is left, the job fails with the gang diagnostic.
   */
  public synchronized void onNodeUnusable(String node) {
    if (state != State.PLACING || !usableNodes.remove(node)) {
      return;
    }
    usable = usableNodes.size();
    Map<String, Integer> targeted = new HashMap<>();
    for (String t : wanted.values()) {
      targeted.merge(t, 1, Integer::sum);
    }
    for (Map.Entry<Integer, String> e : new TreeMap<>(wanted).entrySet()) {
      if (!e.getValue().equals(node) || held.containsKey(e.getKey())) {
        continue;
      }
      String to = null;
      for (String u : usableNodes) {
        if (targeted.getOrDefault(u, 0) < cfg.workersPerNode
            && (to == null || targeted.getOrDefault(u, 0) < targeted.getOrDefault(to, 0))) {
          to = u;
        }
      }
      if (to == null) {
        fail(tooFewNodes() + " (" + node + " was lost while the workers were placed)");
        return;
      }
      targeted.merge(to, 1, Integer::sum);
      wanted.put(e.getKey(), to);
      rm.request(e.getKey(), to, cfg.memoryMb, cfg.vcores);
    }
  }

  /** The gang diagnostic: "N workers need M nodes at K worker(s) per node, but the cluster has U usable nodes". */
  private String tooFewNodes() {
    return n + " workers need " + ((n + cfg.workersPerNode - 1) / cfg.workersPerNode) + " nodes at "
        + cfg.workersPerNode + " worker(s) per node, but the cluster has " + usable + " usable nodes";
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

  /** Time passes: the gang deadline (placement and registration) and a pending blame are checked. */
  public synchronized void onTick(long now) {
    lastTick = now;
    for (Map.Entry<Integer, Long> e : new ArrayList<>(unreachableUntil.entrySet())) {
      int rank = e.getKey();
      if (now >= e.getValue() && !finished.containsKey(rank) && state != State.SUCCEEDED && state != State.FAILED) {
        unreachableUntil.remove(rank);
        onCompleted(held.get(rank).id(), NO_EXIT_STATUS, "its NodeManager on " + held.get(rank).node()
            + " has been unreachable for " + cfg.nodeLostMs / 1000 + " s and it has not reported its result");
      }
    }
    if (decideAt != 0 && now >= decideAt && state != State.SUCCEEDED && state != State.FAILED) {
      blame();
      return;
    }
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
    List<String> hosts = new ArrayList<>();
    for (Map.Entry<Integer, String> e : registered.entrySet()) {
      hosts.add(e.getValue() + " " + rackOf.getOrDefault(held.get(e.getKey()).node(), "/default-rack"));
    }
    return Optional.of(new Roster(hosts));
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
    if (Boolean.TRUE.equals(finished.get(rank))) {
      return; // it reported its result: how its container ends does not change it
    }
    unreachableUntil.remove(rank);
    if (exitStatus != 0) {
      finished.put(rank, false); // already gone: nothing to stop
      failures.add(new Failure(rank, exitStatus, why));
      if (decideAt == 0) {
        decideAt = lastTick + cfg.failureGraceMs;
      }
      if (finished.size() == n || cfg.failureGraceMs == 0) {
        blame();
      }
      return;
    }
    ended(rank);
  }

  /** Worker {@code rank} ended successfully (its container exited 0, or it reported DONE). */
  private void ended(int rank) {
    finished.put(rank, true);
    if (decideAt != 0) {
      if (finished.size() == n) {
        blame();
      }
      return;
    }
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

  /**
   * Fails the job, blaming the worker that failed first: among the failed ones, the first whose
   * ending arrived without a failure report of its own (it was killed or crashed: its peers then
   * fail reporting it gone, and their endings may arrive first); else the first ended by a signal
   * or by YARN (its shutdown may still have produced a report); else the one the reports name as
   * gone or silent; else the one they name as the worker whose failure they share ("worker 0
   * failed: …", the engine's words for an error every worker agreed on); else the first to report.
   */
  private void blame() {
    Failure silent = null;
    for (Failure f : failures) {
      if (!reports.containsKey(f.rank())) {
        silent = f;
        break;
      }
    }
    Failure signalled = null;
    for (Failure f : failures) {
      if (killedFromOutside(f.exitStatus())) {
        signalled = f;
        break;
      }
    }
    int rank;
    int accused = accused();
    int origin = origin();
    if (silent != null) {
      rank = silent.rank();
    } else if (signalled != null) {
      rank = signalled.rank();
    } else if (accused >= 0) {
      rank = accused;
    } else if (origin >= 0) {
      rank = origin;
    } else if (!reports.isEmpty()) {
      rank = reports.keySet().iterator().next();
    } else {
      rank = failures.get(0).rank();
    }
    Failure mine = null;
    for (Failure f : failures) {
      if (f.rank() == rank) {
        mine = f;
      }
    }
    Container c = held.get(rank);
    StringBuilder d = new StringBuilder("worker ").append(rank);
    if (c != null) {
      d.append(" (container ").append(c.id()).append(" on ").append(c.node()).append(')');
    }
    d.append(mine == null || mine.exitStatus() == NO_EXIT_STATUS ? " failed"
        : " failed with exit status " + mine.exitStatus() + describe(mine.exitStatus()));
    if (reports.containsKey(rank)) {
      d.append(": ").append(reports.get(rank));
    }
    if (mine != null && mine.why() != null && !strip(mine.why()).isEmpty()) {
      d.append(reports.containsKey(rank) ? "\nits container: " : ": ").append(tail(mine.why(), 20));
    }
    List<Integer> others = new ArrayList<>();
    for (Failure f : failures) {
      if (f.rank() != rank && !others.contains(f.rank())) {
        others.add(f.rank());
      }
    }
    if (!others.isEmpty()) {
      d.append("\nthen worker(s) ").append(others).append(" failed");
    }
    for (Map.Entry<Integer, String> e : reports.entrySet()) {
      if (e.getKey() != rank) {
        d.append("\nworker ").append(e.getKey()).append(" reported: ").append(e.getValue());
        break;
      }
    }
    fail(d.toString());
  }

  private static final java.util.regex.Pattern GONE =
      java.util.regex.Pattern.compile("rank (\\d+) (?:is gone|has been silent)");

  private static final java.util.regex.Pattern ORIGIN =
      java.util.regex.Pattern.compile("^(?:in [^:]*: )?worker (\\d+) failed\\b");

  /**
   * The worker whose failure the others report as theirs ("worker 0 failed: cannot read …"), when
   * its own report says something else (it does not name another worker), or -1.
   */
  private int origin() {
    for (Map.Entry<Integer, String> e : reports.entrySet()) {
      java.util.regex.Matcher m = ORIGIN.matcher(e.getValue());
      if (m.find()) {
        int x = Integer.parseInt(m.group(1));
        if (x >= 0 && x < n && x != e.getKey() && !ORIGIN.matcher(reports.getOrDefault(x, "")).find()) {
          return x;
        }
      }
    }
    return -1;
  }

  /** The rank the failure reports name most often as gone or silent (not itself a reporter), or -1. */
  private int accused() {
    Map<Integer, Integer> votes = new java.util.LinkedHashMap<>();
    for (String r : reports.values()) {
      java.util.regex.Matcher m = GONE.matcher(r);
      if (m.find()) {
        int x = Integer.parseInt(m.group(1));
        if (x >= 0 && x < n && !reports.containsKey(x)) {
          votes.merge(x, 1, Integer::sum);
        }
      }
    }
    int best = -1;
    for (Map.Entry<Integer, Integer> e : votes.entrySet()) {
      if (best < 0 || e.getValue() > votes.get(best)) {
        best = e.getKey();
      }
    }
    return best;
  }

  /**
   * A worker ended by a signal or by YARN (killed, out of memory, lost node), as opposed to
   * exiting with an error of its own: its report, if its shutdown still produced one, is a
   * consequence.
   */
  static boolean killedFromOutside(int exitStatus) {
    return exitStatus > 128 || (exitStatus < 0 && exitStatus != -105 && exitStatus != -100);
  }

  /** What an exit status means, for the diagnostics (YARN's special codes and signals). */
  static String describe(int exitStatus) {
    switch (exitStatus) {
      case 137:
        return " (killed: SIGKILL)";
      case 143:
        return " (killed: SIGTERM)";
      case -100:
        return " (container released)";
      case -101:
        return " (disks failed)";
      case -102:
      case -103:
        return " (preempted)";
      case -104:
        return " (exceeded its physical memory limit)";
      case -105:
        return " (killed by the application master)";
      case -106:
        return " (killed by the ResourceManager)";
      case -107:
        return " (killed: application finished)";
      case -1:
        return " (could not be launched or lost)";
      default:
        return "";
    }
  }

  /** {@code s} without leading and trailing white space ({@link Character#isWhitespace}), as Java 11's {@code strip}. */
  static String strip(String s) {
    int from = 0;
    int to = s.length();
    while (from < to && Character.isWhitespace(s.codePointAt(from))) {
      from += Character.charCount(s.codePointAt(from));
    }
    while (to > from && Character.isWhitespace(s.codePointBefore(to))) {
      to -= Character.charCount(s.codePointBefore(to));
    }
    return s.substring(from, to);
  }

  /** The last {@code lines} lines of {@code text}, at most 4000 characters. */
  static String tail(String text, int lines) {
    String t = strip(text);
    int at = t.length();
    for (int i = 0; i < lines && at > 0; i++) {
      at = t.lastIndexOf('\n', at - 1);
      if (at < 0) {
        at = 0;
        break;
      }
    }
    String s = t.substring(at == 0 ? 0 : at + 1);
    return s.length() > 4000 ? "..." + s.substring(s.length() - 4000) : s;
  }

  /** A client asked to kill the job: it ends like a failure, but KILLED. */
  public synchronized void kill(String why) {
    if (state != State.SUCCEEDED && state != State.FAILED) {
      killed = true;
      fail(why);
    }
  }

  /** True if the job ended because a client killed it. */
  public synchronized boolean killed() {
    return killed;
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
    if (killed) {
      rm.finishKilled(why);
    } else {
      rm.finish(false, why);
    }
  }
}
