package harp;

/**
 * The collectives of the whole job ({@link CollectiveMapper}) and of a sub-group ({@link Group}),
 * for code that runs on either (the engine's {@code harp::worker::Collectives}). In a group,
 * {@link #rank()}, {@link #size()} and every root, owner and map are group ranks. Each operation
 * is documented where it is implemented; the overloads with the automatic algorithm and those
 * taking a {@link KeyValueTable} are written once, here.
 */
public interface Collectives {
  /** This worker's rank in the job or the group. */
  int rank();

  /** The number of workers in the job or members in the group. */
  int size();

  void barrier(String label);

  void broadcast(String label, Table t, int root, Algorithm.Broadcast algorithm);

  /** {@link #broadcast(String, Table, int, Algorithm.Broadcast)} with the automatic choice. */
  default void broadcast(String label, Table t, int root) {
    broadcast(label, t, root, Algorithm.Broadcast.AUTO);
  }

  void reduce(String label, Table t, int root, Algorithm.Reduce algorithm);

  /** {@link #reduce(String, Table, int, Algorithm.Reduce)} with the automatic choice. */
  default void reduce(String label, Table t, int root) {
    reduce(label, t, root, Algorithm.Reduce.AUTO);
  }

  void gather(String label, Table t, int root);

  void scatter(String label, Table t, int root, Partitioner p);

  void allgather(String label, Table t);

  void allgather(String label, Table t, int totalPartitions);

  /** Every worker ends with every key-value partition (combined where ids meet). */
  default void allgather(String label, KeyValueTable t) {
    allgather(label, t.table());
  }

  void allreduce(String label, Table t, Algorithm.Allreduce algorithm);

  /** {@link #allreduce(String, Table, Algorithm.Allreduce)} with the automatic choice. */
  default void allreduce(String label, Table t) {
    allreduce(label, t, Algorithm.Allreduce.AUTO);
  }

  /** Every worker ends with the combination of every worker's entries. */
  default void allreduce(String label, KeyValueTable t) {
    allreduce(label, t.table());
  }

  void reduceScatter(String label, Table t, Partitioner p);

  void regroup(String label, Table t, Partitioner p);

  /** Key-value partitions move to their owners under {@code p} (null: modulo) and are combined there. */
  default void regroup(String label, KeyValueTable t, Partitioner p) {
    regroup(label, t.table(), p);
  }

  void regroupPlanned(String label, Table t);

  void push(String label, Table local, Table global, Partitioner p);

  void pull(String label, Table local, Table global, Partitioner p);

  void rotate(String label, Table t, int[] map);

  void regroupEdges(String label, EdgeTable edges, boolean bySource, int partitions);

  void sendEdgesToVertices(String label, EdgeTable edges, boolean bySource, KeyValueTable vertices, int partitions);

  void sendMessages(String label, KeyValueTable messages);
}
