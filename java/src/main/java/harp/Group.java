package harp;

import java.util.Arrays;

/**
 * Collectives over a subset of the job's workers, made by {@link CollectiveMapper#group}: the
 * members are world ranks in group-rank order (group rank g is world rank {@code members()[g]}),
 * and every rank, root, owner and map below is a group rank. Every member makes the group with
 * the same list and calls its collectives in the same order; other workers do not call them. A
 * group has its own sequence of operations, so disjoint groups run at the same time, and its
 * collectives interleave with the job's (each worker still calls them in one order). Making the
 * group again with the same list continues the same sequence. Failures are {@link
 * HarpException}s as for the job's collectives, and poison the worker as those do.
 */
public final class Group implements Collectives {
  private final CollectiveMapper<?, ?, ?, ?> mapper;
  private final int[] members;
  private final int rank;

  Group(CollectiveMapper<?, ?, ?, ?> mapper, int[] members, int rank) {
    this.mapper = mapper;
    this.members = members;
    this.rank = rank;
  }

  /** This worker's group rank. */
  public int rank() {
    return rank;
  }

  /** The number of members. */
  public int size() {
    return members.length;
  }

  /** The members' world ranks in group-rank order (a copy). */
  public int[] members() {
    return members.clone();
  }

  public void barrier(String label) {
    mapper.collective(w -> w.barrier(members, label));
  }

  /** Every member's table becomes a copy of the root's (a group rank). */
  public void broadcast(String label, Table t, Options o) {
    mapper.collective(w -> w.broadcast(members, label, t, o));
  }

  /** The root's table becomes the combination of the members' tables; the others are emptied. */
  public void reduce(String label, Table t, Options o) {
    mapper.collective(w -> w.reduce(members, label, t, o));
  }

  /** The root's table becomes the union of the members' tables; the others are unchanged. */
  public void gather(String label, Table t, Options o) {
    mapper.collective(w -> w.gather(members, label, t, o));
  }

  /** The root's partitions go to their owners (group ranks under {@code p}, null: modulo the group size). */
  public void scatter(String label, Table t, Partitioner p, Options o) {
    mapper.collective(w -> w.scatter(members, label, t, p, o));
  }

  /**
   * Every member's table becomes the union of the members' tables (equal ids combined); pipelined
   * per partition when the options give the total number of partitions.
   */
  public void allgather(String label, Table t, Options o) {
    mapper.collective(w -> w.allgather(members, label, t, o));
  }

  /** Every member's table becomes the combination of the members' tables. */
  public void allreduce(String label, Table t, Options o) {
    mapper.collective(w -> w.allreduce(members, label, t, o));
  }

  /** Each member ends with the combined partitions it owns under {@code p} (group ranks; null: modulo). */
  public void reduceScatter(String label, Table t, Partitioner p) {
    mapper.collective(w -> w.reduceScatter(members, label, t, p));
  }

  /** Partitions move to their owners under {@code p} (group ranks; null: modulo) and are combined there. */
  public void regroup(String label, Table t, Partitioner p) {
    mapper.collective(w -> w.regroup(members, label, t, p));
  }

  /** Regroup whose owners the group's first member decides from the actual distribution of the partitions. */
  public void regroupPlanned(String label, Table t) {
    mapper.collective(w -> w.regroupPlanned(members, label, t));
  }

  /**
   * Regroup edges among the members: every edge goes to the member holding the vertex partition of
   * its source ({@code bySource}) or destination, among {@code partitions} vertex partitions
   * (partition {@code hash(v) mod partitions}, held by group rank {@code partition mod size()}).
   */
  public void regroupEdges(String label, EdgeTable edges, boolean bySource, int partitions) {
    mapper.collective(w -> w.regroupEdges(members, label, edges, bySource, partitions));
  }

  /** Every edge goes to the member that holds its source's (or destination's) partition in {@code vertices}. */
  public void sendEdgesToVertices(String label, EdgeTable edges, boolean bySource, KeyValueTable vertices,
      int partitions) {
    mapper.collective(w -> w.sendEdgesToVertices(members, label, edges, bySource, vertices, partitions));
  }

  /** Messages (i64 vertex keys) move to the members holding their vertices and are combined there. */
  public void sendMessages(String label, KeyValueTable messages) {
    mapper.collective(w -> w.sendMessages(members, label, messages));
  }

  /** Local partitions are combined into their owners' (group ranks under {@code p}) global tables. */
  public void push(String label, Table local, Table global, Partitioner p) {
    mapper.collective(w -> w.push(members, label, local, global, p));
  }

  /** Local partitions are replaced by their owners' (group ranks) global copies. */
  public void pull(String label, Table local, Table global, Partitioner p) {
    mapper.collective(w -> w.pull(members, label, local, global, p));
  }

  /** Tables move to the next member ({@code map} null) or along the permutation {@code map} of group ranks. */
  public void rotate(String label, Table t, int[] map) {
    mapper.collective(w -> w.rotate(members, label, t, map));
  }

  @Override
  public String toString() {
    return "group " + Arrays.toString(members) + " (rank " + rank + ")";
  }
}
