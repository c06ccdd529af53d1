package harp.yarn;

import java.util.List;

/** An input split as the master sees it: its index, size and the hosts holding its data. */
public record Split(int index, long length, List<String> hosts) {}
