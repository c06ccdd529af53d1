package harp.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/** The application master's decisions, driven through fakes of YARN. */
class GangMasterTest {
  static final class Fake implements GangMaster.ResourceManager, GangMaster.NodeManager, GangMaster.Committer {
    final List<String> requests = new ArrayList<>();
    final List<String> released = new ArrayList<>();
    final List<String> launched = new ArrayList<>();
    final List<String> stopped = new ArrayList<>();
    final List<String> events = new ArrayList<>();
    Boolean succeeded;
    String diagnostics;
    boolean failCommit;

    @Override
    public void request(int worker, String node, int memoryMb, int vcores) {
      requests.add(worker + "@" + node + ":" + memoryMb + "/" + vcores);
    }

    @Override
    public void release(String id) {
      released.add(id);
    }

    @Override
    public void finish(boolean ok, String diag) {
      succeeded = ok;
      diagnostics = diag;
      events.add("finish:" + ok);
    }

    @Override
    public void launch(String id, String node, int rank) {
      launched.add(rank + "=" + id + "@" + node);
    }

    @Override
    public void stop(String id) {
      stopped.add(id);
    }

    @Override
    public void commit() throws Exception {
      if (failCommit) {
        throw new Exception("disk full");
      }
      events.add("commit");
    }

    @Override
    public void abort() {
      events.add("abort");
    }

    @Override
    public void cleanupStaging() {
      events.add("cleanup");
    }
  }

