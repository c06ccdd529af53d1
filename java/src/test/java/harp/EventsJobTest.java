package harp;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import harp.io.FilePosition;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.mapreduce.Job;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/** Events between map tasks of one JVM (LocalJobRunner): sending, routing, order, termination. */
class EventsJobTest {
  /** FNV-1a-64 of the label's UTF-8 bytes, written here from its definition (docs/events.md). */
  static int[] expectedReceivers(String label, int copies, int workers) {
    long h = 0xcbf29ce484222325L;
    for (byte b : label.getBytes(StandardCharsets.UTF_8)) {
      h ^= b & 0xff;
      h *= 0x100000001b3L;
    }
    int first = (int) Long.remainderUnsigned(h, workers);
    int[] r = new int[Math.min(copies, workers)];
    for (int i = 0; i < r.length; i++) {
      r[i] = (first + i) % workers;
    }
    return r;
  }

  static byte[] msg(int kind, int src, int seq) {
    return ByteBuffer.allocate(12).putInt(kind).putInt(src).putInt(seq).array();
  }

  static int[] read(Event e) {
    ByteBuffer b = e.getPayload();
    return new int[] {b.getInt(), b.getInt(), b.getInt()};
  }

  /** Sending, receiving, routing and ordering, events next to collectives, timeouts. */
  public static class SendMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    private long verified;

    private void check(boolean ok, String what) {
      if (!ok) {
        throw new AssertionError("rank " + getSelfID() + ": " + what);
      }
      verified++;
    }

