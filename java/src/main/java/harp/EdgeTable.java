package harp;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * A table of edge partitions: edges {@code src → dst} (i64 vertex ids) with an optional f64
 * weight, stored in native memory as fixed-size records (docs/wire-protocol.md, "Edge
 * partitions"). Edge partitions with the same id are concatenated. Edges are added in a local
 * batch (a direct buffer, no object per edge) that goes to the engine when full, on {@link
 * #flush}, and before any read or collective. Move them with {@link
 * CollectiveMapper#regroupEdges} (to the workers holding their vertices) or {@link
 * CollectiveMapper#sendEdgesToVertices}; read them with a {@link Cursor}. Vertex and message
 * tables are {@link KeyValueTable}s with {@link KeyType#I64} keys: with the same number of
 * partitions, a vertex, its edges and its messages meet on the same worker. Not thread-safe.
 */
public final class EdgeTable implements AutoCloseable {
  static final int BATCH_BYTES = 1 << 20;

  private final Table table;
  private final boolean weighted;
  private final int record;
  private final int partition;
  private final ByteBuffer batch;

  EdgeTable(Table table, boolean weighted, int partition) {
    this.table = table;
    this.weighted = weighted;
    this.record = weighted ? 24 : 16;
    this.partition = partition;
    this.batch = ByteBuffer.allocateDirect(BATCH_BYTES / record * record).order(ByteOrder.LITTLE_ENDIAN);
  }

  public boolean weighted() {
    return weighted;
  }

  /** The table of edge partitions, with every added edge in it (for the collectives). */
  public Table table() {
    flush();
    return table;
  }

  /** Adds an edge (unweighted tables). */
  public void add(long src, long dst) {
    if (weighted) {
      throw new IllegalArgumentException("the table's edges are weighted: give a weight");
    }
    room();
    batch.putLong(src).putLong(dst);
  }

  /** Adds a weighted edge (weighted tables). */
  public void add(long src, long dst, double weight) {
    if (!weighted) {
      throw new IllegalArgumentException("the table's edges are not weighted");
    }
    room();
    batch.putLong(src).putLong(dst).putDouble(weight);
  }

  private void room() {
    if (batch.remaining() < record) {
      flush();
    }
  }

  /** Hands the batched edges to the engine (into partition {@code worker rank}). */
  public void flush() {
    if (batch.position() == 0) {
      return;
    }
    try {
      Table.addEdges(table.changing(), weighted, partition, batch, batch.position());
    } finally {
      batch.clear();
    }
  }

  /** A cursor over every edge, partitions in ascending id order. */
  public Cursor cursor() {
    flush();
    return new Cursor();
  }

  /** The number of edges in the table. */
  public long count() {
    flush();
    long n = 0;
    for (int id : table.ids()) {
      n += Table.get(table.handle(), id).capacity() / record;
    }
    return n;
  }

  @Override
  public void close() {
    batch.clear();
    table.close();
  }

  /** Reads edges in place: {@code while (c.next()) { c.src(); c.dst(); }}. Stale once the table changes. */
  public final class Cursor {
    private final int[] ids = table.ids();
    private final int generation = table.generation();
    private int index = -1;
    private ByteBuffer part;
    private int at = -record;

    private Cursor() {}

    public boolean next() {
      check();
      at += record;
      while (part == null || at >= part.limit()) {
        if (++index >= ids.length) {
          part = null;
          return false;
        }
        part = table.view(ids[index], weighted ? "edges weighted" : "edges");
        at = 0;
      }
      return true;
    }

    private void check() {
      if (table.changedSince(generation)) {
        throw new IllegalStateException("cursor is stale: its table changed since it was made");
      }
    }

    /** The id of the partition holding the current edge. */
    public int partition() {
      return ids[index];
    }

    public long src() {
      check();
      return part.getLong(at);
    }

    public long dst() {
      check();
      return part.getLong(at + 8);
    }

    /** The weight (weighted tables), else 1. */
    public double weight() {
      check();
      return weighted ? part.getDouble(at + 16) : 1.0;
    }
  }
}
