package harp.yarn;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * The master's registration service. A launched worker connects, sends
 * {@code REGISTER <rank> <token> <host:port>} (the token comes with its container's environment);
 * the connection is held until every worker has registered, then each gets
 * {@code ROSTER}, the job secret, the host list in rank order and {@code END} — or
 * {@code FAIL <reason>} if the job fails first (also to anyone registering after that). Wrong
 * tokens and malformed lines are refused.
 */
public final class Registry implements AutoCloseable {
  private final ServerSocket server;
  private final GangMaster master;
  private final byte[] token;
  private final List<Socket> waiting = new ArrayList<>();
  private final Thread acceptor;
  private volatile boolean closed;
  /** Once the job has failed, every registration (even a late one) gets this reason. */
  private String failure;

  public Registry(GangMaster master, String token, InetAddress bind) throws IOException {
    this.master = master;
    this.token = token.getBytes(StandardCharsets.UTF_8);
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
        }
      }
    }
  }

  private void handle(Socket s) {
    try {
      BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
      String line = in.readLine();
      String[] f = line == null ? new String[0] : line.trim().split(" ");
      if (f.length != 4 || !f[0].equals("REGISTER")
          || !MessageDigest.isEqual(token, f[2].getBytes(StandardCharsets.UTF_8))) {
        reply(s, "FAIL registration refused\n");
        s.close();
        return;
      }
      int rank = Integer.parseInt(f[1]);
      Optional<GangMaster.Roster> roster;
      synchronized (this) {
        if (failure != null) {
          reply(s, "FAIL " + failure + "\n");
          s.close();
          return;
        }
        roster = master.onRegistered(rank, f[3]);
        waiting.add(s);
        if (roster.isPresent()) {
          StringBuilder sb = new StringBuilder("ROSTER\n").append(roster.get().secret()).append('\n');
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
    } catch (IOException | RuntimeException e) {
      try {
        s.close();
      } catch (IOException ignored) {
        // already broken
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
