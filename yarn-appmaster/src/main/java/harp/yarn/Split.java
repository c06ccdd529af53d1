package harp.yarn;

import java.util.List;

/** An input split as the master sees it: its index, size and the hosts holding its data. */
public final class Split extends Value {
  private final int index;
  private final long length;
  private final List<String> hosts;

  public Split(int index, long length, List<String> hosts) {
    this.index = index;
    this.length = length;
    this.hosts = hosts;
  }

  public int index() {
    return index;
  }

  public long length() {
    return length;
  }

  public List<String> hosts() {
    return hosts;
  }

  @Override
  Object[] fields() {
    return new Object[] {index, length, hosts};
  }

  @Override
  String[] names() {
    return new String[] {"index", "length", "hosts"};
  }
}
