package harp.yarn;

import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationReport;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.NodeReport;
import org.apache.hadoop.yarn.api.records.NodeState;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.exceptions.YarnException;

/** {@link YarnSubmitter.Rm} over Hadoop's {@link YarnClient}. */
final class YarnRm implements YarnSubmitter.Rm {
  private final YarnClient client;

  YarnRm(Configuration conf) {
    client = YarnClient.createYarnClient();
    client.init(conf);
    client.start();
  }

  @Override
  public ApplicationId newApplication() throws IOException {
    try {
      return client.createApplication().getNewApplicationResponse().getApplicationId();
    } catch (YarnException e) {
      throw new IOException(e);
    }
  }

  @Override
  public List<YarnSubmitter.Node> runningNodes() throws IOException {
    try {
      // A restarted NodeManager can be listed twice (two NodeIds, one host): keep the host once.
      Map<String, YarnSubmitter.Node> nodes = new LinkedHashMap<>();
      for (NodeReport r : client.getNodeReports(NodeState.RUNNING)) {
        String host = r.getNodeId() == null ? null : r.getNodeId().getHost();
        if (host != null && !host.isEmpty()) {
          nodes.putIfAbsent(host, new YarnSubmitter.Node(host, r.getRackName()));
        }
      }
      return new ArrayList<>(nodes.values());
    } catch (YarnException e) {
      throw new IOException(e);
    }
  }

  @Override
  public List<YarnSubmitter.App> applications() throws IOException {
    try {
      List<YarnSubmitter.App> apps = new ArrayList<>();
      for (ApplicationReport r : client.getApplications(java.util.Collections.singleton(YarnSubmitter.APPLICATION_TYPE))) {
        apps.add(new YarnSubmitter.App(r.getApplicationId(), r.getName(), r.getUser(), r.getQueue(), state(r)));
      }
      return apps;
    } catch (YarnException e) {
      throw new IOException(e);
    }
  }

  private static YarnSubmitter.AppState state(ApplicationReport r) {
    return new YarnSubmitter.AppState(r.getYarnApplicationState(), r.getFinalApplicationStatus(), r.getProgress(),
        r.getDiagnostics(), r.getTrackingUrl(), r.getStartTime(), r.getFinishTime());
  }

  @Override
  public void submit(ApplicationSubmissionContext ctx) throws IOException {
    try {
      client.submitApplication(ctx);
    } catch (YarnException e) {
      throw new IOException(e);
    }
  }

  @Override
  public YarnSubmitter.AppState report(ApplicationId id) throws IOException {
    try {
      return state(client.getApplicationReport(id));
    } catch (YarnException e) {
      throw new IOException(e);
    }
  }

  @Override
  public void kill(ApplicationId id) throws IOException {
    try {
      client.killApplication(id);
    } catch (YarnException e) {
      throw new IOException(e);
    }
  }

  @Override
  public void close() throws IOException {
    client.stop();
  }
}
