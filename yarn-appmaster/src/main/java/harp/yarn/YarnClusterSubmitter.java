package harp.yarn;

import harp.mapred.ClusterSubmitter;
import harp.mapred.MapCollectiveClientProtocolProvider;
import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.protocol.ClientProtocol;

/**
 * Plugs YARN into {@link MapCollectiveClientProtocolProvider}: registered in this module's
 * {@code META-INF/services/harp.mapred.ClusterSubmitter}, it hands jobs to {@link YarnSubmitter}.
 */
public final class YarnClusterSubmitter implements ClusterSubmitter {
  @Override
  public String name() {
    return MapCollectiveClientProtocolProvider.YARN;
  }

  @Override
  public ClientProtocol create(Configuration conf) throws IOException {
    return YarnSubmitter.create(conf);
  }
}
