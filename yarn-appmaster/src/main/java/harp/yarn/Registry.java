package harp.yarn;

import harp.mapred.JobSecret;
import harp.rendezvous.RegistryClient;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The master's service for its workers (their side: {@link RegistryClient}). Every request is one
 * line signed with the job secret ({@link JobSecret#sign}: the text, a space, its HMAC-SHA256),
 * which master and workers have from their containers' credentials; unsigned or wrongly signed
 * lines are refused. Nothing secret is ever sent.
 *
 * <ul>
 *   <li>{@code REGISTER <rank> <host:port>}: the connection is held until every worker has
 *       registered, then each gets {@code ROSTER}, one line per worker in rank order
 *       ({@code host:port rack}) and {@code END}; or {@code FAIL <reason>} if the job fails first
 *       (also to anyone registering after that).
 *   <li>{@code PROGRESS <rank> <done> <total>}: how far the worker is (answer {@code OK}).
 *   <li>{@code FAILED <rank> <message>}: the worker is about to exit with this error (answer
 *       {@code OK}); the master uses it to blame the right worker and to tell the user the
 *       operation it was in.
 *   <li>{@code DONE <rank>}: the worker has committed its result (answer {@code OK}); it counts as
 *       finished even if its container's ending never reaches the master (a dead NodeManager).
 * </ul>
 */
public final class Registry implements AutoCloseable {
  private final ServerSocket server;
  private final GangMaster master;
  private final byte[] secret;
  private final List<Socket> waiting = new ArrayList<>();
  private final Thread acceptor;
  private volatile boolean closed;
  /** Once the job has failed, every registration (even a late one) gets this reason. */
  private String failure;

  public Registry(GangMaster master, byte[] secret, InetAddress bind) throws IOException {
    this.master = master;
    this.secret = secret.clone();
    this.server = new ServerSocket(0, 128, bind);
    this.acceptor = new Thread(this::acceptLoop, "harp-registry");
    acceptor.setDaemon(true);
    acceptor.start();
  }

  /** host:port workers register with. */
  public String address() {
    return server.getInetAddress().getHostAddress() + ":" + port();
  }

  public int port() {
    return server.getLocalPort();
  }

  private void acceptLoop() {
    while (!closed) {
      try {
        Socket s = server.accept();
        s.setSoTimeout(30_000);
        Thread t = new Thread(() -> handle(s), "harp-registry-conn");
        t.setDaemon(true);
        t.start();
      } catch (IOException e) {
        if (!closed) {
          System.err.println("harp registry: accept failed: " + e);
          try {
            Thread.sleep(100); // e.g. out of file descriptors: do not spin
          } catch (InterruptedException ie) {
            return;
          }
        }
      }
    }
  }

  private void handle(Socket s) {
    try {
      BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
      String line = RegistryClient.readLine(in);
      String text = line == null ? null : JobSecret.verify(secret, line.trim());
      String[] f = text == null ? new String[0] : text.split(" ", 3);
      int rank = -1;
      try {
        rank = f.length >= 2 ? Integer.parseInt(f[1]) : -1;
      } catch (NumberFormatException e) {
        // refused below
      }
      if (rank < 0) {
        reply(s, "FAIL request refused\n");
        s.close();
        return;
      }
      switch (f[0]) {
        case RegistryClient.REGISTER:
          register(s, rank, f.length == 3 ? f[2] : "");
          break;
        case RegistryClient.PROGRESS: {
          String[] v = f.length == 3 ? f[2].split(" ") : new String[0];
          if (v.length == 2) {
            master.onProgress(rank, Long.parseLong(v[0]), Long.parseLong(v[1]));
          }
          reply(s, "OK\n");
          s.close();
          break;
        }
        case RegistryClient.FAILED:
          master.onFailureReport(rank, f.length == 3 ? f[2] : "");
          reply(s, "OK\n");
          s.close();
          break;
        case RegistryClient.DONE:
          master.onDoneReport(rank);
          reply(s, "OK\n");
          s.close();
          break;
        default:
          reply(s, "FAIL request refused\n");
          s.close();
          break;
      }
    } catch (IOException | RuntimeException e) {
      try {
        s.close();
      } catch (IOException ignored) {
        // already broken
      }
    }
  }

  private void register(Socket s, int rank, String hostPort) throws IOException {
    if (hostPort.isEmpty() || hostPort.contains(" ")) {
      reply(s, "FAIL registration refused\n");
      s.close();
      return;
    }
    synchronized (this) {
      if (failure != null) {
        reply(s, "FAIL " + failure + "\n");
        s.close();
        return;
      }
      Optional<GangMaster.Roster> roster = master.onRegistered(rank, hostPort);
      waiting.add(s);
      if (roster.isPresent()) {
        StringBuilder sb = new StringBuilder("ROSTER\n");
        for (String h : roster.get().hosts()) {
          sb.append(h).append('\n');
        }
        sb.append("END\n");
        for (Socket w : waiting) {
          reply(w, sb.toString());
          w.close();
        }
        waiting.clear();
      }
    }
  }

  private static void reply(Socket s, String text) throws IOException {
    OutputStream out = s.getOutputStream();
    out.write(text.getBytes(StandardCharsets.UTF_8));
    out.flush();
  }

  /** Tells every waiting worker that the job failed. */
  public synchronized void failAll(String reason) {
    failure = reason.replace('\n', ' ');
    for (Socket w : waiting) {
      try {
        reply(w, "FAIL " + failure + "\n");
        w.close();
      } catch (IOException ignored) {
        // the worker is gone anyway
      }
    }
    waiting.clear();
  }

  @Override
  public void close() throws IOException {
    closed = true;
    server.close();
    failAll("the master is shutting down");
  }
}
