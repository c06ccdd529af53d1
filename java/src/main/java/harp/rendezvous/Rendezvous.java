package harp.rendezvous;

import java.io.IOException;

/**
 * How the workers of a job find each other at start-up: each publishes the address it listens
 * on and receives every worker's address in rank order. Two implementations:
 * {@link StagingDirRendezvous} (files in the job's staging directory; local mode) and
 * {@link RegistryRendezvous} (the YARN master's registry, {@link RegistryClient}).
 */
public interface Rendezvous {
  /** The address a worker listens on when the job does not name one ({@code harp.worker.host}). */
  String defaultHost() throws IOException;

  /**
   * Publishes this worker's {@code host:port} and waits for every worker's; returns the hosts
   * text for the engine: one {@code host:port} line (optionally followed by a rack) per worker,
   * in rank order.
   *
   * @throws RendezvousException when the workers could not meet (the message says why)
   */
  String meet(int rank, String hostPort) throws IOException, InterruptedException;
}
