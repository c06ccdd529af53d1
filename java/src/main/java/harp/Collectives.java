package harp;

/**
 * The collectives of the whole job ({@link CollectiveMapper}) and of a sub-group ({@link Group}),
 * for code that runs on either (the engine's {@code harp::worker::Collectives}). In a group,
 * {@link #rank()}, {@link #size()} and every root, owner and map are group ranks; each method is
 * documented where it is implemented.
 */
public interface Collectives {
  /** This worker's rank in the job or the group. */
  int rank();

  /** The number of workers in the job or members in the group. */
  int size();

  void barrier(String label);

  void broadcast(String label, Table t, int root, Algorithm.Broadcast algorithm);

  void broadcast(String label, Table t, int root);

  void reduce(String label, Table t, int root, Algorithm.Reduce algorithm);

  void reduce(String label, Table t, int root);

  void gather(String label, Table t, int root);

  void scatter(String label, Table t, int root, Partitioner p);

  void allgather(String label, Table t);

  void allgather(String label, Table t, int totalPartitions);

  void allgather(String label, KeyValueTable t);

  void allreduce(String label, Table t, Algorithm.Allreduce algorithm);

  void allreduce(String label, Table t);

  void allreduce(String label, KeyValueTable t);

  void reduceScatter(String label, Table t, Partitioner p);

  void regroup(String label, Table t, Partitioner p);

  void regroup(String label, KeyValueTable t, Partitioner p);

  void regroupPlanned(String label, Table t);

  void push(String label, Table local, Table global, Partitioner p);

  void pull(String label, Table local, Table global, Partitioner p);

  void rotate(String label, Table t, int[] map);

  void regroupEdges(String label, EdgeTable edges, boolean bySource, int partitions);

  void sendEdgesToVertices(String label, EdgeTable edges, boolean bySource, KeyValueTable vertices, int partitions);

  void sendMessages(String label, KeyValueTable messages);
}
