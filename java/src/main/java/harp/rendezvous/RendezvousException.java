package harp.rendezvous;

import java.io.IOException;

/** The workers could not meet: some did not start in time, or the master refused or failed. */
public class RendezvousException extends IOException {
  private static final long serialVersionUID = 1L;

  public RendezvousException(String message) {
    super(message);
  }
}
