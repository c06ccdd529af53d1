package harp.rendezvous;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.mapred.JobSecret;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.function.Function;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.junit.jupiter.api.Test;

/** Both ways workers meet, without the engine: the staging directory and the registry's lines. */
class RendezvousTest {
  private static final byte[] SECRET = "s3cret".getBytes(StandardCharsets.US_ASCII);

  @Test
  void aWorkerListensOnTheNodeManagersAddressUnlessItIsLoopback() throws Exception {
    // NM_HOST first: the machine's own host name may resolve to 127.0.0.1 or 127.0.1.1.
    assertEquals("10.231.0.13", RegistryRendezvous.defaultHost("10.231.0.13"));
    String local = InetAddress.getLocalHost().getHostAddress();
    assertEquals(local, RegistryRendezvous.defaultHost("127.0.0.1"));
    assertEquals(local, RegistryRendezvous.defaultHost(null));
    assertEquals(local, RegistryRendezvous.defaultHost(""));
  }

  @Test
  void workersMeetInADirectoryInRankOrder() throws Exception {
    java.nio.file.Path tmp = Files.createTempDirectory("harp-rendezvous");
    FileSystem fs = FileSystem.getLocal(new Configuration());
    Path dir = new Path(tmp.toString(), "_harp");
    List<CompletableFuture<String>> all = new ArrayList<>();
    for (int r = 2; r >= 0; r--) {
      int rank = r;
      Rendezvous rv = new StagingDirRendezvous(fs, dir, 3, 60_000, () -> {});
      assertEquals("127.0.0.1", rv.defaultHost());
      all.add(CompletableFuture.supplyAsync(() -> {
        try {
          return rv.meet(rank, "127.0.0.1:" + (9000 + rank));
        } catch (Exception e) {
          throw new IllegalStateException(e);
        }
      }));
    }
    for (CompletableFuture<String> f : all) {
      assertEquals("127.0.0.1:9000\n127.0.0.1:9001\n127.0.0.1:9002\n", f.get());
    }
  }

  @Test
  void aWorkerThatNeverComesIsNamedByCount() throws Exception {
    java.nio.file.Path tmp = Files.createTempDirectory("harp-rendezvous");
    FileSystem fs = FileSystem.getLocal(new Configuration());
    Rendezvous rv = new StagingDirRendezvous(fs, new Path(tmp.toString(), "_harp"), 2, 50, () -> {});
    RendezvousException e = assertThrows(RendezvousException.class, () -> rv.meet(0, "127.0.0.1:1"));
    assertTrue(e.getMessage().startsWith("only 1 of 2 workers started within"), e.getMessage());
  }

  @Test
  void twoWorkersWithTheSameRankAreNamedAsSuch() throws Exception {
    java.nio.file.Path tmp = Files.createTempDirectory("harp-rendezvous");
    FileSystem fs = FileSystem.getLocal(new Configuration());
    Path dir = new Path(tmp.toString(), "_harp");
    CompletableFuture<String> first = CompletableFuture.supplyAsync(() -> {
      try {
        return new StagingDirRendezvous(fs, dir, 2, 2_000, () -> {}).meet(0, "127.0.0.1:1");
      } catch (Exception e) {
        return e.getMessage();
      }
    });
    Thread.sleep(300);
    Rendezvous second = new StagingDirRendezvous(fs, dir, 2, 2_000, () -> {});
    RendezvousException e = assertThrows(RendezvousException.class, () -> second.meet(0, "127.0.0.1:2"));
    assertTrue(e.getMessage().startsWith("rank 0 is claimed by two workers"), e.getMessage());
    assertTrue(e.getMessage().contains("the same harp.worker.rank"), e.getMessage());
    assertTrue(first.get().startsWith("only 1 of 2 workers started within"), first.get());
  }

  /** A one-request registry: checks the signature, answers with {@code answer(text)}. */
  private static CompletableFuture<String> master(ServerSocket server, Function<String, String> answer) {
    return CompletableFuture.supplyAsync(() -> {
      try (Socket s = server.accept()) {
        String line = RegistryClient.readLine(
            new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8)));
        String text = JobSecret.verify(SECRET, line);
        s.getOutputStream().write(answer.apply(text).getBytes(StandardCharsets.UTF_8));
        return text;
      } catch (Exception e) {
        throw new IllegalStateException(e);
      }
    });
  }

  @Test
  void theRegistryClientSignsItsLinesAndReadsTheAnswers() throws Exception {
    try (ServerSocket server = new ServerSocket(0, 8, InetAddress.getLoopbackAddress())) {
      String at = "127.0.0.1:" + server.getLocalPort();
      RegistryClient client = new RegistryClient(at, SECRET, 30_000);
      CompletableFuture<String> seen = master(server, t -> "ROSTER\nh0:1 /r1\nh1:2 /r2\nEND\n");
      assertEquals("h0:1 /r1\nh1:2 /r2\n", new RegistryRendezvous(client).meet(1, "h1:2"));
      assertEquals("REGISTER 1 h1:2", seen.get());

      seen = master(server, t -> "FAIL the job failed\n");
      RendezvousException e = assertThrows(RendezvousException.class, () -> client.register(0, "h0:1"));
      assertEquals("the master at " + at + " refused registration: FAIL the job failed", e.getMessage());
      seen.get();

      seen = master(server, t -> "OK\n");
      assertTrue(client.progress(2, 3, 10));
      assertEquals("PROGRESS 2 3 10", seen.get());

      seen = master(server, t -> "OK\n");
      assertTrue(client.failed(0, "in barrier:\nrank 1 is gone"));
      assertEquals("FAILED 0 in barrier: rank 1 is gone", seen.get());

      seen = master(server, t -> "FAIL request refused\n");
      assertFalse(client.progress(0, 1, 2));
      seen.get();
    }
  }

  @Test
  void anUnreachableMasterIsFalseAndABadAddressIsRefused() throws Exception {
    int port;
    try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
      port = s.getLocalPort();
    }
    assertFalse(new RegistryClient("127.0.0.1:" + port, SECRET, 5_000).failed(0, "x"));
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> new RegistryClient("no-port", SECRET, 5_000));
    assertTrue(e.getMessage().contains("no-port"), e.getMessage());
  }
}
