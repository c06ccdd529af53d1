package harp.yarn;

import java.nio.ByteBuffer;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.Container;
import org.apache.hadoop.yarn.api.records.ContainerId;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.ContainerStatus;
import org.apache.hadoop.yarn.api.records.FinalApplicationStatus;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.Priority;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.api.records.UpdatedContainer;
import org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest;
import org.apache.hadoop.yarn.client.api.async.AMRMClientAsync;
import org.apache.hadoop.yarn.client.api.async.NMClientAsync;

/**
 * {@link AppMaster.Port} over YARN's asynchronous clients: container requests pinned to one node
 * (no relaxed locality; the allocation request id is the worker's rank), launches and stops
 * through the NodeManagers, and the final status when the master unregisters. Every
 * {@link #STATUS_EVERY_MS} the NodeManager of each running container is asked for its status: one
 * that does not answer within {@link #NM_WAIT_MS} (its process died, its node is cut off) is
 * reported unreachable long before the ResourceManager declares the node lost.
 */
final class YarnPort implements AppMaster.Port {
  private final Configuration conf;
  private final Map<String, Container> containers = new ConcurrentHashMap<>();
  private AMRMClientAsync<ContainerRequest> amrm;
  private NMClientAsync nm;
  private volatile AppMaster.Events events;
  /** Containers started and not yet completed, and those with a status request outstanding. */
  private final java.util.Set<String> live = ConcurrentHashMap.newKeySet();
  private final java.util.Set<String> asking = ConcurrentHashMap.newKeySet();
  private java.util.concurrent.ScheduledExecutorService poller;

  /** How often the NodeManagers of running containers are asked for their status. */
  static final long STATUS_EVERY_MS = 5_000;
  /** How long the NodeManager client tries to reach a NodeManager (YARN's default: 3 minutes). */
  static final long NM_WAIT_MS = 10_000;

  YarnPort(Configuration conf) {
    this.conf = conf;
  }

