package harp;

/**
 * Decides which worker owns a partition id. Must give the same answer on every worker and a value
 * in {@code [0, workers)}. The default (no partitioner) is {@code id mod workers}.
 */
@FunctionalInterface
public interface Partitioner {
  int owner(int partitionId, int workers);
}
