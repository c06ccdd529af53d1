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
 * through the NodeManagers, and the final status when the master unregisters.
 */
final class YarnPort implements AppMaster.Port {
  private final Configuration conf;
  private final Map<String, Container> containers = new ConcurrentHashMap<>();
  private AMRMClientAsync<ContainerRequest> amrm;
  private NMClientAsync nm;
  private volatile AppMaster.Events events;

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
      public void onNodesUpdated(List<NodeReport> list) {}

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
    nm.init(conf);
    nm.start();
    amrm.registerApplicationMaster(host, rpcPort, "");
  }

  /** Only a failed start matters: it fails the worker (and so the job). */
  @SuppressWarnings("deprecation")
  private final class NmHandler extends NMClientAsync.AbstractCallbackHandler {
    @Override
    public void onContainerStarted(ContainerId id, Map<String, ByteBuffer> data) {}

    @Override
    public void onContainerStatusReceived(ContainerId id, ContainerStatus status) {}

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
    public void onGetContainerStatusError(ContainerId id, Throwable t) {}

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
  public void close() {
    if (nm != null) {
      nm.stop();
    }
    if (amrm != null) {
      amrm.stop();
    }
  }
}
