package harp.rendezvous;

import java.io.IOException;
import java.net.InetAddress;

/**
 * Meeting through the YARN master's registry: the worker registers its {@code host:port} and
 * receives the roster (every worker's {@code host:port rack}, in rank order) once all have
 * registered ({@link RegistryClient#register}).
 */
public final class RegistryRendezvous implements Rendezvous {
  private final RegistryClient registry;

  public RegistryRendezvous(RegistryClient registry) {
    this.registry = registry;
  }

  @Override
  public String defaultHost() throws IOException {
    return InetAddress.getLocalHost().getHostAddress();
  }

  @Override
  public String meet(int rank, String hostPort) throws IOException {
    return registry.register(rank, hostPort);
  }
}