  static List<SplitGrouper.Group> groups(int n) {
    List<SplitGrouper.Group> g = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      g.add(new SplitGrouper.Group(i, null, List.of(), 0));
    }
    return g;
  }

  static AmConfig cfg(int perNode) {
    return new AmConfig(0, 1024, 2, 120_000, perNode);
  }

  static List<String> nodes(int n) {
    List<String> out = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      out.add("node" + i);
    }
    return out;
  }

  @Test
  void workersAreRequestedOnDistinctNodesAndLaunchedOnlyWhenAllAreHeld() {
    Fake f = new Fake();
    GangMaster m = new GangMaster(cfg(1), f, f, f);
    m.start(0, nodes(6), groups(4));
    assertEquals(4, f.requests.size());
    HashSet<String> distinct = new HashSet<>();
    for (String r : f.requests) {
      distinct.add(r.substring(r.indexOf('@') + 1, r.indexOf(':')));
      assertTrue(r.endsWith(":1024/2"), r);
    }
    assertEquals(4, distinct.size(), "no two workers on one node: " + f.requests);
    List<String> targets = new ArrayList<>();
    for (String r : f.requests) {
      targets.add(r.substring(r.indexOf('@') + 1, r.indexOf(':')));
    }
    m.onAllocated(new GangMaster.Container("c0", targets.get(0)));
    m.onAllocated(new GangMaster.Container("c0b", targets.get(0))); // a second one on the same node
    m.onAllocated(new GangMaster.Container("cx", "node5-not-requested"));
    m.onAllocated(new GangMaster.Container("c1", targets.get(1)));
    m.onAllocated(new GangMaster.Container("c2", targets.get(2)));
    assertEquals(List.of("c0b", "cx"), f.released);
    assertTrue(f.launched.isEmpty(), "nothing may start before the whole gang is held");
    m.onAllocated(new GangMaster.Container("c3", targets.get(3)));
    assertEquals(4, f.launched.size());
    assertEquals(GangMaster.State.STARTING, m.state());
  }

  @Test
  void severalWorkersPerNodeWhenExplicitlyAllowed() {
    Fake f = new Fake();
    GangMaster m = new GangMaster(cfg(2), f, f, f);
    m.start(0, nodes(1), groups(2));
    m.onAllocated(new GangMaster.Container("a", "node0"));
    m.onAllocated(new GangMaster.Container("b", "node0"));
    assertEquals(2, f.launched.size());
    Fake g = new Fake();
    GangMaster one = new GangMaster(cfg(1), g, g, g);
    one.start(0, nodes(1), groups(2));
    assertEquals(false, g.succeeded);
    assertTrue(g.diagnostics.contains("cluster has 1 usable nodes") && g.diagnostics.contains(AmConfig.WORKERS_PER_NODE),
        g.diagnostics);
  }

  @Test
  void aGangThatCannotBePlacedInTimeReleasesEverythingAndFails() {
    Fake f = new Fake();
    GangMaster m = new GangMaster(cfg(1), f, f, f);
    m.start(1_000, nodes(8), groups(8));
    for (int i = 0; i < 3; i++) {
      String r = f.requests.get(i);
      m.onAllocated(new GangMaster.Container("c" + i, r.substring(r.indexOf('@') + 1, r.indexOf(':'))));
    }
    m.onTick(120_999);
    assertEquals(null, f.succeeded);
    m.onTick(121_000);
    assertEquals(false, f.succeeded);
    assertEquals("only 3 of 8 workers could be placed after 120 s (cluster has 8 usable nodes)", f.diagnostics);
    assertEquals(List.of("c0", "c1", "c2"), f.released);
    assertTrue(f.launched.isEmpty());
  }

  private static GangMaster running(Fake f, int n) {
    GangMaster m = new GangMaster(cfg(1), f, f, f);
    m.start(0, nodes(n), groups(n));
    for (int i = 0; i < n; i++) {
      String r = f.requests.get(i);
      m.onAllocated(new GangMaster.Container("c" + i, r.substring(r.indexOf('@') + 1, r.indexOf(':'))));
    }
    Optional<GangMaster.Roster> roster = Optional.empty();
    for (int i = n - 1; i >= 0; i--) {
      assertTrue(roster.isEmpty());
      roster = m.onRegistered(i, "h" + i + ":" + (7000 + i));
    }
    assertEquals(List.of("h0:7000 /default-rack", "h1:7001 /default-rack", "h2:7002 /default-rack")
        .subList(0, Math.min(3, n)), roster.get().hosts().subList(0, Math.min(3, n)));
    return m;
  }

  @Test
  void anyWorkerFailureStopsAllOthersAndFailsTheJobWithItsDiagnostics() {
    Fake f = new Fake();
    GangMaster m = running(f, 4);
    m.onCompleted("c0", 0, "");
    m.onCompleted("c2", 143, "killed by the NodeManager");
    assertEquals(null, f.succeeded, "the master waits the failure grace for the other endings");
    m.onTick(2_000);
    assertEquals(false, f.succeeded);
    assertTrue(f.diagnostics.startsWith("worker 2 (container c2 on "), f.diagnostics);
    assertTrue(f.diagnostics.endsWith("failed with exit status 143 (killed: SIGTERM): killed by the NodeManager"),
        f.diagnostics);
    assertEquals(List.of("c1", "c3"), f.stopped, "the finished and the failed one are not stopped again");
    assertEquals(List.of("abort", "cleanup", "finish:false"), f.events);
    m.onCompleted("c1", 0, "");
    assertEquals(1, f.events.stream().filter(e -> e.startsWith("finish")).count());
  }

  @Test
  void successCommitsCleansUpAndSucceeds() {
    Fake f = new Fake();
    GangMaster m = running(f, 3);
    m.onCompleted("c1", 0, "");
    m.onCompleted("c0", 0, "");
    assertEquals(null, f.succeeded);
    m.onCompleted("c2", 0, "");
    assertEquals(List.of("commit", "cleanup", "finish:true"), f.events);
    assertEquals(GangMaster.State.SUCCEEDED, m.state());
  }

  @Test
  void aFailedCommitFailsTheJob() {
    Fake f = new Fake();
    f.failCommit = true;
    GangMaster m = running(f, 2);
    m.onCompleted("c0", 0, "");
    m.onCompleted("c1", 0, "");
    assertEquals(false, f.succeeded);
    assertTrue(f.diagnostics.contains("disk full"), f.diagnostics);
  }

  @Test
  void workersThatDoNotRegisterInTimeFailTheJob() {
    Fake f = new Fake();
    GangMaster m = new GangMaster(cfg(1), f, f, f);
    m.start(0, nodes(2), groups(2));
    m.onAllocated(new GangMaster.Container("a", f.requests.get(0).split("[@:]")[1]));
    m.onAllocated(new GangMaster.Container("b", f.requests.get(1).split("[@:]")[1]));
    m.onRegistered(0, "h:1");
    m.onTick(120_000);
    assertEquals("only 1 of 2 workers registered within 120 s of being launched", f.diagnostics);
    assertEquals(List.of("a", "b"), f.stopped);
  }

  @Test
  void aHostListedTwiceCountsOnceAndNoWorkerIsRequestedOnANullNode() {
    // A restarted NodeManager: the ResourceManager lists its host twice (two NodeIds).
    Fake f = new Fake();
    GangMaster m = new GangMaster(cfg(1), f, f, f);
    m.start(0, List.of("node0", "node1", "node1"), groups(3));
    assertEquals(false, f.succeeded);
    assertTrue(f.diagnostics.contains("3 workers need 3 nodes") && f.diagnostics.contains("2 usable nodes"),
        f.diagnostics);
    assertEquals(List.of(), f.requests);
    Fake g = new Fake();
    GangMaster two = new GangMaster(cfg(1), g, g, g);
    two.start(0, List.of("node0", "node1", "node1"), groups(2));
    assertEquals(List.of("0@node0:1024/2", "1@node1:1024/2"), g.requests.stream().sorted().collect(java.util.stream.Collectors.toList()));
  }

  /** Workers 0 and 2 fail in a collective reporting rank 1 gone, and their containers end. */
  private static void survivorsReportAndEnd(GangMaster m) {
    for (int r : new int[] {0, 2}) {
      m.onFailureReport(r, "in allreduce: allreduce 'acc' #4: rank 1 is gone: connection reset");
    }
    m.onCompleted("c0", 1, "harp worker 0 failed");
    m.onCompleted("c2", 1, "harp worker 2 failed");
  }

  @Test
  void aKilledWorkerIsBlamedEvenWhenItsPeersEndingsArriveFirst() {
    Fake f = new Fake();
    GangMaster m = running(f, 3);
    // Worker 1 is killed; 0 and 2 fail in a collective, say so, and their endings arrive first.
    survivorsReportAndEnd(m);
    assertEquals(null, f.succeeded);
    m.onCompleted("c1", 137, "line 1\nContainer killed on request. Exit code is 137");
    assertEquals(false, f.succeeded, "every worker has ended: the master decides at once");
    assertTrue(f.diagnostics.startsWith("worker 1 (container c1 on "), f.diagnostics);
    assertTrue(f.diagnostics.contains("exit status 137 (killed: SIGKILL)"), f.diagnostics);
    assertTrue(f.diagnostics.contains("then worker(s) [0, 2] failed"), f.diagnostics);
    assertTrue(f.diagnostics.contains("worker 0 reported: in allreduce"), f.diagnostics);
  }

  @Test
  void aWorkerKilledBySignalIsBlamedEvenIfItsShutdownReportedAnError() {
    Fake f = new Fake();
    GangMaster m = running(f, 3);
    // SIGTERM from the NodeManager: the JVM's shutdown closed its file systems, its code failed.
    m.onFailureReport(1, "java.io.IOException: Filesystem closed");
    survivorsReportAndEnd(m);
    m.onCompleted("c1", 143, "Killed by external signal");
    assertTrue(f.diagnostics.startsWith("worker 1 (container c1"), f.diagnostics);
    assertTrue(GangMaster.killedFromOutside(137) && GangMaster.killedFromOutside(-104));
    assertFalse(GangMaster.killedFromOutside(1) || GangMaster.killedFromOutside(-105));
  }

  @Test
  void aWorkerReportedGoneIsBlamedWhenItsOwnEndingHasNotArrivedWithinTheGrace() {
    Fake f = new Fake();
    GangMaster m = running(f, 3);
    m.onFailureReport(2, "in barrier: barrier #1: rank 0 has been silent for 10.0 s (no data, no heartbeat)");
    m.onCompleted("c2", 1, "harp worker 2 failed");
    m.onCompleted("c1", 1, "harp worker 1 failed"); // no report: but 0 is the one accused
    m.onTick(1_000);
    assertEquals(null, f.succeeded);
    m.onTick(2_000);
    assertEquals(false, f.succeeded);
    assertTrue(f.diagnostics.startsWith("worker 1 (container c1"), "a silent failure outranks an accusation: "
        + f.diagnostics);
    Fake g = new Fake();
    GangMaster n = running(g, 3);
    n.onFailureReport(2, "in barrier: barrier #1: rank 0 has been silent for 10.0 s (no data, no heartbeat)");
    n.onFailureReport(1, "in barrier: barrier #1: rank 0 has been silent for 10.0 s (no data, no heartbeat)");
    n.onCompleted("c2", 1, "");
    n.onTick(2_000);
    assertTrue(g.diagnostics.startsWith("worker 0 (container c0 on "), g.diagnostics);
    assertTrue(g.stopped.contains("c0") && g.stopped.contains("c1"), g.stopped.toString());
  }

  @Test
  void progressIsTheMeanOfTheWorkersReportsAndAFailedJobKeepsIt() {
    Fake f = new Fake();
    GangMaster m = running(f, 2);
    assertEquals(0.1f, m.progress(), 1e-6);
    m.onProgress(0, 5, 10);
    assertEquals(0.1f + 0.9f * 0.25f, m.progress(), 1e-6);
    m.onProgress(1, 10, 10);
    m.onProgress(7, 10, 10); // no such worker: ignored
    assertEquals(0.1f + 0.9f * 0.75f, m.progress(), 1e-6);
    m.onCompleted("c0", 3, "boom");
    m.onTick(5_000);
    assertEquals(GangMaster.State.FAILED, m.state());
    assertEquals(0.1f + 0.9f * 0.75f, m.progress(), 1e-6);
  }

  @Test
  void theRosterCarriesEachWorkersRack() {
    Fake f = new Fake();
    GangMaster m = new GangMaster(cfg(1), f, f, f);
    m.start(0, List.of("a", "b", "c"), java.util.Map.of("a", "/r1", "b", "/r2", "c", "/r1"), groups(3));
    for (String r : f.requests) {
      m.onAllocated(new GangMaster.Container("c" + r.charAt(0), r.substring(r.indexOf('@') + 1, r.indexOf(':'))));
    }
    Optional<GangMaster.Roster> roster = Optional.empty();
    for (int i = 0; i < 3; i++) {
      roster = m.onRegistered(i, "h" + i + ":1");
    }
    List<String> hosts = roster.get().hosts();
    java.util.Map<String, String> rack = java.util.Map.of("a", "/r1", "b", "/r2", "c", "/r1");
    for (String r : f.requests) {
      int w = Integer.parseInt(r.substring(0, r.indexOf('@')));
      String node = r.substring(r.indexOf('@') + 1, r.indexOf(':'));
      assertEquals("h" + w + ":1 " + rack.get(node), hosts.get(w));
    }
  }

  /** The node the container of worker {@code rank} runs on ({@link #running}). */
  private static String nodeOf(Fake f, int rank) {
    for (String r : f.requests) {
      if (r.startsWith(rank + "@")) {
        return r.substring(r.indexOf('@') + 1, r.indexOf(':'));
      }
    }
    throw new AssertionError("no request for worker " + rank);
  }

  @Test
  void workersThatReportedTheirResultAreDoneWhateverYarnLaterSaysOfTheirContainers() {
    Fake f = new Fake();
    GangMaster m = running(f, 3);
    // The NodeManager of worker 0's node died; its container ran on, finished and reported.
    m.onDoneReport(0);
    m.onCompleted("c1", 0, "");
    assertEquals(null, f.succeeded, "worker 2 has not finished");
    m.onDoneReport(2);
    assertEquals(List.of("commit", "cleanup", "finish:true"), f.events,
        "every worker reported its result: the job succeeds without waiting for YARN's lost-node expiry");
    // Ten minutes later YARN releases the containers of the lost node: nothing changes.
    m.onCompleted("c0", -100, "Container released on a *lost* node");
    assertEquals(GangMaster.State.SUCCEEDED, m.state());
    assertEquals(List.of(), f.stopped);
  }

  @Test
  void aWorkerOnAnUnreachableNodeThatDoesNotReportIsFailedWithinTheCollectiveTimeout() {
    Fake f = new Fake();
    GangMaster m = new GangMaster(new AmConfig(0, 1024, 2, 120_000, 1, 2_000, 30_000), f, f, f);
    m.start(0, nodes(3), groups(3));
    for (int i = 0; i < 3; i++) {
      m.onAllocated(new GangMaster.Container("c" + i, nodeOf(f, i)));
    }
    for (int i = 0; i < 3; i++) {
      m.onRegistered(i, "h" + i + ":1");
    }
    m.onDoneReport(0);
    m.onDoneReport(2);
    m.onNodeUnreachable(nodeOf(f, 1), 10_000);
    m.onNodeUnreachable(nodeOf(f, 0), 10_000); // worker 0 reported: not suspected
    m.onTick(39_999);
    assertEquals(null, f.succeeded, "the collective timeout has not passed");
    m.onTick(40_000);
    assertEquals(false, f.succeeded);
    assertTrue(f.diagnostics.startsWith("worker 1 (container c1 on " + nodeOf(f, 1) + ") failed: its NodeManager on "
        + nodeOf(f, 1) + " has been unreachable for 30 s and it has not reported its result"), f.diagnostics);
    assertEquals(List.of("abort", "cleanup", "finish:false"), f.events);
    // A NodeManager that answers again clears the suspicion.
    Fake g = new Fake();
    GangMaster again = running(g, 2);
    again.onNodeUnreachable(nodeOf(g, 1), 0);
    again.onNodeReachable(nodeOf(g, 1));
    again.onTick(1_000_000);
    assertEquals(GangMaster.State.RUNNING, again.state());
  }

  @Test
  void theWorkerWhoseFailureTheOthersShareIsBlamedNotTheFirstToReport() {
    Fake f = new Fake();
    GangMaster m = running(f, 3);
    // Worker 0 cannot read the centroids; the engine tells every worker, which all fail with it.
    m.onFailureReport(1, "in kmeans: worker 0 failed: cannot read hdfs://nn/no-such-init.txt: file not found");
    m.onFailureReport(2, "in kmeans: worker 0 failed: cannot read hdfs://nn/no-such-init.txt: file not found");
    m.onFailureReport(0, "in kmeans: cannot read hdfs://nn/no-such-init.txt: file not found");
    m.onCompleted("c1", 1, "harp worker 1 failed");
    m.onCompleted("c2", 1, "harp worker 2 failed");
    m.onCompleted("c0", 1, "harp worker 0 failed");
    assertEquals(false, f.succeeded);
    assertTrue(f.diagnostics.startsWith("worker 0 (container c0 on " + nodeOf(f, 0)
        + ") failed with exit status 1: in kmeans: cannot read hdfs://nn/no-such-init.txt"), f.diagnostics);
  }

  @Test
  void aNodeLostWhileTheGangIsPlacedIsReplacedByAnotherOrFailsTheJob() {
    Fake f = new Fake();
    GangMaster m = new GangMaster(cfg(1), f, f, f);
    m.start(0, nodes(3), groups(2));
    String lost = nodeOf(f, 0);
    m.onAllocated(new GangMaster.Container("c1", nodeOf(f, 1)));
    m.onNodeUnusable(lost);
    assertEquals(3, f.requests.size(), "worker 0 is asked for again: " + f.requests);
    String moved = f.requests.get(2);
    assertTrue(moved.startsWith("0@") && !moved.contains(lost) && !moved.contains(nodeOf(f, 1) + ":"), moved);
    m.onAllocated(new GangMaster.Container("c0", moved.substring(2, moved.indexOf(':'))));
    assertEquals(GangMaster.State.STARTING, m.state());
    assertEquals(2, f.launched.size());
    // No node left to move to: the gang diagnostic, naming the lost node.
    Fake g = new Fake();
    GangMaster two = new GangMaster(cfg(1), g, g, g);
    two.start(0, nodes(2), groups(2));
    two.onNodeUnusable(nodeOf(g, 1));
    assertEquals(false, g.succeeded);
    assertTrue(g.diagnostics.contains("2 workers need 2 nodes") && g.diagnostics.contains("1 usable nodes (")
        && g.diagnostics.contains(" was lost while the workers were placed)"), g.diagnostics);
  }
}
