package harp.mapred;

import java.io.IOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.mapreduce.protocol.ClientProtocol;

/**
 * A cluster that map-collective jobs can be submitted to, plugged in through
 * {@link java.util.ServiceLoader} (a {@code META-INF/services/harp.mapred.ClusterSubmitter}
 * line): {@link MapCollectiveClientProtocolProvider} picks the one whose {@link #name} the job's
 * configuration calls for. The YARN client ({@code harp.yarn.YarnClusterSubmitter}, in
 * yarn-appmaster/) is one; without any, jobs still run in local mode.
 */
public interface ClusterSubmitter {
  /** The cluster kind this submitter serves ({@value MapCollectiveClientProtocolProvider#YARN} for YARN). */
  String name();

  /** The client protocol that submits and tracks the job described by {@code conf}. */
  ClientProtocol create(Configuration conf) throws IOException;
}
