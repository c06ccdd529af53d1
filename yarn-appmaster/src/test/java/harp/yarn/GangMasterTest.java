package harp.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
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
    GangMaster m = new GangMaster(cfg(1), f, f, f, "s");
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
    GangMaster m = new GangMaster(cfg(2), f, f, f, "s");
    m.start(0, nodes(1), groups(2));
    m.onAllocated(new GangMaster.Container("a", "node0"));
    m.onAllocated(new GangMaster.Container("b", "node0"));
    assertEquals(2, f.launched.size());
    Fake g = new Fake();
    GangMaster one = new GangMaster(cfg(1), g, g, g, "s");
    one.start(0, nodes(1), groups(2));
    assertEquals(false, g.succeeded);
    assertTrue(g.diagnostics.contains("cluster has 1 usable nodes") && g.diagnostics.contains(AmConfig.WORKERS_PER_NODE),
        g.diagnostics);
  }

  @Test
  void aGangThatCannotBePlacedInTimeReleasesEverythingAndFails() {
    Fake f = new Fake();
    GangMaster m = new GangMaster(cfg(1), f, f, f, "s");
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
    GangMaster m = new GangMaster(cfg(1), f, f, f, "secret");
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
    assertEquals(List.of("h0:7000", "h1:7001", "h2:7002").subList(0, Math.min(3, n)), roster.get().hosts().subList(0, Math.min(3, n)));
    assertEquals("secret", roster.get().secret());
    return m;
  }

  @Test
  void anyWorkerFailureStopsAllOthersAndFailsTheJobWithItsDiagnostics() {
    Fake f = new Fake();
    GangMaster m = running(f, 4);
    m.onCompleted("c0", 0, "");
    m.onCompleted("c2", 143, "killed by the NodeManager");
    assertEquals(false, f.succeeded);
    assertTrue(f.diagnostics.startsWith("worker 2 (container c2 on "), f.diagnostics);
    assertTrue(f.diagnostics.endsWith("failed with exit status 143: killed by the NodeManager"), f.diagnostics);
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
    GangMaster m = new GangMaster(cfg(1), f, f, f, "s");
    m.start(0, nodes(2), groups(2));
    m.onAllocated(new GangMaster.Container("a", f.requests.get(0).split("[@:]")[1]));
    m.onAllocated(new GangMaster.Container("b", f.requests.get(1).split("[@:]")[1]));
    m.onRegistered(0, "h:1");
    m.onTick(120_000);
    assertEquals("only 1 of 2 workers registered within 120 s of being launched", f.diagnostics);
    assertEquals(List.of("a", "b"), f.stopped);
  }
}