  @Override
  public void start(AppMaster.Events ev, String host, int rpcPort) throws Exception {
    this.events = ev;
    amrm = AMRMClientAsync.createAMRMClientAsync(500, new AMRMClientAsync.AbstractCallbackHandler() {
      @Override
      public void onContainersAllocated(List<Container> list) {
        for (Container c : list) {
          containers.put(c.getId().toString(), c);
          Collection<ContainerRequest> matching = amrm.getMatchingRequests(c.getAllocationRequestId());
          if (!matching.isEmpty()) {
            amrm.removeContainerRequest(matching.iterator().next());
          }
          events.allocated(c.getId().toString(), c.getNodeId().getHost());
        }
      }

      @Override
      public void onContainersCompleted(List<ContainerStatus> list) {
        for (ContainerStatus s : list) {
          live.remove(s.getContainerId().toString());
          events.completed(s.getContainerId().toString(), s.getExitStatus(), s.getDiagnostics());
        }
      }

      @Override
      public void onContainersUpdated(List<UpdatedContainer> list) {}

      @Override
      public void onShutdownRequest() {
        events.failed("the ResourceManager asked the application master to shut down");
      }

      @Override
      public void onNodesUpdated(List<NodeReport> list) {
        for (NodeReport r : list) {
          if (r.getNodeState() != null && r.getNodeState().isUnusable() && r.getNodeId() != null) {
            events.nodeUnusable(r.getNodeId().getHost());
          }
        }
      }

      @Override
      public float getProgress() {
        return events.progress();
      }

      @Override
      public void onError(Throwable t) {
        events.failed("lost the ResourceManager: " + t);
      }
    });
    amrm.init(conf);
    amrm.start();
    nm = NMClientAsync.createNMClientAsync(new NmHandler());
    Configuration nmConf = new Configuration(conf);
    nmConf.setLong("yarn.client.nodemanager-connect.max-wait-ms", NM_WAIT_MS);
    nmConf.setLong("yarn.client.nodemanager-connect.retry-interval-ms", 2_000);
    nm.init(nmConf);
    nm.start();
    amrm.registerApplicationMaster(host, rpcPort, "");
    poller = java.util.concurrent.Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "harp-am-nm-status");
      t.setDaemon(true);
      return t;
    });
    poller.scheduleWithFixedDelay(this::askStatus, STATUS_EVERY_MS, STATUS_EVERY_MS,
        java.util.concurrent.TimeUnit.MILLISECONDS);
  }

  private void askStatus() {
    for (String id : live) {
      Container c = containers.get(id);
      if (c != null && asking.add(id)) {
        nm.getContainerStatusAsync(c.getId(), c.getNodeId());
      }
    }
  }

  private String nodeOf(ContainerId id) {
    Container c = containers.get(id.toString());
    return c == null ? null : c.getNodeId().getHost();
  }

  /** Only a failed start matters: it fails the worker (and so the job). */
  @SuppressWarnings("deprecation")
  private final class NmHandler extends NMClientAsync.AbstractCallbackHandler {
    @Override
    public void onContainerStarted(ContainerId id, Map<String, ByteBuffer> data) {
      live.add(id.toString());
    }

    @Override
    public void onContainerStatusReceived(ContainerId id, ContainerStatus status) {
      asking.remove(id.toString());
      String node = nodeOf(id);
      if (node != null) {
        events.nodeReachable(node);
      }
    }

    @Override
    public void onContainerStopped(ContainerId id) {}

    @Override
    public void onStartContainerError(ContainerId id, Throwable t) {
      events.completed(id.toString(), -1, "the NodeManager could not start the container: " + t);
    }

    @Override
    public void onContainerResourceIncreased(ContainerId id, Resource r) {}

    @Override
    public void onContainerResourceUpdated(ContainerId id, Resource r) {}

    @Override
    public void onGetContainerStatusError(ContainerId id, Throwable t) {
      asking.remove(id.toString());
      String node = nodeOf(id);
      if (node != null && live.contains(id.toString())) {
        System.err.println("harp master: the NodeManager on " + node + " did not answer for " + id + ": " + t);
        events.nodeUnreachable(node);
      }
    }

    @Override
    public void onIncreaseContainerResourceError(ContainerId id, Throwable t) {}

    @Override
    public void onUpdateContainerResourceError(ContainerId id, Throwable t) {}

    @Override
    public void onStopContainerError(ContainerId id, Throwable t) {
      System.err.println("harp master: stopping " + id + " failed: " + t);
    }
  }

  @Override
  public void request(int worker, String node, int memoryMb, int vcores) {
    // A worker asked for again (its node was lost) no longer waits on the old node.
    for (ContainerRequest old : new java.util.ArrayList<>(amrm.getMatchingRequests(worker))) {
      amrm.removeContainerRequest(old);
    }
    amrm.addContainerRequest(new ContainerRequest(Resource.newInstance(memoryMb, vcores), new String[] {node}, null,
        Priority.newInstance(1), worker, false, null));
  }

  @Override
  public void release(String containerId) {
    amrm.releaseAssignedContainer(ContainerId.fromString(containerId));
  }

  @Override
  public void launch(String containerId, ContainerLaunchContext ctx) {
    nm.startContainerAsync(containers.get(containerId), ctx);
  }

  @Override
  public void stop(String containerId) {
    Container c = containers.get(containerId);
    if (c != null) {
      nm.stopContainerAsync(c.getId(), c.getNodeId());
    }
  }

  @Override
  public void finish(boolean succeeded, String diagnostics) {
    try {
      amrm.unregisterApplicationMaster(succeeded ? FinalApplicationStatus.SUCCEEDED : FinalApplicationStatus.FAILED,
          diagnostics, "");
    } catch (Exception e) {
      System.err.println("harp master: unregistering failed: " + e);
    }
  }

  @Override
  public void finishKilled(String diagnostics) {
    try {
      amrm.unregisterApplicationMaster(FinalApplicationStatus.KILLED, diagnostics, "");
    } catch (Exception e) {
      System.err.println("harp master: unregistering failed: " + e);
    }
  }

  @Override
  public List<YarnSubmitter.Node> runningNodes() throws Exception {
    try (YarnRm rm = new YarnRm(conf)) {
      return rm.runningNodes();
    }
  }

  @Override
  public void close() {
    if (poller != null) {
      poller.shutdownNow();
    }
    if (nm != null) {
      nm.stop();
    }
    if (amrm != null) {
      amrm.stop();
    }
  }
}