    /** Takes exactly {@code n} events (waiting), then checks none more comes within 100 ms. */
    private List<Event> take(int n) {
      List<Event> got = new ArrayList<>();
      while (got.size() < n) {
        Event e = waitEvent(10_000);
        check(e != null, "an event came (" + got.size() + " of " + n + ")");
        got.add(e);
      }
      return got;
    }

    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context) {
      int r = getSelfID();
      int p = getNumWorkers();
      final int n = 200;

      // Point to point, in order per sender: every worker sends n events to every worker
      // (itself included) from byte[], heap and direct buffers.
      ByteBuffer direct = ByteBuffer.allocateDirect(64).order(ByteOrder.BIG_ENDIAN);
      for (int seq = 0; seq < n; seq++) {
        for (int dst = 0; dst < p; dst++) {
          switch (seq % 3) {
            case 0:
              sendEvent(dst, msg(1, r, seq));
              break;
            case 1: {
              // A heap buffer at a non-zero position: only the remaining bytes go.
              ByteBuffer heap = ByteBuffer.allocate(20);
              heap.position(5);
              heap.put(msg(1, r, seq)).position(5).limit(17);
              sendEvent(dst, heap);
              check(heap.position() == 5, "a send leaves the buffer's position alone");
              break;
            }
            default:
              direct.clear();
              direct.putInt(99).putInt(1).putInt(r).putInt(seq).flip();
              direct.getInt();
              sendEvent(dst, direct);
          }
        }
      }
      int[] next = new int[p];
      for (Event e : take(n * p)) {
        int[] m = read(e);
        check(m[0] == 1 && m[1] == e.getSource() && e.getLabel() == null && e.getBytes().length == 12,
            "plain event " + Arrays.toString(m) + " from " + e.getSource());
        check(m[2] == next[m[1]]++, "events of rank " + m[1] + " in order: got " + m[2]);
      }
      // Nothing more of this round: the next events anyone sends come after this barrier.
      check(getEvent() == null, "nothing beyond the point-to-point round");
      barrier("p2p");

      // Broadcast, interleaved with collectives: events sent before an allreduce are taken
      // after it, untouched by it.
      sendEventToAll(msg(2, r, 7));
      Table t = newTable(Combiner.SUM);
      t.put(0, new long[] {r});
      allreduce("between-events", t);
      check(t.get(0).toLongArray()[0] == (long) p * (p - 1) / 2, "allreduce next to events");
      sendEventToAll(ByteBuffer.wrap(msg(2, r, 8)));
      boolean[][] seen = new boolean[p][2];
      for (Event e : take(2 * p)) {
        int[] m = read(e);
        check(m[0] == 2 && m[1] == e.getSource(), "broadcast event");
        seen[m[1]][m[2] - 7] = true;
      }
      for (int s = 0; s < p; s++) {
        check(seen[s][0] && seen[s][1], "both broadcasts of rank " + s);
      }
      barrier("broadcast");

      // Labels: each worker sends 40 labels with 1..p copies; the receivers are the engine's
      // (returned and labelReceivers) and the hash computed here; each receiver gets exactly
      // the events whose labels pick it.
      int expected = 0;
      for (int i = 0; i < 40; i++) {
        String label = "key-" + i + "-é";
        int copies = 1 + i % p;
        int[] to = sendLabeled(label, copies, msg(3, r, i));
        check(Arrays.equals(to, expectedReceivers(label, copies, p)), "receivers of " + label + ": "
            + Arrays.toString(to));
        check(Arrays.equals(to, labelReceivers(label, copies, p)), "labelReceivers agrees");
      }
      for (int i = 0; i < 40; i++) {
        for (int x : expectedReceivers("key-" + i + "-é", 1 + i % p, p)) {
          if (x == r) {
            expected += p; // every worker sent this label
          }
        }
      }
      for (Event e : take(expected)) {
        int[] m = read(e);
        String label = "key-" + m[2] + "-é";
        check(m[0] == 3 && label.equals(e.getLabel()), "labeled event " + e);
        boolean mine = false;
        for (int x : expectedReceivers(label, 1 + m[2] % p, p)) {
          mine |= x == r;
        }
        check(mine, "label " + label + " picks rank " + r);
      }
      check(getEvent() == null, "no labeled event beyond the hash's");
      barrier("labels");

      // Flow control (harp.events.window.bytes = 16 KiB for this job): ranks 1.. send rank 0
      // 100 KiB each in 1 KiB events while it waits before taking any; their sends wait for its
      // credit, and every event still arrives in order.
      if (r != 0) {
        byte[] big = new byte[1024];
        for (int i = 0; i < 100; i++) {
          System.arraycopy(msg(4, r, i), 0, big, 0, 12);
          sendEvent(0, big);
        }
      } else {
        try {
          Thread.sleep(200);
        } catch (InterruptedException e) {
          throw new IllegalStateException(e);
        }
        int[] from = new int[p];
        for (Event e : take(100 * (p - 1))) {
          int[] m = read(e);
          check(m[0] == 4 && e.getBytes().length == 1024 && m[2] == from[e.getSource()]++, "flow-controlled event "
              + Arrays.toString(m) + " from " + e.getSource());
        }
        // Without the window each sender's 100 KiB would have been queued here at once.
        long peak = eventsPeakSenderBytes();
        check(peak >= 1024 && peak <= 16 * 1024 && eventsQueuedBytes() == 0, "at most 16 KiB queued from one "
            + "sender, got " + peak);
      }
      barrier("flow");

      // Timeouts: nothing is sent, so waitEvent returns null after (not before) its timeout.
      long t0 = System.nanoTime();
      check(waitEvent(150) == null, "waitEvent times out");
      check(System.nanoTime() - t0 >= 140_000_000L, "waitEvent waited its timeout");
      check(waitEvent(0) == null, "waitEvent(0)");

      // Bad arguments are config errors naming the call and this worker.
      try {
        sendEvent(p, new byte[1]);
        check(false, "sending to a rank that does not exist fails");
      } catch (HarpException e) {
        check(e.getKind() == HarpException.Kind.CONFIG && e.getRank() == r && e.getOperation().equals("events")
            && e.getLabel().equals("send_event") && e.getMessage().contains("no worker " + p), e.toString());
      }
      try {
        sendLabeled("x", p + 1, new byte[1]);
        check(false, "too many copies fail");
      } catch (HarpException e) {
        check(e.getKind() == HarpException.Kind.CONFIG && e.getMessage().contains("copies must be 1..=" + p),
            e.toString());
      }
      barrier("end");
      context.getCounter("harp-test", "verified").increment(verified);
    }
  }

  @Test
  @Timeout(120)
  void eventsReachTheirReceiversInOrderNextToCollectives(@TempDir Path tmp) throws Exception {
    Configuration conf = JobTestSupport.localConf(tmp, 4);
    conf.set("harp.events.window.bytes", "16k"); // a byte count with a suffix, as Hadoop users write them
    Job job = job(conf, tmp, SendMapper.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    assertTrue(job.getCounters().findCounter("harp-test", "verified").getValue() > 4 * 1000);
  }

  /**
   * Termination detection with handlers that send more events: each worker starts 30 tokens
   * with a hop count; a handler forwards a token (hops - 1) to a worker chosen from it, and the
   * idle step sends one "echo" per handled batch, and 200 more while {@code busy()} says so.
   * Every worker returns the same Quiet, equal to what was sent (summed by an allreduce), and
   * nothing is left afterwards; three phases.
   */
  public static class QuietMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context) {
      int r = getSelfID();
      int p = getNumWorkers();
      for (int phase = 1; phase <= 3; phase++) {
        long[] sent = {0};
        long[] handled = {0};
        boolean[] pending = {false};
        for (int i = 0; i < 30; i++) {
          sendEvent((r + i) % p, msg(phase, 5 + (i + r) % 7, i));
          sent[0]++;
        }
        boolean[] refused = {false};
        // Work of its own: 200 idle steps that each send an echo, announced by busy().
        int[] steps = {200};
        int[] busyCalls = {0};
        Quiet q = runUntilQuiet(new EventHandler() {
          @Override
          public void onEvent(Event e) {
            int[] m = read(e);
            handled[0]++;
            if (m[0] != 100 && m[1] > 0) {
              sendEvent((m[2] * 31 + m[1]) % p, msg(m[0], m[1] - 1, m[2] + 1));
              sent[0]++;
              pending[0] = true;
            }
            if (!refused[0]) {
              try {
                barrier("inside-handler");
              } catch (IllegalStateException expected) {
                refused[0] = true;
              }
            }
          }

          @Override
          public void idle() throws InterruptedException {
            if (pending[0]) {
              pending[0] = false;
              Thread.sleep(2);
              sendEvent((r + 1) % p, msg(100, 0, 0));
              sent[0]++;
            }
            if (steps[0] > 0) {
              steps[0]--;
              sendEvent((r + 1) % p, msg(100, 0, 0));
              sent[0]++;
            }
          }

          @Override
          public boolean busy() {
            busyCalls[0]++;
            return steps[0] > 0;
          }
        });
        if (steps[0] != 0 || busyCalls[0] == 0) {
          throw new AssertionError("rank " + r + ": " + steps[0] + " idle steps left, busy() called " + busyCalls[0]);
        }
        if (!refused[0]) {
          throw new AssertionError("a collective inside a handler was not refused");
        }
        if (q.handled() != handled[0]) {
          throw new AssertionError("rank " + r + ": Quiet.handled " + q.handled() + " != " + handled[0]);
        }
        // No worker starts the next phase before the allreduce below: nothing may be queued.
        if (getEvent() != null) {
          throw new AssertionError("an event after the phase ended");
        }
        Table t = newTable(Combiner.SUM);
        t.put(0, new long[] {sent[0], handled[0], q.events(), q.waves()});
        allreduce("check-" + phase, t);
        long[] s = t.get(0).toLongArray();
        if (s[0] != s[1] || s[0] != q.events() || s[2] != (long) p * q.events() || s[3] != (long) p * q.waves()) {
          throw new AssertionError("rank " + r + " phase " + phase + ": sent " + s[0] + ", handled " + s[1]
              + ", " + q + ", sums " + Arrays.toString(s));
        }
        t.close();
        context.getCounter("harp-test", "events").increment(q.events());
        context.getCounter("harp-test", "phases").increment(1);
      }
    }
  }

  @Test
  @Timeout(120)
  void runUntilQuietEndsExactlyWhenEveryEventIsHandled(@TempDir Path tmp) throws Exception {
    Job job = job(JobTestSupport.localConf(tmp, 3), tmp, QuietMapper.class);
    assertTrue(job.waitForCompletion(false), "job failed: " + job.getStatus().getFailureInfo());
    assertEquals(9, job.getCounters().findCounter("harp-test", "phases").getValue());
    // 30 tokens per worker, each forwarded 5..11 times, plus echoes: well above 3 x 90.
    assertTrue(job.getCounters().findCounter("harp-test", "events").getValue() > 3 * 3 * 90 * 5);
  }

  /**
   * Rank 1's handler throws on its fifth event (or, with {@code test.throw.in=busy}, its
   * {@code busy()} throws after the fifth event): every worker's runUntilQuiet fails, naming it.
   */
  public static class FailingHandlerMapper extends CollectiveMapper<FilePosition, Text, Object, Object> {
    @Override
    protected void mapCollective(KeyValReader<FilePosition, Text> reader, Context context) throws IOException {
      int r = getSelfID();
      int p = getNumWorkers();
      for (int i = 0; i < 20; i++) {
        sendEvent(i % p, msg(1, r, i));
      }
      // Every send is done before any handler runs (rank 1 fails in its handler).
      barrier("sent");
      int[] n = {0};
      boolean inBusy = "busy".equals(context.getConfiguration().get("test.throw.in"));
      try {
        runUntilQuiet(new EventHandler() {
          @Override
          public void onEvent(Event e) {
            if (r == 1 && ++n[0] == 5 && !inBusy) {
              throw new IllegalStateException("handler boom on purpose");
            }
          }

          @Override
          public boolean busy() {
            if (r == 1 && n[0] >= 5 && inBusy) {
              throw new IllegalStateException("handler boom on purpose");
            }
            return false;
          }
        });
      } catch (HarpException e) {
        Throwable c = e.getCause();
        Files.writeString(Path.of(context.getConfiguration().get("test.out"), "rank-" + r),
            e.getKind() + "|" + e.getRank() + "|" + e.getOperation() + "|" + e.getLabel() + "|"
                + (c == null ? "" : c.getClass().getName()) + "|" + e.getMessage());
        throw e;
      }
    }
  }

  @Test
  @Timeout(120)
  void aThrowingHandlerFailsEveryWorkerWithItsCause(@TempDir Path tmp) throws Exception {
    throwingHandler(tmp, "event");
  }

  @Test
  @Timeout(120)
  void aThrowingBusyFailsEveryWorkerWithItsCause(@TempDir Path tmp) throws Exception {
    throwingHandler(tmp, "busy");
  }

  private void throwingHandler(Path tmp, String where) throws Exception {
    Configuration conf = JobTestSupport.localConf(tmp, 3);
    Path out = Files.createDirectories(tmp.resolve("out"));
    conf.set("test.out", out.toString());
    conf.set("test.throw.in", where);
    Job job = job(conf, tmp, FailingHandlerMapper.class);
    assertFalse(job.waitForCompletion(false));
    String own = Files.readString(out.resolve("rank-1"));
    assertTrue(own.startsWith("DATA|1|events|run_until_quiet|java.lang.IllegalStateException|"), own);
    assertTrue(own.contains("the Java event handler threw java.lang.IllegalStateException: handler boom on purpose"),
        own);
    for (int rank : new int[] {0, 2}) {
      String msg = Files.readString(out.resolve("rank-" + rank));
      assertTrue(msg.startsWith("PEER_LOST|" + rank + "|events|run_until_quiet||"), msg);
      assertTrue(msg.contains("rank 1") && msg.contains("handler boom on purpose"), msg);
    }
  }

  @Test
  void labelReceiversIsTheEngineHash() {
    for (int w = 1; w <= 9; w++) {
      for (String label : new String[] {"", "a", "vertex-17", "ünïcödé", "x".repeat(100)}) {
        for (int c = 1; c <= w; c++) {
          assertArrayEquals(expectedReceivers(label, c, w), CollectiveMapper.labelReceivers(label, c, w),
              label + " " + c + " " + w);
        }
      }
    }
  }

  static Job job(Configuration conf, Path tmp, Class<? extends CollectiveMapper<?, ?, ?, ?>> mapper) throws IOException {
    Path in = tmp.resolve("in");
    JobTestSupport.writeLines(in, "a.txt", 10);
    return JobTestSupport.job(conf, in, mapper);
  }
}
