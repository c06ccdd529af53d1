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

  /**
   * The address of the NodeManager's name for this node ({@code NM_HOST}, the name the other
   * nodes reach it by), else of the local host name. A host name that resolves to a loopback
   * address (Debian's {@code 127.0.1.1 host} line, say) would make peers on other nodes dial
   * themselves.
   */
  @Override
  public String defaultHost() throws IOException {
    return defaultHost(System.getenv("NM_HOST"));
  }

  static String defaultHost(String nmHost) throws IOException {
    if (nmHost != null && !nmHost.isEmpty()) {
      InetAddress a = InetAddress.getByName(nmHost);
      if (!a.isLoopbackAddress()) {
        return a.getHostAddress();
      }
    }
    return InetAddress.getLocalHost().getHostAddress();
  }

  @Override
  public String meet(int rank, String hostPort) throws IOException {
    return registry.register(rank, hostPort);
  }
}
