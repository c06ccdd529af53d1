package harp.rendezvous;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.TimeUnit;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.IOUtils;

/**
 * Meeting through a directory every worker can see (local mode: the job's staging directory):
 * each worker writes {@code host:port} to {@code worker-RANK} (atomically, through a rename),
 * then reads every worker's file, waiting until all exist or the timeout has passed.
 */
public final class StagingDirRendezvous implements Rendezvous {
  private final FileSystem fs;
  private final Path dir;
  private final int workers;
  private final long timeoutMs;
  private final Runnable progress;

  /**
   * @param dir the meeting directory (created if missing)
   * @param workers how many workers meet
   * @param timeoutMs how long to wait for all of them
   * @param progress called while waiting (tells Hadoop the task is alive)
   */
  public StagingDirRendezvous(FileSystem fs, Path dir, int workers, long timeoutMs, Runnable progress) {
    this.fs = fs;
    this.dir = dir;
    this.workers = workers;
    this.timeoutMs = timeoutMs;
    this.progress = progress;
  }

  @Override
  public String defaultHost() {
    return "127.0.0.1";
  }

  @Override
  public String meet(int rank, String hostPort) throws IOException, InterruptedException {
    fs.mkdirs(dir);
    Path mine = new Path(dir, "worker-" + rank);
    // Claim the rank first (a create that fails if the file exists): two tasks given the same
    // harp.worker.rank would otherwise both publish it and wait for a rank nobody has.
    Path claim = new Path(dir, ".claim-worker-" + rank);
    try {
      fs.create(claim, false).close();
    } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
      throw new RendezvousException("rank " + rank + " is claimed by two workers (" + claim
          + " exists): two map tasks have the same harp.worker.rank, or two jobs share " + dir);
    }
    Path tmp = new Path(dir, ".tmp-worker-" + rank);
    try (FSDataOutputStream out = fs.create(tmp, true)) {
      out.write((hostPort + "\n").getBytes(StandardCharsets.UTF_8));
    }
    if (!fs.rename(tmp, mine)) {
      throw new IOException("cannot publish " + mine);
    }
    long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs);
    StringBuilder hosts = new StringBuilder();
    for (int r = 0; r < workers; r++) {
      Path p = new Path(dir, "worker-" + r);
      while (!fs.exists(p)) {
        if (System.nanoTime() > deadline) {
          int seen = 0;
          for (int q = 0; q < workers; q++) {
            seen += fs.exists(new Path(dir, "worker-" + q)) ? 1 : 0;
          }
          throw new RendezvousException("only " + seen + " of " + workers + " workers started within "
              + timeoutMs / 1000 + " s; a map-collective job needs all its map tasks running at once");
        }
        progress.run();
        Thread.sleep(20);
      }
      try (FSDataInputStream in = fs.open(p)) {
        hosts.append(new String(IOUtils.readFullyToByteArray(in), StandardCharsets.UTF_8).trim()).append('\n');
      }
    }
    return hosts.toString();
  }
}
