package harp;

/**
 * The collectives of the whole job ({@link CollectiveMapper}) and of a sub-group ({@link Group}),
 * for code that runs on either (the engine's {@code harp::worker::Collectives}). In a group,
 * {@link #rank()}, {@link #size()} and every root, owner and map are group ranks. Each operation
 * is documented where it is implemented. An operation with options takes one {@link Options}
 * value (root, algorithm, …); its short form without them (root 0, the automatic algorithm) and
 * the forms taking a {@link KeyValueTable} are written once, here.
 */
public interface Collectives {
  /** This worker's rank in the job or the group. */
  int rank();

  /** The number of workers in the job or members in the group. */
  int size();

  void barrier(String label);

  void broadcast(String label, Table t, Options o);

  /** {@link #broadcast(String, Table, Options)} from rank 0 with the automatic choice. */
  default void broadcast(String label, Table t) {
    broadcast(label, t, Options.defaults());
  }

  void reduce(String label, Table t, Options o);

  /** {@link #reduce(String, Table, Options)} to rank 0 with the automatic choice. */
  default void reduce(String label, Table t) {
    reduce(label, t, Options.defaults());
  }

  void gather(String label, Table t, Options o);

  /** {@link #gather(String, Table, Options)} to rank 0. */
  default void gather(String label, Table t) {
    gather(label, t, Options.defaults());
  }

  void scatter(String label, Table t, Partitioner p, Options o);

  /** {@link #scatter(String, Table, Partitioner, Options)} from rank 0. */
  default void scatter(String label, Table t, Partitioner p) {
    scatter(label, t, p, Options.defaults());
  }

  void allgather(String label, Table t, Options o);

  /** {@link #allgather(String, Table, Options)} with the automatic choice. */
  default void allgather(String label, Table t) {
    allgather(label, t, Options.defaults());
  }

  /** Every worker ends with every key-value partition (combined where ids meet). */
  default void allgather(String label, KeyValueTable t) {
    allgather(label, t.table());
  }

  void allreduce(String label, Table t, Options o);

  /** {@link #allreduce(String, Table, Options)} with the automatic choice. */
  default void allreduce(String label, Table t) {
    allreduce(label, t, Options.defaults());
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
