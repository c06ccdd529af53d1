package harp.rendezvous;

import harp.mapred.JobSecret;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;

/**
 * A worker's side of the YARN master's registry: one request per connection, a single line
 * signed with the job secret ({@link JobSecret#sign}: the text, a space, its HMAC-SHA256), at most
 * {@link #MAX_LINE} characters. The master's side is {@code harp.yarn.Registry}, which reads
 * lines with {@link #readLine}.
 *
 * <ul>
 *   <li>{@code REGISTER <rank> <host:port>}: answered, once every worker has registered, by
 *       {@code ROSTER}, one {@code host:port rack} line per worker in rank order, {@code END};
 *       or {@code FAIL <reason>}.
 *   <li>{@code PROGRESS <rank> <done> <total>}: answered {@code OK}.
 *   <li>{@code FAILED <rank> <what failed>}: answered {@code OK}.
 *   <li>{@code DONE <rank>}: the worker's result is committed (answered {@code OK}); the master
 *       counts it as finished whatever then happens to its container.
 * </ul>
 * A line that is unsigned, wrongly signed or malformed is answered {@code FAIL request refused}.
 */
public final class RegistryClient {
  /** Longest request line the master accepts. */
  public static final int MAX_LINE = 16 * 1024;
  public static final String REGISTER = "REGISTER";
  public static final String PROGRESS = "PROGRESS";
  public static final String FAILED = "FAILED";
  public static final String DONE = "DONE";

  private final String address;
  private final byte[] secret;
  private final int timeoutMs;

  /**
   * @param address the master's registry, {@code host:port}
   * @param secret the job secret (from the container's credentials)
   * @param timeoutMs bound of connecting and of waiting for each answer
   */
  public RegistryClient(String address, byte[] secret, int timeoutMs) {
    if (address.lastIndexOf(':') <= 0) {
      throw new IllegalArgumentException("the master's registry address is not host:port: " + address);
    }
    this.address = address;
    this.secret = secret.clone();
    this.timeoutMs = timeoutMs;
  }

  /**
   * Registers worker {@code rank} listening on {@code hostPort}; returns the roster (one
   * {@code host:port rack} line per worker, in rank order) once every worker has registered.
   *
   * @throws RendezvousException if the master refused (or the job failed first), or sent no
   *     roster within the timeout
   */
  public String register(int rank, String hostPort) throws IOException {
    try (Socket s = connect()) {
      send(s, REGISTER + " " + rank + " " + hostPort);
      BufferedReader in = reader(s);
      String first = readLine(in);
      if (!"ROSTER".equals(first)) {
        throw new RendezvousException("the master at " + address + " refused registration: " + first);
      }
      StringBuilder hosts = new StringBuilder();
      for (String l = readLine(in); l != null && !l.equals("END"); l = readLine(in)) {
        hosts.append(l).append('\n');
      }
      return hosts.toString();
    } catch (SocketTimeoutException e) {
      throw new RendezvousException("the master at " + address + " sent no worker list within the connect timeout");
    }
  }

  /** Tells the master how far worker {@code rank} is; false (never throws) if it could not. */
  public boolean progress(int rank, long done, long total) {
    return tell(PROGRESS + " " + rank + " " + done + " " + total);
  }

  /** Tells the master what failed in worker {@code rank}; false (never throws) if it could not. */
  public boolean failed(int rank, String what) {
    return tell(FAILED + " " + rank + " " + what.replace('\r', ' ').replace('\n', ' '));
  }

  /** Tells the master that worker {@code rank} has committed its result; false (never throws) if it could not. */
  public boolean done(int rank) {
    return tell(DONE + " " + rank);
  }

  private boolean tell(String text) {
    try (Socket s = connect()) {
      send(s, text);
      return "OK".equals(readLine(reader(s)));
    } catch (IOException | RuntimeException e) {
      return false;
    }
  }

  private Socket connect() throws IOException {
    int colon = address.lastIndexOf(':');
    Socket s = new Socket();
    try {
      s.connect(new InetSocketAddress(address.substring(0, colon), Integer.parseInt(address.substring(colon + 1))),
          timeoutMs);
      s.setSoTimeout(timeoutMs);
      return s;
    } catch (IOException | RuntimeException e) {
      s.close();
      throw e;
    }
  }

  private void send(Socket s, String text) throws IOException {
    s.getOutputStream().write((JobSecret.sign(secret, text) + "\n").getBytes(StandardCharsets.UTF_8));
    s.getOutputStream().flush();
  }

  private static BufferedReader reader(Socket s) throws IOException {
    return new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
  }

  /** One line of at most {@link #MAX_LINE} characters (without its newline), or null. */
  public static String readLine(BufferedReader in) throws IOException {
    StringBuilder sb = new StringBuilder();
    for (int c = in.read(); c != '\n'; c = in.read()) {
      if (c < 0) {
        return sb.length() == 0 ? null : sb.toString();
      }
      if (sb.length() >= MAX_LINE) {
        return null;
      }
      sb.append((char) c);
    }
    return sb.toString();
  }
}
