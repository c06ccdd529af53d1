package harp.yarn;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
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
  public List<String> runningNodes() throws IOException {
    try {
      List<String> nodes = new ArrayList<>();
      for (NodeReport r : client.getNodeReports(NodeState.RUNNING)) {
        nodes.add(r.getNodeId().getHost());
      }
      return nodes;
    } catch (YarnException e) {
      throw new IOException(e);
    }
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
      ApplicationReport r = client.getApplicationReport(id);
      return new YarnSubmitter.AppState(r.getYarnApplicationState(), r.getFinalApplicationStatus(), r.getProgress(),
          r.getDiagnostics(), r.getTrackingUrl(), r.getStartTime(), r.getFinishTime());
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
